// The client against a real S3 server (the Ceph radosgw of tools/s3_server.sh, found through CKPT_S3_TEST_ENV):
// what is stored is what comes back, conditions hold, multipart uploads assemble, listings page, and the server's
// refusals become the statuses s3_client.h promises.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <memory>

#include "io/s3/s3_client.h"
#include "tests/s3/client/s3_test_support.h"
#include "tests/unit/support/scoped_env.h"

namespace ckpt::s3 {
namespace {

class S3Server : public ::testing::Test {
 protected:
  void SetUp() override {
    std::optional<std::map<std::string, std::string>> env = testing::RealServerEnv();
    if (!env) {
      GTEST_SKIP() << "no S3 server: CKPT_S3_TEST_ENV is unset or names no file; run through ctest (fixture "
                      "s3_server, which needs Ceph), or run tools/s3_server.sh start DIR and set "
                      "CKPT_S3_TEST_ENV=DIR/env";
    }
    env_ = *env;
    settings_.endpoint = env_["AWS_ENDPOINT_URL"];
    settings_.access_key_id = env_["AWS_ACCESS_KEY_ID"];
    settings_.secret_access_key = env_["AWS_SECRET_ACCESS_KEY"];
    settings_.region = env_.count("AWS_REGION") ? env_["AWS_REGION"] : "us-east-1";
    bucket_ = env_["CKPT_S3_TEST_BUCKET"];
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    // Unique per run, so that a repeated test (--gtest_repeat) finds none of its earlier objects.
    prefix_ = "client-test/" + std::to_string(getpid()) + "-" +
              std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + "-" + test->name() + "/";
    client_ = Make(settings_);
  }

  std::unique_ptr<Client> Make(const Settings& settings) {
    Result<std::unique_ptr<Client>> client = Client::Create(settings);
    if (!client.ok()) {
      ADD_FAILURE() << client.status().message();
      return nullptr;
    }
    return std::move(client).value();
  }

  std::map<std::string, std::string> env_;
  Settings settings_;
  std::string bucket_, prefix_;
  std::unique_ptr<Client> client_;
};

// Bytes that differ at every offset, so that a misplaced range shows.
std::string Pattern(size_t size) {
  std::string data(size, '\0');
  for (size_t i = 0; i < size; ++i) data[i] = static_cast<char>((i * 131 + i / 251) & 0xff);
  return data;
}

TEST_F(S3Server, PutGetHeadDelete) {
  std::string key = prefix_ + "obj-1.bin";
  std::string data = Pattern(100000);
  Result<std::string> etag = client_->Put(bucket_, key, data);
  ASSERT_TRUE(etag.ok()) << etag.status().message();
  Result<ObjectInfo> head = client_->Head(bucket_, key);
  ASSERT_TRUE(head.ok()) << head.status().message();
  EXPECT_EQ(head->size, data.size());
  EXPECT_EQ(head->etag, *etag);
  EXPECT_GT(head->last_modified_unix, 1700000000);
  Result<std::string> body = client_->Get(bucket_, key, data.size());
  ASSERT_TRUE(body.ok()) << body.status().message();
  EXPECT_TRUE(*body == data);
  ASSERT_TRUE(client_->Delete(bucket_, key).ok());
  Result<std::string> gone = client_->Get(bucket_, key, data.size());
  EXPECT_EQ(gone.status().code(), Code::kNotFound);
  EXPECT_NE(gone.status().message().find("GET failed: HTTP 404 NoSuchKey"), std::string::npos)
      << gone.status().message();
  EXPECT_EQ(client_->Head(bucket_, key).status().code(), Code::kNotFound);
  EXPECT_TRUE(client_->Delete(bucket_, key).ok()) << "deleting a missing key succeeds";
}

TEST_F(S3Server, KeysWithAnyCharacterRoundTrip) {
  std::string key = prefix_ + "odd name+=&;é~_(1)!.bin";
  ASSERT_TRUE(client_->Put(bucket_, key, "x").ok());
  Result<std::string> body = client_->Get(bucket_, key, 10);
  ASSERT_TRUE(body.ok()) << body.status().message();
  EXPECT_EQ(*body, "x");
  auto listed = client_->List(bucket_, prefix_);
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].key, key);
}

TEST_F(S3Server, ConditionalCreateTwiceIsAlreadyExists) {
  std::string key = prefix_ + "once";
  Condition create{Condition::Kind::kIfNoneMatch, ""};
  ASSERT_TRUE(client_->Put(bucket_, key, "first", create).ok());
  Result<std::string> again = client_->Put(bucket_, key, "second", create);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Code::kAlreadyExists) << again.status().message();
  EXPECT_EQ(client_->Get(bucket_, key, 100).value(), "first");
}

TEST_F(S3Server, IfMatchReplacesOnlyTheObjectExpected) {
  std::string key = prefix_ + "swap";
  Result<std::string> etag = client_->Put(bucket_, key, "v1");
  ASSERT_TRUE(etag.ok()) << etag.status().message();
  Result<std::string> stale = client_->Put(bucket_, key, "v2", {Condition::Kind::kIfMatch, "\"0123456789abcdef\""});
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), Code::kMismatch) << stale.status().message();
  EXPECT_TRUE(client_->Put(bucket_, key, "v3", {Condition::Kind::kIfMatch, *etag}).ok());
  EXPECT_EQ(client_->Get(bucket_, key, 100).value(), "v3");
}

TEST_F(S3Server, MultipartUploadAssemblesPartsReadAcrossBoundaries) {
  std::string key = prefix_ + "multi.bin";
  constexpr size_t kPart = 5 << 20;
  std::string data = Pattern(2 * kPart + 1);
  Result<std::string> upload_id = client_->CreateMultipartUpload(bucket_, key);
  ASSERT_TRUE(upload_id.ok()) << upload_id.status().message();
  std::vector<PartUpload> parts{
      {1, data.data(), kPart, ""}, {2, data.data() + kPart, kPart, ""}, {3, data.data() + 2 * kPart, 1, ""}};
  ASSERT_TRUE(client_->UploadParts(bucket_, key, *upload_id, parts).ok());
  Result<std::string> etag = client_->CompleteMultipartUpload(bucket_, key, *upload_id, parts);
  ASSERT_TRUE(etag.ok()) << etag.status().message();
  EXPECT_NE(etag->find("-3"), std::string::npos) << "a multipart ETag ends in its part count: " << *etag;
  Result<ObjectInfo> head = client_->Head(bucket_, key);
  ASSERT_TRUE(head.ok()) << head.status().message();
  EXPECT_EQ(head->size, data.size());

  std::vector<std::pair<uint64_t, uint64_t>> ranges{{0, 100}, {kPart - 10, 20}, {2 * kPart - 5, 6}, {kPart, kPart}};
  std::vector<std::string> buffers;
  std::vector<RangeRead> reads;
  for (auto [offset, length] : ranges) buffers.emplace_back(length, '\0');
  for (size_t i = 0; i < ranges.size(); ++i) {
    reads.push_back({key, ranges[i].first, ranges[i].second, buffers[i].data()});
  }
  ASSERT_TRUE(client_->GetRanges(bucket_, reads).ok());
  for (size_t i = 0; i < ranges.size(); ++i) {
    EXPECT_TRUE(buffers[i] == data.substr(ranges[i].first, ranges[i].second)) << "range " << i;
  }
  std::vector<char> past(10);
  std::vector<RangeRead> beyond{{key, data.size() - 5, 10, past.data()}};
  EXPECT_FALSE(client_->GetRanges(bucket_, beyond).ok()) << "a range past the end cannot come back whole";
}

TEST_F(S3Server, ListPagesThroughEveryKey) {
  settings_.list_page_keys = 7;
  auto client = Make(settings_);
  ASSERT_TRUE(client);
  std::vector<std::string> keys;
  for (int i = 0; i < 25; ++i) {
    char name[16];
    snprintf(name, sizeof(name), "k%03d", i);
    keys.push_back(prefix_ + name);
    ASSERT_TRUE(client->Put(bucket_, keys.back(), name).ok());
  }
  RequestCounts before = client->counts();
  auto listed = client->List(bucket_, prefix_);
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  ASSERT_EQ(listed->size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ((*listed)[i].key, keys[i]);
    EXPECT_EQ((*listed)[i].size, 4u);
  }
  EXPECT_EQ(client->counts().list - before.list, 4u) << "25 keys in pages of 7";
  auto first = client->List(bucket_, prefix_, 10);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->size(), 10u);
}

TEST_F(S3Server, MultipartUploadsAreListedAndAborted) {
  Result<std::string> a = client_->CreateMultipartUpload(bucket_, prefix_ + "a");
  Result<std::string> b = client_->CreateMultipartUpload(bucket_, prefix_ + "b");
  ASSERT_TRUE(a.ok() && b.ok());
  auto uploads = client_->ListMultipartUploads(bucket_, prefix_);
  ASSERT_TRUE(uploads.ok()) << uploads.status().message();
  ASSERT_EQ(uploads->size(), 2u);
  EXPECT_EQ((*uploads)[0].key, prefix_ + "a");
  EXPECT_EQ((*uploads)[0].upload_id, *a);
  EXPECT_GT((*uploads)[0].initiated_unix, 1700000000);
  ASSERT_TRUE(client_->AbortMultipartUpload(bucket_, prefix_ + "a", *a).ok());
  ASSERT_TRUE(client_->AbortMultipartUpload(bucket_, prefix_ + "b", *b).ok());
  EXPECT_TRUE(client_->AbortMultipartUpload(bucket_, prefix_ + "b", *b).ok()) << "aborting twice succeeds";
  uploads = client_->ListMultipartUploads(bucket_, prefix_);
  ASSERT_TRUE(uploads.ok()) << uploads.status().message();
  EXPECT_TRUE(uploads->empty());
}

TEST_F(S3Server, WrongSecretIsInvalidArgumentNamingTheKey) {
  settings_.secret_access_key = "not-the-secret";
  auto client = Make(settings_);
  ASSERT_TRUE(client);
  Result<std::string> etag = client->Put(bucket_, prefix_ + "x", "x");
  ASSERT_FALSE(etag.ok());
  EXPECT_EQ(etag.status().code(), Code::kInvalidArgument);
  EXPECT_NE(etag.status().message().find("refused for access key " + settings_.access_key_id), std::string::npos)
      << etag.status().message();
}

TEST_F(S3Server, MissingBucketIsNotFound) {
  Result<std::string> etag = client_->Put("ckpt-no-such-bucket-x", "k", "x");
  ASSERT_FALSE(etag.ok());
  EXPECT_EQ(etag.status().code(), Code::kNotFound);
  EXPECT_NE(etag.status().message().find("bucket 'ckpt-no-such-bucket-x' does not exist at " + settings_.endpoint),
            std::string::npos)
      << etag.status().message();
}

TEST_F(S3Server, SharedClientIsRemadeWhenTheEnvironmentChanges) {
  ckpt::testing::ScopedEnv endpoint("AWS_ENDPOINT_URL", settings_.endpoint);
  ckpt::testing::ScopedEnv key("AWS_ACCESS_KEY_ID", settings_.access_key_id);
  ckpt::testing::ScopedEnv region("AWS_REGION", settings_.region);
  std::optional<ckpt::testing::ScopedEnv> secret;
  secret.emplace("AWS_SECRET_ACCESS_KEY", settings_.secret_access_key);
  Result<Client*> first = SharedClient();
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(SharedClient().value(), *first) << "the same environment, the same client";
  EXPECT_TRUE((*first)->Put(bucket_, prefix_ + "shared", "x").ok());
  secret.reset();
  secret.emplace("AWS_SECRET_ACCESS_KEY", "swapped-secret");
  Result<Client*> second = SharedClient();
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_NE(*second, *first);
  EXPECT_EQ((*second)->Put(bucket_, prefix_ + "shared", "x").status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace ckpt::s3

// The client against tests/s3/hostile_server.py: requests well formed and signed, replies read into the caller's
// memory, and every misbehaviour of a server (truncated and overlong bodies, malformed XML, error documents in a
// 200, throttling, stalls, resets, refusals) answered with the right status, in bounded time, retried as S3 advises.
// ctest-labels: threaded
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "io/s3/s3_client.h"
#include "tests/s3/client/s3_test_support.h"

namespace ckpt::s3 {
namespace {

using testing::HostileServer;

constexpr char kBucket[] = "bucket";

std::unique_ptr<Client> MakeClient(const Settings& settings) {
  Result<std::unique_ptr<Client>> client = Client::Create(settings);
  if (!client.ok()) ADD_FAILURE() << client.status().message();
  return client.ok() ? std::move(client).value() : nullptr;
}

bool Contains(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

TEST(S3Hostile, SignedRequestsRoundTripAnObject) {
  HostileServer server("store");
  auto client = MakeClient(server.MakeSettings());
  ASSERT_TRUE(client);
  std::string key = "dir/a key+x.bin";  // spaces and '+' travel percent-encoded
  Result<std::string> etag = client->Put(kBucket, key, "hello, s3");
  ASSERT_TRUE(etag.ok()) << etag.status().message();
  EXPECT_EQ(etag->size(), 34u) << "the ETag as the server quotes it";
  ObjectInfo info;
  Result<std::string> body = client->Get(kBucket, key, 1 << 20, &info);
  ASSERT_TRUE(body.ok()) << body.status().message();
  EXPECT_EQ(*body, "hello, s3");
  EXPECT_EQ(info.etag, *etag);
  EXPECT_EQ(info.size, 9u);
  Result<ObjectInfo> head = client->Head(kBucket, key);
  ASSERT_TRUE(head.ok()) << head.status().message();
  EXPECT_EQ(head->size, 9u);
  EXPECT_EQ(head->last_modified_unix, 1796212800);
  ASSERT_TRUE(client->Delete(kBucket, key).ok());
  ASSERT_TRUE(client->Delete(kBucket, key).ok()) << "deleting a missing key succeeds";
  Result<std::string> gone = client->Get(kBucket, key, 1 << 20);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), Code::kNotFound);
  EXPECT_EQ(gone.status().message(),
            "s3://bucket/dir/a key+x.bin: GET failed: HTTP 404 NoSuchKey (The specified key does not exist.)");
}

TEST(S3Hostile, RangedReadsLandInTheirDestinations) {
  HostileServer server("store");
  Settings settings = server.MakeSettings();
  settings.connections = 3;
  auto client = MakeClient(settings);
  ASSERT_TRUE(client);
  std::string data;
  for (int i = 0; i < 1000; ++i) data += static_cast<char>('a' + i % 26);
  ASSERT_TRUE(client->Put(kBucket, "k", data).ok());
  std::vector<char> buffer(1000, '\0');
  std::vector<RangeRead> reads;
  for (uint64_t offset = 0; offset < 1000; offset += 100) reads.push_back({"k", offset, 100, buffer.data() + offset});
  reads.push_back({"k", 5, 0, nullptr});  // nothing to read: no request
  RequestCounts before = client->counts();
  ASSERT_TRUE(client->GetRanges(kBucket, reads).ok());
  EXPECT_EQ(std::string(buffer.begin(), buffer.end()), data);
  EXPECT_EQ(client->counts().get - before.get, 10u);
}

TEST(S3Hostile, UploadPartsFillTheirEtags) {
  HostileServer server("store");
  auto client = MakeClient(server.MakeSettings());
  ASSERT_TRUE(client);
  std::string a(1000, 'a'), b(10, 'b');
  std::vector<PartUpload> parts{{1, a.data(), a.size(), ""}, {2, b.data(), b.size(), ""}};
  ASSERT_TRUE(client->UploadParts(kBucket, "k", "upload-1", parts).ok());
  EXPECT_EQ(parts[0].etag.size(), 34u);
  EXPECT_NE(parts[0].etag, parts[1].etag);
  std::vector<PartUpload> bad{{0, a.data(), a.size(), ""}};
  EXPECT_EQ(client->UploadParts(kBucket, "k", "upload-1", bad).code(), Code::kInvalidArgument);
}

TEST(S3Hostile, ThreadsShareOneClient) {
  HostileServer server("store");
  auto client = MakeClient(server.MakeSettings());
  ASSERT_TRUE(client);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        std::string key = "t" + std::to_string(t) + "/" + std::to_string(i);
        if (!client->Put(kBucket, key, key).ok()) ++failures;
        Result<std::string> body = client->Get(kBucket, key, 100);
        if (!body.ok() || *body != key) ++failures;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(client->counts().put, 80u);
  EXPECT_EQ(client->counts().get, 80u);
}

TEST(S3Hostile, SessionTokenAndPayloadHashAreSentAndSigned) {
  HostileServer server("store");
  Settings settings = server.MakeSettings();
  settings.session_token = "token-123";
  auto client = MakeClient(settings);
  ASSERT_TRUE(client);
  Result<std::string> headers = client->Get(kBucket, "__headers", 1 << 16);
  ASSERT_TRUE(headers.ok()) << headers.status().message();
  EXPECT_TRUE(headers->find("x-amz-security-token: token-123") != std::string::npos) << *headers;
  EXPECT_TRUE(headers->find("x-amz-content-sha256: UNSIGNED-PAYLOAD") != std::string::npos) << *headers;
  EXPECT_TRUE(headers->find("Credential=AKIAHOSTILE/") != std::string::npos) << *headers;
  EXPECT_TRUE(headers->find("/us-east-1/s3/aws4_request") != std::string::npos) << *headers;
  EXPECT_TRUE(headers->find("x-amz-content-sha256;x-amz-date;x-amz-security-token") != std::string::npos)
      << "signed headers: " << *headers;
}

TEST(S3Hostile, SequentialCallsReuseOneConnection) {
  HostileServer server("store");
  auto client = MakeClient(server.MakeSettings());
  ASSERT_TRUE(client);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(client->Put(kBucket, "k" + std::to_string(i), "x").ok());
  std::thread other([&] { ASSERT_TRUE(client->Put(kBucket, "from-another-thread", "x").ok()); });
  other.join();
  Result<std::string> connections = client->Get(kBucket, "__connections", 100);
  ASSERT_TRUE(connections.ok()) << connections.status().message();
  EXPECT_EQ(*connections, "1");
}

TEST(S3Hostile, ParallelReadsStopStartingAfterTheFirstFailure) {
  HostileServer server("long-range");
  Settings settings = server.MakeSettings();
  settings.connections = 1;
  auto client = MakeClient(settings);
  ASSERT_TRUE(client);
  std::vector<char> buffer(1000);
  std::vector<RangeRead> reads;
  for (uint64_t offset = 0; offset < 1000; offset += 100) reads.push_back({"k", offset, 100, buffer.data() + offset});
  EXPECT_EQ(client->GetRanges(kBucket, reads).code(), Code::kCorrupt);
  EXPECT_EQ(client->counts().get, 1u);
}

TEST(S3Hostile, ObjectLargerThanAskedIsCorrupt) {
  HostileServer server("store");
  auto client = MakeClient(server.MakeSettings());
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->Put(kBucket, "big", std::string(100, 'x')).ok());
  Result<std::string> body = client->Get(kBucket, "big", 99);
  ASSERT_FALSE(body.ok());
  EXPECT_EQ(body.status().code(), Code::kCorrupt);
  EXPECT_TRUE(Contains(body.status(), "longer than the 99 bytes")) << body.status().message();
}

TEST(S3Hostile, TruncatedBodyIsRetriedThenCorrupt) {
  HostileServer server("truncated");
  auto client = MakeClient(server.MakeSettings(3));
  ASSERT_TRUE(client);
  Result<std::string> body = client->Get(kBucket, "k", 1 << 20);
  ASSERT_FALSE(body.ok());
  EXPECT_EQ(body.status().code(), Code::kCorrupt);
  EXPECT_TRUE(Contains(body.status(), "truncated (10 of 1000 bytes came) after 3 attempts")) << body.status().message();
  EXPECT_EQ(client->counts().get, 3u);
  EXPECT_EQ(client->counts().retries, 2u);
}

TEST(S3Hostile, BodyLongerThanTheRangeIsCorruptAndWritesNothingPastIt) {
  HostileServer server("long-range");
  auto client = MakeClient(server.MakeSettings());
  ASSERT_TRUE(client);
  std::vector<char> buffer(200, '#');
  std::vector<RangeRead> reads{{"k", 10, 100, buffer.data()}};
  Status status = client->GetRanges(kBucket, reads);
  EXPECT_EQ(status.code(), Code::kCorrupt);
  EXPECT_TRUE(Contains(status, "s3://bucket/k: GET bytes=10-109 failed: the reply's body is longer than the 100 bytes"))
      << status.message();
  EXPECT_EQ(std::string(buffer.begin() + 100, buffer.end()), std::string(100, '#'));
  EXPECT_EQ(client->counts().get, 1u) << "an overlong body is not retried";
}

TEST(S3Hostile, MalformedXmlIsCorruptNamingTheRequest) {
  HostileServer server("malformed-xml");
  auto client = MakeClient(server.MakeSettings());
  ASSERT_TRUE(client);
  auto listing = client->List(kBucket, "p");
  ASSERT_FALSE(listing.ok());
  EXPECT_EQ(listing.status().code(), Code::kCorrupt);
  EXPECT_TRUE(Contains(listing.status(), "s3://bucket/p: ListObjectsV2: malformed XML")) << listing.status().message();
  Result<std::string> upload = client->CreateMultipartUpload(kBucket, "k");
  ASSERT_FALSE(upload.ok());
  EXPECT_EQ(upload.status().code(), Code::kCorrupt);
  EXPECT_TRUE(Contains(upload.status(), "CreateMultipartUpload")) << upload.status().message();
}

TEST(S3Hostile, CompleteAnswered200WithInternalErrorIsRetriedThenIo) {
  HostileServer server("complete-error", "InternalError");
  auto client = MakeClient(server.MakeSettings(3));
  ASSERT_TRUE(client);
  std::vector<PartUpload> parts{{1, nullptr, 0, "\"e1\""}};
  Result<std::string> etag = client->CompleteMultipartUpload(kBucket, "k", "u", parts);
  ASSERT_FALSE(etag.ok());
  EXPECT_EQ(etag.status().code(), Code::kIo);
  EXPECT_TRUE(Contains(etag.status(), "HTTP 200 carrying an error document InternalError")) << etag.status().message();
  EXPECT_EQ(client->counts().post, 3u);
}

TEST(S3Hostile, CompleteAnswered200WithAnotherErrorIsCorrupt) {
  HostileServer server("complete-error", "InvalidPart");
  auto client = MakeClient(server.MakeSettings(3));
  ASSERT_TRUE(client);
  std::vector<PartUpload> parts{{1, nullptr, 0, "\"e1\""}};
  Result<std::string> etag = client->CompleteMultipartUpload(kBucket, "k", "u", parts);
  ASSERT_FALSE(etag.ok());
  EXPECT_EQ(etag.status().code(), Code::kCorrupt);
  EXPECT_EQ(client->counts().post, 1u);
}

TEST(S3Hostile, SlowDownIsRetriedUntilItPasses) {
  HostileServer server("slowdown", "2");
  auto client = MakeClient(server.MakeSettings(4));
  ASSERT_TRUE(client);
  Result<std::string> etag = client->Put(kBucket, "k", "body");
  ASSERT_TRUE(etag.ok()) << etag.status().message();
  EXPECT_EQ(client->counts().put, 3u);
  EXPECT_EQ(client->counts().retries, 2u);
}

TEST(S3Hostile, SlowDownPastTheAttemptsIsIo) {
  HostileServer server("slowdown", "100");
  auto client = MakeClient(server.MakeSettings(2));
  ASSERT_TRUE(client);
  Result<std::string> etag = client->Put(kBucket, "k", "body");
  ASSERT_FALSE(etag.ok());
  EXPECT_EQ(etag.status().code(), Code::kIo);
  EXPECT_EQ(etag.status().message(),
            "s3://bucket/k: PUT failed after 2 attempts: HTTP 503 SlowDown (Please reduce your request rate.)");
}

TEST(S3Hostile, StalledRequestIsReissuedThenTimesOut) {
  HostileServer server("stall");
  auto client = MakeClient(server.MakeSettings(2));
  ASSERT_TRUE(client);
  auto start = std::chrono::steady_clock::now();
  Result<std::string> body = client->Get(kBucket, "k", 100);
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(body.ok());
  EXPECT_EQ(body.status().code(), Code::kTimeout);
  EXPECT_TRUE(Contains(body.status(), "stalled")) << body.status().message();
  EXPECT_EQ(client->counts().get, 2u);
  EXPECT_LT(elapsed, std::chrono::seconds(10));
}

TEST(S3Hostile, ConnectionResetIsRetriedThenIo) {
  HostileServer server("reset");
  auto client = MakeClient(server.MakeSettings(3));
  ASSERT_TRUE(client);
  Result<std::string> body = client->Get(kBucket, "k", 100);
  ASSERT_FALSE(body.ok());
  EXPECT_EQ(body.status().code(), Code::kIo);
  EXPECT_TRUE(Contains(body.status(), "after 3 attempts")) << body.status().message();
  EXPECT_EQ(client->counts().get, 3u);
}

TEST(S3Hostile, UnreachableEndpointIsIoQuickly) {
  Settings settings;
  settings.endpoint = "http://127.0.0.1:1";
  settings.access_key_id = "k";
  settings.secret_access_key = "s";
  settings.max_attempts = 2;
  auto client = MakeClient(settings);
  ASSERT_TRUE(client);
  auto start = std::chrono::steady_clock::now();
  Result<ObjectInfo> head = client->Head(kBucket, "k");
  ASSERT_FALSE(head.ok());
  EXPECT_EQ(head.status().code(), Code::kIo);
  EXPECT_TRUE(Contains(head.status(), "cannot reach the S3 endpoint http://127.0.0.1:1 after 2 attempts: "))
      << head.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(S3Hostile, MissingBucketIsNotFoundNamingTheEndpoint) {
  HostileServer server("status", "404:NoSuchBucket");
  auto client = MakeClient(server.MakeSettings());
  ASSERT_TRUE(client);
  Result<std::string> body = client->Get(kBucket, "k", 100);
  ASSERT_FALSE(body.ok());
  EXPECT_EQ(body.status().code(), Code::kNotFound);
  EXPECT_EQ(body.status().message(), "bucket 'bucket' does not exist at " + server.endpoint() +
                                         " (HTTP 404 NoSuchBucket (injected by hostile_server.py))");
  EXPECT_EQ(client->Delete(kBucket, "k").code(), Code::kNotFound) << "a missing bucket is not a missing key";
}

TEST(S3Hostile, RefusedSignatureIsInvalidArgumentNamingTheKey) {
  HostileServer server("status", "403:SignatureDoesNotMatch");
  auto client = MakeClient(server.MakeSettings());
  ASSERT_TRUE(client);
  Result<std::string> etag = client->Put(kBucket, "k", "x");
  ASSERT_FALSE(etag.ok());
  EXPECT_EQ(etag.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(Contains(etag.status(),
                       "access to s3://bucket/k refused for access key AKIAHOSTILE (HTTP 403 "
                       "SignatureDoesNotMatch"))
      << etag.status().message();
  EXPECT_EQ(client->counts().put, 1u) << "a 403 is not retried";
}

TEST(S3Hostile, PreconditionFailedMeansWhatTheConditionWas) {
  HostileServer server("status", "412:PreconditionFailed");
  auto client = MakeClient(server.MakeSettings());
  ASSERT_TRUE(client);
  Condition create{Condition::Kind::kIfNoneMatch, ""};
  EXPECT_EQ(client->Put(kBucket, "k", "x", create).status().code(), Code::kAlreadyExists);
  Condition replace{Condition::Kind::kIfMatch, "\"abc\""};
  EXPECT_EQ(client->Put(kBucket, "k", "x", replace).status().code(), Code::kMismatch);
}

TEST(S3Hostile, ServerErrorsAreRetriedClientErrorsAreNot) {
  {
    HostileServer server("status", "500:InternalError");
    auto client = MakeClient(server.MakeSettings(3));
    ASSERT_TRUE(client);
    EXPECT_EQ(client->Head(kBucket, "k").status().code(), Code::kIo);
    EXPECT_EQ(client->counts().head, 3u);
  }
  {
    HostileServer server("status", "400:RequestTimeout");  // S3 sends its RequestTimeout as a 400
    auto client = MakeClient(server.MakeSettings(2));
    ASSERT_TRUE(client);
    EXPECT_FALSE(client->Put(kBucket, "k", "x").ok());
    EXPECT_EQ(client->counts().put, 2u);
  }
  {
    HostileServer server("status", "400:InvalidArgument");
    auto client = MakeClient(server.MakeSettings(3));
    ASSERT_TRUE(client);
    EXPECT_EQ(client->Put(kBucket, "k", "x").status().code(), Code::kInvalidArgument);
    EXPECT_EQ(client->counts().put, 1u);
  }
}

}  // namespace
}  // namespace ckpt::s3

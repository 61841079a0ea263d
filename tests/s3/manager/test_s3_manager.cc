// CheckpointManager with its root on S3: the latest step from one GET and no LIST, the `steps` index kept whole
// under racing publishers, retention that leaves no committed-looking remains, and cleanup of dead saves only.
// Needs a server: CKPT_S3_TEST_ENV names a file of NAME=VALUE lines (tools/s3_server.sh start DIR writes DIR/env).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "io/file_io.h"
#include "io/object_storage.h"
#include "io/s3/s3_client.h"
#include "runtime/format/manifest.h"
#include "runtime/format/save_directory.h"
#include "runtime/manager/manager.h"
#include "runtime/manager/step_record.h"
#include "tests/s3/client/s3_test_support.h"
#include "tests/unit/support/scoped_env.h"

namespace ckpt::runtime {
namespace {

using Steps = std::vector<uint64_t>;
using Names = std::vector<std::string>;

// Exports the server's settings (tests/s3/client/s3_test_support.h reads them); false when no server is named.
bool LoadServerEnvironment(std::string* bucket) {
  const std::optional<std::map<std::string, std::string>> values = s3::testing::RealServerEnv();
  if (!values || values->count("CKPT_S3_TEST_BUCKET") == 0) return false;
  for (const auto& [name, value] : *values) setenv(name.c_str(), value.c_str(), /*overwrite=*/1);
  *bucket = values->at("CKPT_S3_TEST_BUCKET");
  return true;
}

s3::RequestCounts Counts() {
  Result<s3::Client*> client = s3::SharedClient();
  EXPECT_TRUE(client.ok()) << client.status().message();
  return client.ok() ? (*client)->counts() : s3::RequestCounts{};
}

s3::RequestCounts Since(const s3::RequestCounts& before) {
  const s3::RequestCounts now = Counts();
  return s3::RequestCounts{now.get - before.get,        now.put - before.put,   now.head - before.head,
                           now.del - before.del,        now.list - before.list, now.post - before.post,
                           now.retries - before.retries};
}

std::string Describe(const s3::RequestCounts& c) {
  return "GET " + std::to_string(c.get) + ", HEAD " + std::to_string(c.head) + ", PUT " + std::to_string(c.put) +
         ", DELETE " + std::to_string(c.del) + ", LIST " + std::to_string(c.list) + ", POST " + std::to_string(c.post) +
         " (retries " + std::to_string(c.retries) + ")";
}

uint64_t Total(const s3::RequestCounts& c) { return c.get + c.put + c.head + c.del + c.list + c.post; }

class S3ManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string bucket;
    if (!LoadServerEnvironment(&bucket)) GTEST_SKIP() << "CKPT_S3_TEST_ENV names no S3 server (tools/s3_server.sh)";
    std::random_device entropy;
    root_ = "s3://" + bucket + "/manager-tests/" + std::to_string(entropy()) + std::to_string(entropy()) + "/run";
    manager_ = ClaimRoot(RetentionPolicy{});
  }
  void TearDown() override {
    if (!root_.empty()) (void)io::RemoveObjectsUnder(root_);
  }

  std::unique_ptr<CheckpointManager> ClaimRoot(RetentionPolicy policy) {
    std::string warning;
    Result<std::unique_ptr<CheckpointManager>> claimed =
        CheckpointManager::Claim(root_, policy, "the test's manager", &warning);
    EXPECT_TRUE(claimed.ok()) << claimed.status().message();
    return claimed.ok() ? std::move(claimed).value() : nullptr;
  }
  std::unique_ptr<CheckpointManager> OpenRoot() {
    Result<std::unique_ptr<CheckpointManager>> opened = CheckpointManager::Open(root_, RetentionPolicy{});
    EXPECT_TRUE(opened.ok()) << opened.status().message();
    return opened.ok() ? std::move(opened).value() : nullptr;
  }

  std::string Url(const std::string& name) const { return io::JoinPath(root_, name); }
  std::string StepUrl(uint64_t step, const std::string& name) const {
    return io::JoinPath(io::JoinPath(root_, StepDirectoryName(step)), name);
  }
  void Put(const std::string& url) {
    const Status put = io::CreateObjectExclusive(url, "bytes");
    ASSERT_TRUE(put.ok()) << put.message();
  }
  // What a save leaves before its commit: a data object and no MANIFEST.
  void MakeUncommitted(uint64_t step) { Put(StepUrl(step, "data/0123456789abcdef/0-0.bin")); }
  // A committed checkpoint as a save leaves it: its data, then its MANIFEST (the manager only checks presence).
  void Commit(uint64_t step) {
    MakeUncommitted(step);
    Put(StepUrl(step, kManifestName));
  }
  // Committed, adopted and published, as the session does after a save's commit.
  void SaveStep(uint64_t step) {
    Commit(step);
    manager_->AdoptStep(step);
    const Status published = manager_->PublishLatest(step);
    ASSERT_TRUE(published.ok()) << published.message();
  }

  Names ObjectsUnder(const std::string& url) const {
    Result<std::vector<io::StoredObject>> listed = io::ListObjects(url);
    EXPECT_TRUE(listed.ok()) << listed.status().message();
    Names names;
    if (listed.ok()) {
      for (const io::StoredObject& object : *listed) names.push_back(object.name);
    }
    std::sort(names.begin(), names.end());
    return names;
  }
  std::string Read(const std::string& name) const {
    Result<std::string> text = io::ReadObject(Url(name), 1 << 20);
    return text.ok() ? *text : "<" + text.status().message() + ">";
  }
  std::optional<uint64_t> Latest(const CheckpointManager& manager) const {
    Result<std::optional<uint64_t>> latest = manager.Latest();
    EXPECT_TRUE(latest.ok()) << latest.status().message();
    return latest.ok() ? *latest : std::nullopt;
  }
  Steps Committed(const CheckpointManager& manager) const {
    Result<Steps> steps = manager.CommittedSteps();
    EXPECT_TRUE(steps.ok()) << steps.status().message();
    return steps.ok() ? *steps : Steps{};
  }

  std::string root_;
  std::unique_ptr<CheckpointManager> manager_;
};

TEST_F(S3ManagerTest, ClaimOpensUnclaimedAndWarnsThatObjectStorageCannotLock) {
  std::string warning;
  Result<std::unique_ptr<CheckpointManager>> claimed =
      CheckpointManager::Claim(root_, RetentionPolicy{}, "a second job", &warning);
  ASSERT_TRUE(claimed.ok()) << claimed.status().message();
  EXPECT_NE(warning.find("is not claimed"), std::string::npos) << warning;
  EXPECT_NE(warning.find(root_), std::string::npos) << warning;
}

TEST_F(S3ManagerTest, RootThatIsAWholeBucketIsRefused) {
  const std::string bucket_only = root_.substr(0, root_.find('/', std::string("s3://").size()));
  EXPECT_EQ(CheckpointManager::Open(bucket_only, RetentionPolicy{}).status().code(), Code::kInvalidArgument);
}

TEST_F(S3ManagerTest, PublishWritesThePointerAndTheIndex) {
  SaveStep(3);
  SaveStep(12);
  EXPECT_EQ(Read(kLatestPointerName), "step-000000000012\n");
  EXPECT_EQ(Read(kStepIndexName), "step-000000000003\nstep-000000000012\n");
  EXPECT_EQ(Committed(*manager_), (Steps{3, 12}));
}

TEST_F(S3ManagerTest, PublishRefusesAnUncommittedStepAndAnOlderOneUnlessRollingBack) {
  MakeUncommitted(4);
  EXPECT_EQ(manager_->PublishLatest(4).code(), Code::kInvalidArgument);
  SaveStep(5);
  Commit(2);
  EXPECT_EQ(manager_->PublishLatest(2).code(), Code::kInvalidArgument);
  EXPECT_EQ(Read(kLatestPointerName), "step-000000000005\n");
  ASSERT_TRUE(manager_->PublishLatest(2, /*allow_older=*/true).ok());
  EXPECT_EQ(Latest(*manager_), 2u);
}

TEST_F(S3ManagerTest, LatestIsOneGetAndOneHeadAndNeverAList) {
  for (uint64_t step = 1; step <= 5; ++step) SaveStep(step);
  const std::unique_ptr<CheckpointManager> reader = OpenRoot();
  const s3::RequestCounts before = Counts();
  EXPECT_EQ(Latest(*reader), 5u);
  const s3::RequestCounts latest = Since(before);
  std::printf("Latest() on S3: %s\n", Describe(latest).c_str());
  EXPECT_EQ(latest.list, 0u);
  EXPECT_EQ(latest.get, 1u);
  EXPECT_LE(Total(latest), 2u);

  const s3::RequestCounts before_steps = Counts();
  EXPECT_EQ(Committed(*reader), (Steps{1, 2, 3, 4, 5}));
  const s3::RequestCounts steps = Since(before_steps);
  std::printf("CommittedSteps() on S3: %s\n", Describe(steps).c_str());
  EXPECT_EQ(steps.list, 0u);
  EXPECT_EQ(Total(steps), 1u);
}

TEST_F(S3ManagerTest, PointerNamingARemovedStepFallsBackToTheIndexWithoutAList) {
  for (uint64_t step = 1; step <= 3; ++step) SaveStep(step);
  // Deleted behind the manager's back: the pointer and the index both still name it.
  ASSERT_TRUE(io::RemoveObject(StepUrl(3, kManifestName)).ok());
  const s3::RequestCounts before = Counts();
  EXPECT_EQ(Latest(*manager_), 2u);
  const s3::RequestCounts fallback = Since(before);
  std::printf("Latest() past a removed step: %s\n", Describe(fallback).c_str());
  EXPECT_EQ(fallback.list, 0u);
}

TEST_F(S3ManagerTest, MissingPointerFallsBackToTheIndex) {
  SaveStep(7);
  SaveStep(8);
  ASSERT_TRUE(io::RemoveObject(Url(kLatestPointerName)).ok());
  const s3::RequestCounts before = Counts();
  EXPECT_EQ(Latest(*manager_), 8u);
  EXPECT_EQ(Since(before).list, 0u);
}

TEST_F(S3ManagerTest, LatestFailsRatherThanFindingNoStepWhenTheStoreCannotBeReached) {
  SaveStep(1);
  testing::ScopedEnv nowhere("AWS_ENDPOINT_URL", "http://127.0.0.1:1");
  testing::ScopedEnv once("AWS_MAX_ATTEMPTS", "1");
  const Result<std::optional<uint64_t>> latest = manager_->Latest();
  EXPECT_FALSE(latest.ok()) << "a resume would start over from step 0";
}

TEST_F(S3ManagerTest, RootWithoutAnIndexIsListedAndTheNextPublishIndexesEveryCommittedStep) {
  Commit(1);
  Commit(2);
  MakeUncommitted(3);
  EXPECT_EQ(Latest(*manager_), 2u);
  EXPECT_EQ(Committed(*manager_), (Steps{1, 2}));
  Commit(4);
  ASSERT_TRUE(manager_->PublishLatest(4).ok());
  EXPECT_EQ(Read(kStepIndexName), "step-000000000001\nstep-000000000002\nstep-000000000004\n");
}

TEST_F(S3ManagerTest, TwoManagersPublishingAtOnceNeverLoseAStepFromTheIndex) {
  constexpr uint64_t kSteps = 24;
  SaveStep(1);  // the index exists: every later publish adds to it by compare-and-swap
  const std::unique_ptr<CheckpointManager> other = OpenRoot();
  const s3::RequestCounts before = Counts();
  // Each commits and publishes every other step; a refusal to move the pointer back is expected, nothing else.
  auto commit_and_publish = [this](CheckpointManager* manager, uint64_t first, std::vector<Status>* failures) {
    for (uint64_t step = first; step <= kSteps; step += 2) {
      Status status = io::CreateObjectExclusive(StepUrl(step, kManifestName), "bytes");
      if (status.ok()) status = manager->PublishLatest(step);
      if (!status.ok() && status.code() != Code::kInvalidArgument) failures->push_back(status);
    }
  };
  std::vector<Status> failures_odd, failures_even;
  std::thread odd(commit_and_publish, manager_.get(), 3, &failures_odd);
  std::thread even(commit_and_publish, other.get(), 2, &failures_even);
  odd.join();
  even.join();
  for (const Status& failure : failures_odd) ADD_FAILURE() << failure.message();
  for (const Status& failure : failures_even) ADD_FAILURE() << failure.message();
  const s3::RequestCounts racing = Since(before);
  // Without a conflict: per step a MANIFEST PUT, an index PUT and at most a pointer PUT; more is a lost race retried.
  std::printf("two publishers, %llu steps: %s\n", static_cast<unsigned long long>(kSteps - 1),
              Describe(racing).c_str());

  Steps all(kSteps);
  for (uint64_t i = 0; i < kSteps; ++i) all[i] = i + 1;
  EXPECT_EQ(Committed(*manager_), all);
  EXPECT_EQ(Latest(*manager_), kSteps);
}

TEST_F(S3ManagerTest, RetentionKeepLastTwoRemovesOlderStepsManifestsAndData) {
  manager_ = ClaimRoot(RetentionPolicy{2, 0});
  for (uint64_t step = 1; step <= 4; ++step) SaveStep(step);
  Result<Steps> removed = manager_->ApplyRetention();
  ASSERT_TRUE(removed.ok()) << removed.status().message();
  EXPECT_EQ(*removed, (Steps{1, 2}));
  EXPECT_EQ(ObjectsUnder(Url(StepDirectoryName(1))), Names{});
  EXPECT_EQ(ObjectsUnder(Url(StepDirectoryName(2))), Names{});
  EXPECT_EQ(ObjectsUnder(Url(StepDirectoryName(3))), (Names{kManifestName, "data/0123456789abcdef/0-0.bin"}));
  EXPECT_EQ(Read(kStepIndexName), "step-000000000003\nstep-000000000004\n");
  EXPECT_EQ(Committed(*manager_), (Steps{3, 4}));
  EXPECT_EQ(Latest(*manager_), 4u);
}

TEST_F(S3ManagerTest, KeepBestJudgesStepsByTheirRecordsAndRemovesTheOthersWhole) {
  manager_ = ClaimRoot(RetentionPolicy{0, 0, 1, BestMode::kMin, 0});
  const double losses[] = {0.5, 0.1, 0.9, 0.7};
  for (uint64_t step = 1; step <= 4; ++step) {
    MakeUncommitted(step);
    const std::string dir = Url(StepDirectoryName(step));
    const StepRecord record{1, losses[step - 1], R"({"loss":)" + std::to_string(losses[step - 1]) + "}"};
    ASSERT_TRUE(WriteStepRecord(dir, record).ok());
    Put(StepUrl(step, kManifestName));
    manager_->AdoptStep(step);
    ASSERT_TRUE(manager_->PublishLatest(step).ok());
  }
  Result<Steps> removed = manager_->ApplyRetention();
  ASSERT_TRUE(removed.ok()) << removed.status().message();
  EXPECT_EQ(*removed, (Steps{1, 3}));
  EXPECT_EQ(ObjectsUnder(Url(StepDirectoryName(1))), Names{});  // its record too
  EXPECT_EQ(ObjectsUnder(Url(StepDirectoryName(2))),
            (Names{kManifestName, kStepRecordName, "data/0123456789abcdef/0-0.bin"}));
  EXPECT_EQ(Committed(*manager_), (Steps{2, 4}));
  Result<std::optional<std::string>> metrics = manager_->StepMetrics(2);
  ASSERT_TRUE(metrics.ok()) << metrics.status().message();
  EXPECT_EQ(metrics->value_or(""), R"({"loss":0.1})");
  // Records never change: a second pass reads the index and the pointer, and no record again.
  const s3::RequestCounts before = Counts();
  ASSERT_TRUE(manager_->ApplyRetention().ok());
  EXPECT_EQ(Since(before).get, 2u) << Describe(Since(before));
}

TEST_F(S3ManagerTest, AStepRecordLeftByAnEarlierAttemptIsReplaced) {
  MakeUncommitted(1);
  const std::string dir = Url(StepDirectoryName(1));
  ASSERT_TRUE(WriteStepRecord(dir, StepRecord{1, 0.5, R"({"attempt":1})"}).ok());
  ASSERT_TRUE(WriteStepRecord(dir, StepRecord{2, 0.25, R"({"attempt":2})"}).ok());
  Put(StepUrl(1, kManifestName));
  Result<std::optional<std::string>> metrics = manager_->StepMetrics(1);
  ASSERT_TRUE(metrics.ok()) << metrics.status().message();
  EXPECT_EQ(metrics->value_or(""), R"({"attempt":2})");
}

TEST_F(S3ManagerTest, ADamagedStepRecordIsCorruptNamingItsObject) {
  MakeUncommitted(1);
  ASSERT_TRUE(io::CreateObjectExclusive(StepUrl(1, kStepRecordName), "{\"committed_unix_ns\": []}").ok());
  Put(StepUrl(1, kManifestName));
  Result<std::optional<std::string>> metrics = manager_->StepMetrics(1);
  EXPECT_EQ(metrics.status().code(), Code::kCorrupt);
  EXPECT_NE(metrics.status().message().find(StepUrl(1, kStepRecordName)), std::string::npos)
      << metrics.status().message();
}

TEST_F(S3ManagerTest, RetentionLeavesStepsOfAnotherJob) {
  SaveStep(1);
  Commit(2);  // committed by someone else: never adopted
  ASSERT_TRUE(manager_->PublishLatest(2).ok());
  manager_ = ClaimRoot(RetentionPolicy{1, 0});  // counts 1 and 2 as its own
  Commit(3);
  ASSERT_TRUE(OpenRoot()->PublishLatest(3).ok());  // another job's step, after the claim
  Result<Steps> removed = manager_->ApplyRetention();
  ASSERT_TRUE(removed.ok()) << removed.status().message();
  EXPECT_EQ(*removed, (Steps{1}));
  EXPECT_EQ(Committed(*manager_), (Steps{2, 3}));
}

TEST_F(S3ManagerTest, CleanupRemovesStaleUncommittedStepsAndLeavesCommittedAndFreshOnes) {
  testing::ScopedEnv stale_age(kStaleAgeVar, "2");
  SaveStep(1);
  MakeUncommitted(2);
  Put(StepUrl(2, "data/0123456789abcdef/1-0.bin"));
  // Object times are whole seconds: past the stale age for step 2's objects, and step 1's.
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  MakeUncommitted(3);  // a save still writing

  Result<Names> removed = manager_->CleanupUncommitted();
  ASSERT_TRUE(removed.ok()) << removed.status().message();
  EXPECT_EQ(*removed, Names{StepDirectoryName(2)});
  EXPECT_EQ(ObjectsUnder(Url(StepDirectoryName(2))), Names{});
  EXPECT_EQ(ObjectsUnder(Url(StepDirectoryName(1))), (Names{kManifestName, "data/0123456789abcdef/0-0.bin"}));
  EXPECT_EQ(ObjectsUnder(Url(StepDirectoryName(3))), Names{"data/0123456789abcdef/0-0.bin"});
  EXPECT_EQ(Latest(*manager_), 1u);
}

TEST_F(S3ManagerTest, CleanupLeavesUncommittedStepsYoungerThanAnHourByDefault) {
  testing::ScopedEnv stale_age(kStaleAgeVar, nullptr);
  MakeUncommitted(2);
  Result<Names> removed = manager_->CleanupUncommitted();
  ASSERT_TRUE(removed.ok()) << removed.status().message();
  EXPECT_EQ(*removed, Names{});
  EXPECT_EQ(ObjectsUnder(Url(StepDirectoryName(2))), Names{"data/0123456789abcdef/0-0.bin"});
}

}  // namespace
}  // namespace ckpt::runtime

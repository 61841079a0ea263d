// Retention by score (keep_best), by age (keep_for) and by the rules together, judged from each step's record
// (runtime/manager/step_record.h); the records themselves, hostile ones included; and retention's own thread.
// ctest-labels: threaded
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "io/file_io.h"
#include "runtime/format/manifest.h"
#include "runtime/manager/background_retention.h"
#include "runtime/manager/manager.h"
#include "tests/unit/manager/step_manifest.h"
#include "runtime/manager/step_record.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::runtime {
namespace {

using Steps = std::vector<uint64_t>;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
constexpr int64_t kHourNs = 3600ll * 1000000000;

RetentionPolicy Policy(uint32_t keep_last, uint64_t keep_every, uint32_t keep_best, BestMode best_mode,
                       uint64_t keep_for_seconds) {
  RetentionPolicy policy;
  policy.keep_last = keep_last;
  policy.keep_every = keep_every;
  policy.keep_best = keep_best;
  policy.best_mode = best_mode;
  policy.keep_for_seconds = keep_for_seconds;
  return policy;
}

class ManagerPoliciesTest : public testing::TempDirTest {
 protected:
  void SetUp() override { root_ = Path("run"); }

  void Open(RetentionPolicy policy) {
    manager_.reset();
    std::string warning;
    Result<std::unique_ptr<CheckpointManager>> claimed = CheckpointManager::Claim(root_, policy, "the test", &warning);
    ASSERT_TRUE(claimed.ok()) << claimed.status().message();
    manager_ = std::move(claimed).value();
  }
  std::string StepPath(uint64_t step) const { return io::JoinPath(root_, StepDirectoryName(step)); }
  // A step this job committed, with `record` (none: saved without one), as a manager's save leaves it.
  void SaveStep(uint64_t step, std::optional<StepRecord> record = StepRecord{NowNs(), std::nullopt, ""}) {
    ASSERT_TRUE(io::MakeDirectories(StepPath(step)).ok());
    if (record) ASSERT_TRUE(WriteStepRecord(StepPath(step), *record).ok());
    std::ofstream(io::JoinPath(StepPath(step), kManifestName)) << EncodeManifest(StepManifest()).value();
    manager_->AdoptStep(step);
  }
  void SaveScored(uint64_t step, double score) { SaveStep(step, StepRecord{NowNs(), score, ""}); }
  // A step this job committed whose MANIFEST refers to data files of the steps `refers_to` (an incremental save's).
  void SaveReferring(uint64_t step, const std::vector<uint64_t>& refers_to) {
    SaveStep(step);
    std::ofstream(io::JoinPath(StepPath(step), kManifestName), std::ios::trunc)
        << EncodeManifest(StepManifest(refers_to)).value();
  }
  void WriteRecordText(uint64_t step, const std::string& text) {
    std::ofstream(io::JoinPath(StepPath(step), kStepRecordName), std::ios::trunc) << text;
  }
  Steps Retain() {
    Result<Steps> removed = manager_->ApplyRetention();
    EXPECT_TRUE(removed.ok()) << removed.status().message();
    return removed.ok() ? *removed : Steps{};
  }
  Steps Committed() const {
    Result<Steps> steps = manager_->CommittedSteps();
    EXPECT_TRUE(steps.ok()) << steps.status().message();
    return steps.ok() ? *steps : Steps{};
  }

  std::string root_;
  std::unique_ptr<CheckpointManager> manager_;
};

TEST_F(ManagerPoliciesTest, KeepBestKeepsTheHighestScoresWithMax) {
  Open(Policy(0, 0, 2, BestMode::kMax, 0));
  const double scores[] = {0.5, 0.9, 0.1, 0.8, 0.2};
  for (uint64_t step = 1; step <= 5; ++step) SaveScored(step, scores[step - 1]);
  EXPECT_EQ(Retain(), (Steps{1, 3}));
  EXPECT_EQ(Committed(), (Steps{2, 4, 5}));  // the two best, and the newest, which a resume needs
}

TEST_F(ManagerPoliciesTest, KeepBestKeepsTheLowestScoresWithMin) {
  Open(Policy(0, 0, 2, BestMode::kMin, 0));
  const double scores[] = {0.5, 0.9, 0.1, 0.8, 0.2};
  for (uint64_t step = 1; step <= 5; ++step) SaveScored(step, scores[step - 1]);
  EXPECT_EQ(Retain(), (Steps{1, 2, 4}));
  EXPECT_EQ(Committed(), (Steps{3, 5}));
}

TEST_F(ManagerPoliciesTest, OfEqualScoresKeepBestKeepsTheNewerStep) {
  Open(Policy(0, 0, 1, BestMode::kMax, 0));
  SaveScored(1, 0.5);
  SaveScored(2, 0.5);
  SaveScored(3, 0.1);
  EXPECT_EQ(Retain(), Steps{1});
}

TEST_F(ManagerPoliciesTest, StepsWithoutAScoreAreJudgedByTheOtherRulesAlone) {
  Open(Policy(1, 4, 1, BestMode::kMax, 0));
  SaveScored(1, 0.9);
  SaveStep(2);                // no score, no other rule keeps it
  SaveStep(3, std::nullopt);  // no record at all (saved without a manager)
  SaveStep(4);                // no score, on the interval
  SaveScored(5, 0.1);
  SaveStep(6);  // the newest
  EXPECT_EQ(Retain(), (Steps{2, 3, 5}));
  EXPECT_EQ(Committed(), (Steps{1, 4, 6}));
}

TEST_F(ManagerPoliciesTest, KeepForKeepsTheStepsCommittedWithinItsWindow) {
  Open(Policy(0, 0, 0, BestMode::kMax, 3600));
  SaveStep(1, StepRecord{NowNs() - 3 * kHourNs, std::nullopt, ""});
  SaveStep(2, StepRecord{NowNs() - kHourNs / 2, std::nullopt, ""});
  SaveStep(3, std::nullopt);  // no commit time: judged by the other rules, of which there is none
  SaveStep(4, StepRecord{NowNs() - 2 * kHourNs, std::nullopt, ""});
  SaveStep(5, StepRecord{NowNs() - 5 * kHourNs, std::nullopt, ""});  // old, but the newest step
  EXPECT_EQ(Retain(), (Steps{1, 3, 4}));
  EXPECT_EQ(Committed(), (Steps{2, 5}));
}

TEST_F(ManagerPoliciesTest, RulesCombineAStepIsKeptIfAnyRuleKeepsIt) {
  Open(Policy(2, 10, 1, BestMode::kMax, 3600));
  const int64_t old = NowNs() - 2 * kHourNs;
  SaveStep(5, StepRecord{old, 0.99, ""});           // best
  SaveStep(10, StepRecord{old, 0.1, ""});           // on the interval
  SaveStep(15, StepRecord{NowNs(), 0.2, ""});       // recent
  SaveStep(20, StepRecord{old, 0.3, ""});           // on the interval
  SaveStep(25, StepRecord{old, 0.4, ""});           // nothing keeps it
  SaveStep(35, StepRecord{old, std::nullopt, ""});  // nothing keeps it
  SaveStep(45, StepRecord{old, 0.5, ""});           // among the newest two
  SaveStep(55, StepRecord{old, 0.6, ""});           // the newest
  EXPECT_EQ(Retain(), (Steps{25, 35}));
  EXPECT_EQ(Committed(), (Steps{5, 10, 15, 20, 45, 55}));
}

TEST_F(ManagerPoliciesTest, WithKeepBestAZeroKeepLastIsNoRuleRatherThanKeepingAll) {
  Open(Policy(0, 0, 1, BestMode::kMax, 0));
  for (uint64_t step = 1; step <= 4; ++step) SaveScored(step, static_cast<double>(step % 3));
  EXPECT_EQ(Retain(), (Steps{1, 3}));
  EXPECT_EQ(Committed(), (Steps{2, 4}));
}

TEST_F(ManagerPoliciesTest, WithoutAnyRuleButKeepEveryEveryStepIsKept) {
  Open(Policy(0, 10, 0, BestMode::kMax, 0));
  for (uint64_t step = 1; step <= 4; ++step) SaveScored(step, 1.0);
  EXPECT_EQ(Retain(), Steps{});
}

TEST_F(ManagerPoliciesTest, RetentionKeepsEveryStepAKeptStepRefersToHoweverIndirectly) {
  Open(Policy(1, 0, 0, BestMode::kMax, 0));
  SaveStep(1);
  SaveReferring(2, {1});
  SaveStep(3);
  SaveReferring(4, {2});
  // Step 4 is kept; it refers to step 2, which refers to step 1: both stay loadable. Step 3 goes.
  EXPECT_EQ(Retain(), Steps{3});
  SaveStep(5);
  EXPECT_EQ(Retain(), (Steps{1, 2, 4}));
}

TEST_F(ManagerPoliciesTest, RetentionKeepsAPinnedBaseAndWhatItRefersToUntilUnpinned) {
  Open(Policy(1, 0, 0, BestMode::kMax, 0));
  SaveStep(1);
  SaveReferring(2, {1});
  Result<std::optional<uint64_t>> pinned = manager_->PinLatest();
  ASSERT_TRUE(pinned.ok()) << pinned.status().message();
  ASSERT_EQ(*pinned, std::optional<uint64_t>(2));
  // An incremental save against step 2 is in flight while step 3 commits: neither 2 nor 1 may go.
  SaveStep(3);
  EXPECT_EQ(Retain(), Steps{});
  manager_->Unpin(2);
  EXPECT_EQ(Retain(), (Steps{1, 2}));
}

TEST_F(ManagerPoliciesTest, AKeptStepWhoseManifestCannotBeReadFailsRetentionNamingItAndRemovesNothing) {
  Open(Policy(1, 0, 0, BestMode::kMax, 0));
  SaveStep(1);
  SaveStep(2);
  std::ofstream(io::JoinPath(StepPath(2), kManifestName), std::ios::trunc) << "damaged";
  Result<Steps> removed = manager_->ApplyRetention();
  ASSERT_FALSE(removed.ok());
  EXPECT_NE(removed.status().message().find("step 2 refers to"), std::string::npos) << removed.status().message();
  EXPECT_EQ(Committed(), (Steps{1, 2}));
}

TEST_F(ManagerPoliciesTest, RetentionReadsEachRecordOnce) {
  Open(Policy(0, 0, 1, BestMode::kMax, 0));
  SaveScored(1, 0.9);
  SaveScored(2, 0.1);
  EXPECT_EQ(Retain(), Steps{});
  // A record read once is not read again: a damaged copy now goes unnoticed, and the judgement stands.
  WriteRecordText(1, "damaged");
  SaveScored(3, 0.2);
  EXPECT_EQ(Retain(), Steps{2});
}

TEST_F(ManagerPoliciesTest, ADamagedRecordFailsRetentionNamingItAndRemovesNothing) {
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  const std::string cases[] = {"not json",
                               "[1, 2]",
                               "{\"committed_unix_ns\": \"soon\"}",
                               "{\"committed_unix_ns\": 1, \"score\": \"high\"}",
                               "{\"committed_unix_ns\": 1, \"metrics\": [1]}",
                               "{\"committed_unix_ns\": 1, \"metrics\": {\"a\": " + deep + "}}",
                               std::string("{\"committed_unix_ns\": 1}\0junk", 29),
                               std::string(2 << 20, ' ')};
  for (const std::string& text : cases) {
    std::filesystem::remove_all(root_);
    Open(Policy(0, 0, 1, BestMode::kMax, 0));
    SaveScored(1, 0.9);
    SaveScored(2, 0.1);
    SaveScored(3, 0.2);
    WriteRecordText(2, text);
    Result<Steps> removed = manager_->ApplyRetention();
    EXPECT_EQ(removed.status().code(), Code::kCorrupt) << text.substr(0, 60);
    EXPECT_NE(removed.status().message().find(io::JoinPath(StepPath(2), kStepRecordName)), std::string::npos)
        << removed.status().message();
    EXPECT_EQ(Committed(), (Steps{1, 2, 3}));
  }
}

TEST_F(ManagerPoliciesTest, ARecordThatIsAFifoOrALinkIsRefusedWithoutBlocking) {
  Open(Policy(0, 0, 1, BestMode::kMax, 0));
  SaveStep(1, std::nullopt);
  SaveStep(2, std::nullopt);
  ASSERT_EQ(mkfifo(io::JoinPath(StepPath(1), kStepRecordName).c_str(), 0600), 0);
  const std::string elsewhere = Path("elsewhere.json");
  std::ofstream(elsewhere) << "{\"committed_unix_ns\": 1, \"score\": 1}";
  ASSERT_EQ(symlink(elsewhere.c_str(), io::JoinPath(StepPath(2), kStepRecordName).c_str()), 0);
  for (const uint64_t step : {1, 2}) {
    Result<std::optional<std::string>> metrics = manager_->StepMetrics(step);
    EXPECT_EQ(metrics.status().code(), Code::kCorrupt) << metrics.status().message();
    EXPECT_NE(metrics.status().message().find(StepPath(step)), std::string::npos) << metrics.status().message();
  }
  EXPECT_EQ(manager_->ApplyRetention().status().code(), Code::kCorrupt);
}

TEST_F(ManagerPoliciesTest, StepMetricsReadsBackWhatWasSaved) {
  Open(Policy(0, 0, 0, BestMode::kMax, 0));
  SaveStep(1, StepRecord{NowNs(), 0.5, R"({"accuracy":0.5,"loss":{"train":1.5}})"});
  SaveStep(2);
  Result<std::optional<std::string>> metrics = manager_->StepMetrics(1);
  ASSERT_TRUE(metrics.ok()) << metrics.status().message();
  EXPECT_EQ(metrics->value_or(""), R"({"accuracy":0.5,"loss":{"train":1.5}})");
  metrics = manager_->StepMetrics(2);
  ASSERT_TRUE(metrics.ok()) << metrics.status().message();
  EXPECT_FALSE(metrics->has_value());
  EXPECT_EQ(manager_->StepMetrics(3).status().code(), Code::kNotFound);
}

TEST(StepRecordTest, RoundTrips) {
  const StepRecord record{1764662400123456789, -2.5, R"({"a":[1,2,{"b":null}],"c":"d"})"};
  Result<StepRecord> read = DecodeStepRecord(EncodeStepRecord(record), "STEP.json");
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->committed_unix_ns, record.committed_unix_ns);
  EXPECT_EQ(read->score, record.score);
  EXPECT_EQ(read->metrics, record.metrics);
}

TEST(StepRecordTest, MetricsMustBeOneBoundedJsonObject) {
  EXPECT_TRUE(CheckMetrics(R"({"loss": 0.25, "tags": ["a"]})").ok());
  for (const std::string& bad :
       {std::string("[1]"), std::string("0.5"), std::string("{\"a\": 1"), std::string("{} {}"),
        std::string("{\"a\": NaN}"), std::string(64, '{'), "{\"a\": \"" + std::string(kMaxMetricsBytes, 'x') + "\"}"}) {
    const Status checked = CheckMetrics(bad);
    EXPECT_EQ(checked.code(), Code::kInvalidArgument) << bad.substr(0, 40);
    EXPECT_NE(checked.message().find("metrics"), std::string::npos) << checked.message();
  }
}

TEST(BackgroundRetentionTest, RequestReturnsAtOnceWhileAPassRuns) {
  std::mutex mutex;
  std::condition_variable changed;
  bool release = false;
  std::atomic<int> passes{0};
  BackgroundRetention retention([&] {
    ++passes;
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return release; });
  });
  retention.Request();
  while (passes == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto start = std::chrono::steady_clock::now();
  retention.Request();  // the first pass is blocked: this must not wait for it
  retention.Request();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
  {
    std::lock_guard<std::mutex> lock(mutex);
    release = true;
  }
  changed.notify_all();
  retention.Drain();
  EXPECT_EQ(passes, 2);  // the two requests made during the first pass are one more pass
}

TEST(BackgroundRetentionTest, DestructionRunsThePassStillAskedFor) {
  std::atomic<int> passes{0};
  {
    BackgroundRetention retention([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ++passes;
    });
    retention.Request();
  }
  EXPECT_EQ(passes, 1);
}

}  // namespace
}  // namespace ckpt::runtime

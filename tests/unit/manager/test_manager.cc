// ctest-labels: threaded
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "io/file_io.h"
#include "runtime/format/manifest.h"
#include "runtime/manager/manager.h"
#include "tests/unit/manager/step_manifest.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::runtime {
namespace {

using Steps = std::vector<uint64_t>;
using Names = std::vector<std::string>;

class ManagerTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    root_ = io::JoinPath(dir(), "run");
    Reopen(RetentionPolicy{});
  }
  void TearDown() override { chmod(root_.c_str(), 0755); }

  Result<std::unique_ptr<CheckpointManager>> Claim(RetentionPolicy policy, const std::string& holder) {
    std::string warning;
    Result<std::unique_ptr<CheckpointManager>> claimed = CheckpointManager::Claim(root_, policy, holder, &warning);
    EXPECT_EQ(warning, "");
    return claimed;
  }
  std::unique_ptr<CheckpointManager> OpenManager(RetentionPolicy policy) {
    Result<std::unique_ptr<CheckpointManager>> opened = Claim(policy, "the test's manager");
    EXPECT_TRUE(opened.ok()) << opened.status().message();
    return opened.ok() ? std::move(opened).value() : nullptr;
  }
  // Releases the root's claim before the new manager takes it.
  void Reopen(RetentionPolicy policy) {
    manager_.reset();
    manager_ = OpenManager(policy);
  }

  std::string RootPath(const std::string& name) const { return io::JoinPath(root_, name); }

  // A fake committed checkpoint: the manager only looks for the MANIFEST.
  void Commit(uint64_t step) {
    MakeUncommitted(step);
    WriteFile(io::JoinPath(StepDirectoryName(step), kManifestName), EncodeManifest(StepManifest()).value());
  }
  // A step this manager's job saved: committed, then adopted, as the session does after a commit.
  void SaveStep(uint64_t step) {
    Commit(step);
    manager_->AdoptStep(step);
  }
  void MakeUncommitted(uint64_t step) { MakeDirectory(StepDirectoryName(step)); }
  void MakeDirectory(const std::string& name) { ASSERT_TRUE(io::MakeDirectories(RootPath(name)).ok()) << name; }
  void WriteFile(const std::string& name, const std::string& text) {
    std::ofstream(RootPath(name), std::ios::binary | std::ios::trunc) << text;
    ASSERT_TRUE(io::PathExists(RootPath(name))) << name;
  }
  std::string ReadFile(const std::string& name) const {
    Result<std::string> text = io::ReadWholeFile(root_, name, 1 << 20);
    return text.ok() ? *text : "<" + text.status().message() + ">";
  }

  Names RootEntries() const {
    std::set<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(root_)) {
      if (entry.path().filename() != kClaimFileName) names.insert(entry.path().filename());
    }
    return Names(names.begin(), names.end());
  }
  Steps Committed() const {
    Result<Steps> steps = manager_->CommittedSteps();
    EXPECT_TRUE(steps.ok()) << steps.status().message();
    return steps.ok() ? *steps : Steps{};
  }
  std::optional<uint64_t> Latest() const {
    Result<std::optional<uint64_t>> latest = manager_->Latest();
    EXPECT_TRUE(latest.ok()) << latest.status().message();
    return latest.ok() ? latest.value() : std::nullopt;
  }
  void Publish(uint64_t step, bool allow_older = false) {
    const Status status = manager_->PublishLatest(step, allow_older);
    ASSERT_TRUE(status.ok()) << status.message();
  }
  Steps Retain() {
    Result<Steps> removed = manager_->ApplyRetention();
    EXPECT_TRUE(removed.ok()) << removed.status().message();
    return removed.ok() ? *removed : Steps{};
  }

  std::string root_;
  std::unique_ptr<CheckpointManager> manager_;
};

TEST(StepDirectoryNameTest, IsZeroPaddedToTwelveDigits) {
  EXPECT_EQ(StepDirectoryName(1234), "step-000000001234");
  EXPECT_EQ(StepDirectoryName(0), "step-000000000000");
}

TEST(StepDirectoryNameTest, NamesSortLikeSteps) {
  EXPECT_LT(StepDirectoryName(9), StepDirectoryName(10));
  EXPECT_LT(StepDirectoryName(99999), StepDirectoryName(100000));
}

TEST(StepDirectoryNameTest, ParseRoundTrips) {
  for (const uint64_t step : {uint64_t{0}, uint64_t{7}, uint64_t{999999999999}, uint64_t{1000000000000},
                              std::numeric_limits<uint64_t>::max()}) {
    EXPECT_EQ(ParseStepDirectoryName(StepDirectoryName(step)), step);
  }
}

TEST(StepDirectoryNameTest, ParseRejectsNonCanonicalNames) {
  for (const char* name : {"step-", "step-1", "step-0000000000012", "step-000000000012x", "step--00000000001",
                           "step-+00000000001", "Step-000000000012", "step-000000000012.tmp-a", " step-000000000012",
                           "step-99999999999999999999", "step-018446744073709551616", "latest"}) {
    EXPECT_EQ(ParseStepDirectoryName(name), std::nullopt) << name;
  }
}

TEST_F(ManagerTest, OpenCreatesTheRootAndItsParents) {
  root_ = io::JoinPath(dir(), "a/b/run");
  ASSERT_NE(OpenManager(RetentionPolicy{}), nullptr);
  EXPECT_TRUE(io::IsDirectory(root_));
  EXPECT_TRUE(CheckpointManager::Open(io::JoinPath(dir(), "c/d/run"), RetentionPolicy{}).ok());
  EXPECT_TRUE(io::IsDirectory(io::JoinPath(dir(), "c/d/run")));
}

TEST_F(ManagerTest, OpenRefusesAnEmptyRoot) {
  EXPECT_EQ(CheckpointManager::Open("", RetentionPolicy{}).status().code(), Code::kInvalidArgument);
}

TEST_F(ManagerTest, OpenFailsWhenTheRootIsAFile) {
  WriteFile("file", "x");
  EXPECT_FALSE(CheckpointManager::Open(RootPath("file"), RetentionPolicy{}).ok());
}

TEST_F(ManagerTest, StepPathIsUnderTheRoot) { EXPECT_EQ(manager_->StepPath(1234), root_ + "/step-000000001234"); }

TEST_F(ManagerTest, CommittedStepsAreSortedNumerically) {
  for (const uint64_t step : {uint64_t{10}, uint64_t{1000000000000}, uint64_t{9}, uint64_t{999999999999}}) {
    Commit(step);
  }
  EXPECT_EQ(Committed(), (Steps{9, 10, 999999999999, 1000000000000}));
}

TEST_F(ManagerTest, CommittedStepsIgnoreDebrisAndForeignEntries) {
  Commit(4);
  MakeUncommitted(5);
  MakeDirectory("step-000000000006.tmp-abc");
  WriteFile("step-000000000006.tmp-abc/MANIFEST", "");
  MakeDirectory("step-7");
  WriteFile("step-7/MANIFEST", "");
  WriteFile("step-000000000008", "a file, not a checkpoint");
  WriteFile("notes.txt", "");
  EXPECT_EQ(Committed(), Steps{4});
}

TEST_F(ManagerTest, LatestIsEmptyWhenNothingIsCommitted) {
  MakeUncommitted(3);
  EXPECT_EQ(Latest(), std::nullopt);
}

TEST_F(ManagerTest, LatestFollowsThePointerOverNewerSteps) {
  Commit(5);
  Commit(7);
  Publish(5);
  EXPECT_EQ(Latest(), 5u);
}

TEST_F(ManagerTest, LatestFallsBackToTheNewestStepWithoutAPointer) {
  Commit(5);
  Commit(7);
  EXPECT_EQ(Latest(), 7u);
}

TEST_F(ManagerTest, LatestFallsBackWhenThePointerIsMalformed) {
  Commit(5);
  Commit(7);
  for (const std::string& garbage :
       {std::string(), std::string("garbage"), std::string("step-000000000005"), std::string("step-000000000005\n\n"),
        std::string("step-5\n"), std::string(" step-000000000005\n"), std::string("step-000000000005\r\n"),
        std::string(100, 's'), std::string("step-000000000005\0\n", 19)}) {
    WriteFile("latest", garbage);
    EXPECT_EQ(Latest(), 7u) << "pointer: '" << garbage << "'";
  }
}

TEST_F(ManagerTest, LatestFallsBackWhenThePointerIsUnreadable) {
  Commit(7);
  MakeDirectory("latest");
  EXPECT_EQ(Latest(), 7u);
}

TEST_F(ManagerTest, LatestFallsBackWhenThePointerNamesARemovedStep) {
  Commit(5);
  Commit(7);
  Publish(7);
  std::filesystem::remove_all(manager_->StepPath(7));
  EXPECT_EQ(Latest(), 5u);
}

TEST_F(ManagerTest, LatestFallsBackWhenThePointerNamesAnUncommittedStep) {
  Commit(5);
  MakeUncommitted(9);
  WriteFile("latest", "step-000000000009\n");
  EXPECT_EQ(Latest(), 5u);
}

TEST_F(ManagerTest, PublishLatestWritesOneLineNamingTheStepAndNoTemporary) {
  Commit(5);
  Publish(5);
  EXPECT_EQ(ReadFile("latest"), "step-000000000005\n");
  EXPECT_EQ(RootEntries(), (Names{"latest", "step-000000000005"}));
}

TEST_F(ManagerTest, PublishLatestRefusesAnUncommittedStep) {
  MakeUncommitted(5);
  const Status status = manager_->PublishLatest(5);
  EXPECT_EQ(status.code(), Code::kInvalidArgument);
  EXPECT_NE(status.message().find("step-000000000005"), std::string::npos) << status.message();
  EXPECT_FALSE(io::PathExists(RootPath("latest")));
}

TEST_F(ManagerTest, PublishLatestRefusesAMissingStep) {
  EXPECT_EQ(manager_->PublishLatest(5).code(), Code::kInvalidArgument);
}

TEST_F(ManagerTest, PublishLatestRefusesToMoveBackwards) {
  Commit(5);
  Commit(7);
  Publish(7);
  EXPECT_EQ(manager_->PublishLatest(5).code(), Code::kInvalidArgument);
  EXPECT_EQ(ReadFile("latest"), "step-000000000007\n");
}

TEST_F(ManagerTest, PublishLatestMovesBackwardsWhenAllowed) {
  Commit(5);
  Commit(7);
  Publish(7);
  Publish(5, /*allow_older=*/true);
  EXPECT_EQ(Latest(), 5u);
}

TEST_F(ManagerTest, PublishLatestIsNotHeldBackByAStalePointer) {
  Commit(5);
  WriteFile("latest", "step-000000000009\n");
  Publish(5);
  EXPECT_EQ(ReadFile("latest"), "step-000000000005\n");
}

TEST_F(ManagerTest, PublishLatestKeepsTheOldPointerWhenTheRootIsReadOnly) {
  if (geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  Commit(5);
  Commit(7);
  Publish(5);
  ASSERT_EQ(chmod(root_.c_str(), 0555), 0) << std::strerror(errno);
  EXPECT_FALSE(manager_->PublishLatest(7).ok());
  EXPECT_EQ(ReadFile("latest"), "step-000000000005\n");
}

TEST_F(ManagerTest, PublishLatestRemovesItsTemporaryWhenTheRenameFails) {
  Commit(5);
  MakeDirectory("latest/occupied");  // rename(2) cannot replace a non-empty directory
  EXPECT_FALSE(manager_->PublishLatest(5).ok());
  EXPECT_EQ(RootEntries(), (Names{"latest", "step-000000000005"}));
}

TEST_F(ManagerTest, ReadersAlwaysSeeACompletePointer) {
  Commit(5);
  Commit(7);
  Publish(5);
  std::atomic<bool> done{false};
  Status writer_status;
  std::thread writer([&] {
    for (int i = 0; i < 100 && writer_status.ok(); ++i) writer_status = manager_->PublishLatest(i % 2 ? 5 : 7, true);
    done = true;
  });
  int reads = 0;
  while (!done) {
    const std::string pointer = ReadFile("latest");
    ASSERT_TRUE(pointer == "step-000000000005\n" || pointer == "step-000000000007\n") << pointer;
    ++reads;
  }
  writer.join();
  EXPECT_TRUE(writer_status.ok()) << writer_status.message();
  EXPECT_GT(reads, 0);
}

TEST_F(ManagerTest, RetentionKeepsTheNewestSteps) {
  Reopen(RetentionPolicy{2, 0});
  for (uint64_t step = 1; step <= 5; ++step) SaveStep(step);
  Publish(5);
  EXPECT_EQ(Retain(), (Steps{1, 2, 3}));
  EXPECT_EQ(Committed(), (Steps{4, 5}));
}

TEST_F(ManagerTest, RetentionAlsoKeepsStepsOnTheInterval) {
  Reopen(RetentionPolicy{2, 10});
  for (uint64_t step = 5; step <= 35; step += 5) SaveStep(step);
  Publish(35);
  EXPECT_EQ(Retain(), (Steps{5, 15, 25}));
  EXPECT_EQ(Committed(), (Steps{10, 20, 30, 35}));
}

TEST_F(ManagerTest, RetentionNeverRemovesTheLatestStep) {
  Reopen(RetentionPolicy{1, 0});
  for (uint64_t step = 1; step <= 3; ++step) SaveStep(step);
  Publish(3);
  Publish(1, /*allow_older=*/true);
  EXPECT_EQ(Retain(), Steps{2});
  EXPECT_EQ(Committed(), (Steps{1, 3}));
}

TEST_F(ManagerTest, RetentionKeepsEveryStepWhenKeepLastIsZero) {
  Reopen(RetentionPolicy{0, 10});
  for (uint64_t step = 1; step <= 3; ++step) SaveStep(step);
  EXPECT_EQ(Retain(), Steps{});
  EXPECT_EQ(Committed(), (Steps{1, 2, 3}));
}

TEST_F(ManagerTest, RetentionLeavesNoDebrisAndNoUncommittedStepTouched) {
  Reopen(RetentionPolicy{1, 0});
  SaveStep(1);
  WriteFile("step-000000000001/data.bin", "bytes");
  SaveStep(2);
  MakeDirectory("step-000000000000.tmp-inflight");
  EXPECT_EQ(Retain(), Steps{1});
  EXPECT_EQ(RootEntries(), (Names{"step-000000000000.tmp-inflight", "step-000000000002"}));
}

TEST_F(ManagerTest, RetentionReplacesDebrisOfAnEarlierRemoval) {
  Reopen(RetentionPolicy{1, 0});
  MakeDirectory("step-000000000001.tmp-deleting");
  WriteFile("step-000000000001.tmp-deleting/leftover", "x");
  SaveStep(1);
  SaveStep(2);
  EXPECT_EQ(Retain(), Steps{1});
  EXPECT_EQ(RootEntries(), Names{"step-000000000002"});
}

TEST_F(ManagerTest, CleanupRemovesUncommittedEntries) {
  MakeDirectory("step-000000000001.tmp-abc/data");
  WriteFile("step-000000000001.tmp-abc/data/0-0.bin", "x");
  MakeUncommitted(2);
  MakeDirectory("step-000000000003.tmp-deleting");
  WriteFile("latest.tmp-123", "step-0000");
  Result<Names> removed = manager_->CleanupUncommitted();
  ASSERT_TRUE(removed.ok()) << removed.status().message();
  EXPECT_EQ(*removed, (Names{"latest.tmp-123", "step-000000000001.tmp-abc", "step-000000000002",
                             "step-000000000003.tmp-deleting"}));
  EXPECT_EQ(RootEntries(), Names{});
}

TEST_F(ManagerTest, CleanupKeepsCommittedStepsThePointerAndForeignEntries) {
  Commit(4);
  Publish(4);
  MakeDirectory("step-5");
  WriteFile("step-000000000006", "a file, not a checkpoint");
  WriteFile("notes.txt", "");
  MakeDirectory("other.tmp-1");
  const Names before = RootEntries();
  Result<Names> removed = manager_->CleanupUncommitted();
  ASSERT_TRUE(removed.ok()) << removed.status().message();
  EXPECT_EQ(*removed, Names{});
  EXPECT_EQ(RootEntries(), before);
  EXPECT_EQ(Latest(), 4u);
}

TEST_F(ManagerTest, ClaimRefusesASecondManagerNamingTheHolderAndLeavesTheFirstsStepsIntact) {
  Reopen(RetentionPolicy{1, 0});
  SaveStep(1);
  SaveStep(2);
  Result<std::unique_ptr<CheckpointManager>> second = Claim(RetentionPolicy{1, 0}, "the second job");
  ASSERT_EQ(second.status().code(), Code::kAlreadyExists);
  EXPECT_NE(second.status().message().find("the test's manager"), std::string::npos) << second.status().message();
  EXPECT_NE(second.status().message().find(root_), std::string::npos) << second.status().message();
  EXPECT_EQ(ReadFile(kClaimFileName), "the test's manager\n");
  EXPECT_EQ(Committed(), (Steps{1, 2}));
  EXPECT_EQ(Retain(), Steps{1});  // the holder still applies its policy
}

TEST_F(ManagerTest, ClaimRefusesALockFileThatIsNotARegularFileWithoutWaitingOnIt) {
  manager_.reset();
  ASSERT_EQ(unlink(RootPath(kClaimFileName).c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(mkfifo(RootPath(kClaimFileName).c_str(), 0644), 0) << std::strerror(errno);
  Result<std::unique_ptr<CheckpointManager>> next = Claim(RetentionPolicy{}, "the next job");
  ASSERT_EQ(next.status().code(), Code::kInvalidArgument);
  EXPECT_NE(next.status().message().find("not a regular file"), std::string::npos) << next.status().message();
}

TEST_F(ManagerTest, ClaimIsReleasedWithItsManager) {
  manager_.reset();
  Result<std::unique_ptr<CheckpointManager>> next = Claim(RetentionPolicy{}, "the next job");
  ASSERT_TRUE(next.ok()) << next.status().message();
  EXPECT_EQ(ReadFile(kClaimFileName), "the next job\n");
}

TEST_F(ManagerTest, ClaimDiesWithItsHolderProcess) {
  manager_.reset();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0) << std::strerror(errno);
  const pid_t child = fork();
  if (child == 0) {
    std::string warning;
    const Result<std::unique_ptr<CheckpointManager>> held =
        CheckpointManager::Claim(root_, RetentionPolicy{}, "the child job", &warning);
    const char byte = held.ok() ? 1 : 0;
    (void)!write(ready[1], &byte, 1);
    pause();  // until killed, holding the claim
    _exit(0);
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  ASSERT_EQ(byte, 1);
  Result<std::unique_ptr<CheckpointManager>> refused = Claim(RetentionPolicy{}, "the parent job");
  EXPECT_EQ(refused.status().code(), Code::kAlreadyExists);
  EXPECT_NE(refused.status().message().find("the child job"), std::string::npos) << refused.status().message();
  kill(child, SIGKILL);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  close(ready[0]);
  close(ready[1]);
  Result<std::unique_ptr<CheckpointManager>> claimed = Claim(RetentionPolicy{}, "the parent job");
  EXPECT_TRUE(claimed.ok()) << claimed.status().message();
}

TEST_F(ManagerTest, RetentionRemovesOnlyStepsItCanProveAreItsJobs) {
  Commit(5);  // committed before the claim: an earlier holder's
  Reopen(RetentionPolicy{1, 0});
  SaveStep(6);
  Commit(1);  // steps that appear from elsewhere, older and newer than the job's own
  Commit(100);
  EXPECT_EQ(Retain(), Steps{5});
  EXPECT_EQ(Committed(), (Steps{1, 6, 100}));
}

TEST_F(ManagerTest, RetentionFromTwoCommitsAtOnceRemovesEachStepOnce) {
  Reopen(RetentionPolicy{1, 0});
  for (uint64_t newest = 4; newest <= 200; newest += 4) {
    for (uint64_t step = newest - 3; step <= newest; ++step) SaveStep(step);
    Steps doomed = Committed();
    doomed.pop_back();
    Result<Steps> first = Steps{}, second = Steps{};
    std::thread other([&] { second = manager_->ApplyRetention(); });
    first = manager_->ApplyRetention();
    other.join();
    ASSERT_TRUE(first.ok()) << first.status().message();
    ASSERT_TRUE(second.ok()) << second.status().message();
    Steps removed = *first;
    removed.insert(removed.end(), second->begin(), second->end());
    std::sort(removed.begin(), removed.end());
    ASSERT_EQ(removed, doomed);
    ASSERT_EQ(RootEntries(), Names{StepDirectoryName(newest)});
  }
}

}  // namespace
}  // namespace ckpt::runtime

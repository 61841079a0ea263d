#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

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
#include "runtime/manager.h"
#include "runtime/manifest.h"

namespace ckpt::runtime {
namespace {

using Steps = std::vector<uint64_t>;
using Names = std::vector<std::string>;

class ManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/ckpt-manager-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr) << std::strerror(errno);
    dir_ = pattern;
    root_ = io::JoinPath(dir_, "run");
    manager_ = OpenManager(RetentionPolicy{});
  }
  void TearDown() override {
    chmod(root_.c_str(), 0755);
    std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<CheckpointManager> OpenManager(RetentionPolicy policy) {
    Result<std::unique_ptr<CheckpointManager>> opened = CheckpointManager::Open(root_, policy);
    EXPECT_TRUE(opened.ok()) << opened.status().message();
    return opened.ok() ? std::move(opened).value() : nullptr;
  }

  std::string Path(const std::string& name) const { return io::JoinPath(root_, name); }

  // A fake committed checkpoint: the manager only looks for the MANIFEST.
  void Commit(uint64_t step) {
    MakeUncommitted(step);
    WriteFile(io::JoinPath(StepDirectoryName(step), kManifestName), "");
  }
  void MakeUncommitted(uint64_t step) { MakeDirectory(StepDirectoryName(step)); }
  void MakeDirectory(const std::string& name) { ASSERT_TRUE(io::MakeDirectories(Path(name)).ok()) << name; }
  void WriteFile(const std::string& name, const std::string& text) {
    std::ofstream(Path(name), std::ios::binary | std::ios::trunc) << text;
    ASSERT_TRUE(io::PathExists(Path(name))) << name;
  }
  std::string ReadFile(const std::string& name) const {
    Result<std::string> text = io::ReadWholeFile(root_, name, 1 << 20);
    return text.ok() ? *text : "<" + text.status().message() + ">";
  }

  Names RootEntries() const {
    std::set<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(root_)) names.insert(entry.path().filename());
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

  std::string dir_;
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
  root_ = io::JoinPath(dir_, "a/b/run");
  ASSERT_NE(OpenManager(RetentionPolicy{}), nullptr);
  EXPECT_TRUE(io::IsDirectory(root_));
}

TEST_F(ManagerTest, OpenRefusesAnEmptyRoot) {
  EXPECT_EQ(CheckpointManager::Open("", RetentionPolicy{}).status().code(), Code::kInvalidArgument);
}

TEST_F(ManagerTest, OpenFailsWhenTheRootIsAFile) {
  WriteFile("file", "x");
  EXPECT_FALSE(CheckpointManager::Open(Path("file"), RetentionPolicy{}).ok());
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
  EXPECT_FALSE(io::PathExists(Path("latest")));
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
  manager_ = OpenManager(RetentionPolicy{2, 0});
  for (uint64_t step = 1; step <= 5; ++step) Commit(step);
  Publish(5);
  EXPECT_EQ(Retain(), (Steps{1, 2, 3}));
  EXPECT_EQ(Committed(), (Steps{4, 5}));
}

TEST_F(ManagerTest, RetentionAlsoKeepsStepsOnTheInterval) {
  manager_ = OpenManager(RetentionPolicy{2, 10});
  for (uint64_t step = 5; step <= 35; step += 5) Commit(step);
  Publish(35);
  EXPECT_EQ(Retain(), (Steps{5, 15, 25}));
  EXPECT_EQ(Committed(), (Steps{10, 20, 30, 35}));
}

TEST_F(ManagerTest, RetentionNeverRemovesTheLatestStep) {
  manager_ = OpenManager(RetentionPolicy{1, 0});
  for (uint64_t step = 1; step <= 3; ++step) Commit(step);
  Publish(3);
  Publish(1, /*allow_older=*/true);
  EXPECT_EQ(Retain(), Steps{2});
  EXPECT_EQ(Committed(), (Steps{1, 3}));
}

TEST_F(ManagerTest, RetentionKeepsEveryStepWhenKeepLastIsZero) {
  manager_ = OpenManager(RetentionPolicy{0, 10});
  for (uint64_t step = 1; step <= 3; ++step) Commit(step);
  EXPECT_EQ(Retain(), Steps{});
  EXPECT_EQ(Committed(), (Steps{1, 2, 3}));
}

TEST_F(ManagerTest, RetentionLeavesNoDebrisAndNoUncommittedStepTouched) {
  manager_ = OpenManager(RetentionPolicy{1, 0});
  Commit(1);
  WriteFile("step-000000000001/data.bin", "bytes");
  Commit(2);
  MakeDirectory("step-000000000000.tmp-inflight");
  EXPECT_EQ(Retain(), Steps{1});
  EXPECT_EQ(RootEntries(), (Names{"step-000000000000.tmp-inflight", "step-000000000002"}));
}

TEST_F(ManagerTest, RetentionReplacesDebrisOfAnEarlierRemoval) {
  manager_ = OpenManager(RetentionPolicy{1, 0});
  MakeDirectory("step-000000000001.tmp-deleting");
  WriteFile("step-000000000001.tmp-deleting/leftover", "x");
  Commit(1);
  Commit(2);
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

}  // namespace
}  // namespace ckpt::runtime

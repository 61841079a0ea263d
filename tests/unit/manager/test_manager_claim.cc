// A manager root belongs to one job at a time, through the C API: each job here is a context of its own (a
// one-rank job) in this process; a second manager on a root is refused naming the holder, and the holder's steps
// stay as its policy keeps them.
// ctest-labels: threaded
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ckpt.h"
#include "tests/unit/support/temp_dir.h"

namespace {

class ManagerClaimTest : public ckpt::testing::TempDirTest {
 protected:
  void SetUp() override {
    ASSERT_EQ(ckpt_error_create(&err_), CKPT_OK);
    root_ = Path("run");
    first_job_ = NewContext();
    second_job_ = NewContext();
    ASSERT_EQ(ckpt_state_create(&state_, err_), CKPT_OK);
    const char text[] = "weights";
    ASSERT_EQ(ckpt_state_add_common(state_, "w", text, sizeof text, err_), CKPT_OK) << message();
  }
  void TearDown() override {
    ckpt_state_free(state_);
    ckpt_context_free(second_job_);
    ckpt_context_free(first_job_);
    ckpt_error_free(err_);
  }

  ckpt_context_t* NewContext() {
    ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
    opts.rank = 0;
    opts.world_size = 1;
    opts.io_workers = 0;
    opts.arena_bytes = 64ull << 20;  // the smallest: the default (an eighth of the memory) takes seconds to set up
    ckpt_context_t* ctx = nullptr;
    EXPECT_EQ(ckpt_context_create(&opts, &ctx, err_), CKPT_OK) << message();
    return ctx;
  }
  int32_t Open(ckpt_context_t* ctx, uint32_t keep_last, ckpt_manager_t** manager) {
    ckpt_manager_options opts = CKPT_MANAGER_OPTIONS_INIT;
    opts.keep_last = keep_last;
    return ckpt_manager_open(ctx, root_.c_str(), &opts, manager, err_);
  }
  void Save(ckpt_manager_t* manager, uint64_t step) {
    ckpt_request_t* request = nullptr;
    ASSERT_EQ(ckpt_manager_save(manager, state_, step, nullptr, &request, err_), CKPT_OK) << message();
    ASSERT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
    ckpt_request_free(request);
    // And the removals its commit asked for, which run in the background.
    ASSERT_EQ(ckpt_manager_wait(manager, err_), CKPT_OK) << message();
  }
  std::vector<uint64_t> Steps(ckpt_manager_t* manager) {
    std::vector<uint64_t> steps(16);
    uint64_t count = 0;
    EXPECT_EQ(ckpt_manager_steps(manager, steps.data(), steps.size(), &count, err_), CKPT_OK) << message();
    steps.resize(count);
    return steps;
  }
  std::string message() const { return ckpt_error_message(err_); }

  ckpt_error_t* err_ = nullptr;
  std::string root_;
  ckpt_context_t* first_job_ = nullptr;
  ckpt_context_t* second_job_ = nullptr;
  ckpt_state_t* state_ = nullptr;
};

TEST_F(ManagerClaimTest, ASecondManagerIsRefusedNamingTheHolderAndTheFirstsStepsStayIntact) {
  ckpt_manager_t* first = nullptr;
  ASSERT_EQ(Open(first_job_, 2, &first), CKPT_OK) << message();
  Save(first, 1);
  Save(first, 2);
  ckpt_manager_t* second = reinterpret_cast<ckpt_manager_t*>(&second);
  EXPECT_EQ(Open(second_job_, 2, &second), CKPT_E_ALREADY_EXISTS);
  EXPECT_EQ(second, nullptr);
  for (const std::string& part : {root_, "pid " + std::to_string(getpid()), std::string("another job")}) {
    EXPECT_NE(message().find(part), std::string::npos) << "'" << part << "' in: " << message();
  }
  Save(first, 3);
  EXPECT_EQ(Steps(first), (std::vector<uint64_t>{2, 3}));
  uint64_t latest = 0;
  ASSERT_EQ(ckpt_manager_latest(first, &latest, err_), CKPT_OK) << message();
  EXPECT_EQ(latest, 3u);
  ckpt_manager_free(first);
  ASSERT_EQ(Open(second_job_, 2, &second), CKPT_OK) << "released with the first manager: " << message();
  EXPECT_EQ(Steps(second), (std::vector<uint64_t>{2, 3}));
  ckpt_manager_free(second);
}

TEST_F(ManagerClaimTest, AnAbandonedRemovalIsClearedWhenTheRootIsClaimed) {
  const std::string deleting = root_ + "/step-000000000001.tmp-deleting";
  std::filesystem::create_directories(deleting + "/data");
  std::ofstream(deleting + "/data/0-0.bin") << "half of a removed step";
  ckpt_manager_t* manager = nullptr;
  ASSERT_EQ(Open(first_job_, 0, &manager), CKPT_OK) << message();
  EXPECT_FALSE(std::filesystem::exists(deleting));
  EXPECT_TRUE(Steps(manager).empty());
  ckpt_manager_free(manager);
}

}  // namespace

TEST_F(ManagerClaimTest, AClosedManagerLetsAnotherJobClaimTheRootAndStillAnswersQueries) {
  ckpt_manager_t* first = nullptr;
  ASSERT_EQ(Open(first_job_, 0, &first), CKPT_OK) << message();
  Save(first, 1);
  ASSERT_EQ(ckpt_manager_close(first, err_), CKPT_OK) << message();
  ckpt_manager_t* second = nullptr;
  ASSERT_EQ(Open(second_job_, 0, &second), CKPT_OK) << "the closed manager still holds the root: " << message();
  Save(second, 2);
  uint64_t latest = 0;
  ASSERT_EQ(ckpt_manager_latest(first, &latest, err_), CKPT_OK) << message();
  EXPECT_EQ(latest, 2u) << "the closed manager reads the root afresh";
  EXPECT_EQ(Steps(first), (std::vector<uint64_t>{1, 2}));
  char path[4096];
  ASSERT_EQ(ckpt_manager_step_path(first, 2, path, sizeof path, err_), CKPT_OK) << message();
  EXPECT_EQ(std::string(path), root_ + "/step-000000000002");
  EXPECT_EQ(ckpt_manager_close(first, err_), CKPT_OK) << "closing again does nothing";
  ckpt_manager_free(second);
  ckpt_manager_free(first);
}

TEST_F(ManagerClaimTest, AClosedManagerRefusesToSaveOrResumeNamingTheRoot) {
  ckpt_manager_t* manager = nullptr;
  ASSERT_EQ(Open(first_job_, 0, &manager), CKPT_OK) << message();
  Save(manager, 1);
  ASSERT_EQ(ckpt_manager_close(manager, err_), CKPT_OK) << message();
  ckpt_request_t* request = nullptr;
  EXPECT_EQ(ckpt_manager_save(manager, state_, 2, nullptr, &request, err_), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("which is closed"), std::string::npos) << message();
  EXPECT_NE(message().find(root_), std::string::npos) << message();
  EXPECT_EQ(request, nullptr);
  uint64_t step = 0;
  EXPECT_EQ(ckpt_manager_resume_step(manager, &step, err_), CKPT_E_INVALID_ARGUMENT);
  EXPECT_EQ(ckpt_manager_load_latest(manager, state_, nullptr, &step, err_), CKPT_E_INVALID_ARGUMENT);
  EXPECT_EQ(Steps(manager), (std::vector<uint64_t>{1})) << "nothing was saved after the close";
  ckpt_manager_free(manager);
}

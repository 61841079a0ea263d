// A manager's policies through the C API, on a one-rank job: metrics saved with a step and read back, keep_best
// judging the steps by the scores saved with them, and the options that are refused.
// ctest-labels: threaded
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "ckpt.h"
#include "common/fault_injection.h"
#include "tests/unit/support/scoped_env.h"
#include "tests/unit/support/temp_dir.h"

namespace {

class ManagerMetricsTest : public ckpt::testing::TempDirTest {
 protected:
  void SetUp() override {
    ASSERT_EQ(ckpt_error_create(&err_), CKPT_OK);
    root_ = Path("run");
    ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
    opts.rank = 0;
    opts.world_size = 1;
    opts.io_workers = 0;
    opts.arena_bytes = 64ull << 20;  // the smallest: the default (an eighth of the memory) takes seconds to set up
    ASSERT_EQ(ckpt_context_create(&opts, &ctx_, err_), CKPT_OK) << message();
    ASSERT_EQ(ckpt_state_create(&state_, err_), CKPT_OK);
    const char text[] = "weights";
    ASSERT_EQ(ckpt_state_add_common(state_, "w", text, sizeof text, err_), CKPT_OK) << message();
  }
  void TearDown() override {
    ckpt_manager_free(manager_);
    ckpt_state_free(state_);
    ckpt_context_free(ctx_);
    ckpt_error_free(err_);
  }

  void Open(ckpt_manager_options opts) {
    ASSERT_EQ(ckpt_manager_open(ctx_, root_.c_str(), &opts, &manager_, err_), CKPT_OK) << message();
  }
  int32_t Save(uint64_t step, const char* metrics, const double* score) {
    ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
    opts.metrics = metrics;
    if (score != nullptr) {
      opts.best_value = *score;
      opts.has_best_value = 1;
    }
    ckpt_request_t* request = nullptr;
    int32_t status = ckpt_manager_save(manager_, state_, step, &opts, &request, err_);
    if (status == CKPT_OK) status = ckpt_request_wait(request, 0, err_);
    ckpt_request_free(request);
    return status;
  }
  std::vector<uint64_t> Steps() {
    std::vector<uint64_t> steps(16);
    uint64_t count = 0;
    EXPECT_EQ(ckpt_manager_steps(manager_, steps.data(), steps.size(), &count, err_), CKPT_OK) << message();
    steps.resize(count);
    return steps;
  }
  int32_t Metrics(uint64_t step, std::string* text) {
    uint64_t length = 0;
    const int32_t sized = ckpt_manager_metrics(manager_, step, nullptr, 0, &length, err_);
    if (sized != CKPT_OK) return sized;
    std::vector<char> buffer(length + 1, 'x');
    const int32_t read = ckpt_manager_metrics(manager_, step, buffer.data(), buffer.size(), &length, err_);
    *text = std::string(buffer.data());
    return read;
  }
  std::string message() const { return ckpt_error_message(err_); }

  ckpt_error_t* err_ = nullptr;
  std::string root_;
  ckpt_context_t* ctx_ = nullptr;
  ckpt_state_t* state_ = nullptr;
  ckpt_manager_t* manager_ = nullptr;
};

TEST_F(ManagerMetricsTest, MetricsSavedWithAStepAreReadBack) {
  Open(ckpt_manager_options CKPT_MANAGER_OPTIONS_INIT);
  ASSERT_EQ(Save(1, R"({"accuracy": 0.75, "note": "warm-up"})", nullptr), CKPT_OK) << message();
  ASSERT_EQ(Save(2, nullptr, nullptr), CKPT_OK) << message();
  std::string text;
  ASSERT_EQ(Metrics(1, &text), CKPT_OK) << message();
  EXPECT_EQ(text, R"({"accuracy":0.75,"note":"warm-up"})");
  EXPECT_EQ(Metrics(2, &text), CKPT_E_NOT_FOUND);
  EXPECT_NE(message().find("without metrics"), std::string::npos) << message();
  EXPECT_EQ(Metrics(3, &text), CKPT_E_NOT_FOUND);
  // Read from the step, so also once the manager is closed.
  ASSERT_EQ(ckpt_manager_close(manager_, err_), CKPT_OK) << message();
  EXPECT_EQ(Metrics(1, &text), CKPT_OK) << message();
}

TEST_F(ManagerMetricsTest, ABufferTooSmallGetsTheLengthAndNothingElse) {
  Open(ckpt_manager_options CKPT_MANAGER_OPTIONS_INIT);
  ASSERT_EQ(Save(1, R"({"a":1})", nullptr), CKPT_OK) << message();
  char buffer[7] = "intact";
  uint64_t length = 0;
  ASSERT_EQ(ckpt_manager_metrics(manager_, 1, buffer, 7, &length, err_), CKPT_OK) << message();
  EXPECT_EQ(length, 7u);
  EXPECT_STREQ(buffer, "intact");
}

TEST_F(ManagerMetricsTest, KeepBestKeepsTheStepsOfBestScoreAndTheNewest) {
  ckpt_manager_options opts = CKPT_MANAGER_OPTIONS_INIT;
  opts.keep_best = 2;
  opts.best_mode = CKPT_BEST_MIN;
  Open(opts);
  const double losses[] = {0.9, 0.3, 0.8, 0.1, 0.7, 0.6};
  for (uint64_t step = 1; step <= 6; ++step) ASSERT_EQ(Save(step, nullptr, &losses[step - 1]), CKPT_OK) << message();
  // Closing waits for the retention passes the saves asked for.
  ASSERT_EQ(ckpt_manager_close(manager_, err_), CKPT_OK) << message();
  EXPECT_EQ(Steps(), (std::vector<uint64_t>{2, 4, 6}));
}

TEST_F(ManagerMetricsTest, KeepForKeepsTheStepsItsWindowHolds) {
  ckpt_manager_options opts = CKPT_MANAGER_OPTIONS_INIT;
  opts.keep_last = 1;
  opts.keep_for_seconds = 3600;
  Open(opts);
  for (uint64_t step = 1; step <= 3; ++step) ASSERT_EQ(Save(step, nullptr, nullptr), CKPT_OK) << message();
  ASSERT_EQ(ckpt_manager_close(manager_, err_), CKPT_OK) << message();
  EXPECT_EQ(Steps(), (std::vector<uint64_t>{1, 2, 3}));  // all saved within the hour
}

TEST_F(ManagerMetricsTest, ASlowRemovalDelaysNeitherTheSaveNorItsRequestNorTheNextSave) {
  if (!ckpt::fault::kCompiledIn) GTEST_SKIP() << "a build without CKPT_FAULT_INJECTION has no fault hooks";
  ckpt::testing::ScopedEnv slow(ckpt::fault::kRetentionPauseVar, "2000");
  ckpt_manager_options opts = CKPT_MANAGER_OPTIONS_INIT;
  opts.keep_last = 1;
  Open(opts);
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t step = 1; step <= 3; ++step) ASSERT_EQ(Save(step, nullptr, nullptr), CKPT_OK) << message();
  // Each save's commit asked for a pass, and the first pass sleeps 2 s before removing anything.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1500));
  EXPECT_EQ(Steps(), (std::vector<uint64_t>{1, 2, 3}));
  ASSERT_EQ(ckpt_manager_wait(manager_, err_), CKPT_OK) << message();
  EXPECT_EQ(Steps(), std::vector<uint64_t>{3});
}

TEST_F(ManagerMetricsTest, BadMetricsAndScoresAreRefusedBeforeTheSave) {
  Open(ckpt_manager_options CKPT_MANAGER_OPTIONS_INIT);
  EXPECT_EQ(Save(1, "[1, 2]", nullptr), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("not an object"), std::string::npos) << message();
  EXPECT_EQ(Save(1, "{\"loss\": ", nullptr), CKPT_E_INVALID_ARGUMENT);
  EXPECT_EQ(Save(1, "", nullptr), CKPT_E_INVALID_ARGUMENT);
  const double nan = std::nan("");
  EXPECT_EQ(Save(1, nullptr, &nan), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("finite"), std::string::npos) << message();
  EXPECT_EQ(Steps(), std::vector<uint64_t>{});
}

TEST_F(ManagerMetricsTest, AStepThroughTheMemoryTierRefusesMetricsThatStorageWouldLose) {
  Open(ckpt_manager_options CKPT_MANAGER_OPTIONS_INIT);
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.tier = CKPT_TIER_MEMORY;
  opts.metrics = R"({"loss": 1})";
  ckpt_request_t* request = nullptr;
  EXPECT_EQ(ckpt_manager_save(manager_, state_, 1, &opts, &request, err_), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("memory tier"), std::string::npos) << message();
}

TEST_F(ManagerMetricsTest, APlainSaveRefusesMetrics) {
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.metrics = "{}";
  ckpt_request_t* request = nullptr;
  EXPECT_EQ(ckpt_save(ctx_, state_, Path("plain").c_str(), &opts, &request, err_), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("ckpt_manager_save only"), std::string::npos) << message();
}

TEST_F(ManagerMetricsTest, AnUnknownBestModeIsRefused) {
  ckpt_manager_options opts = CKPT_MANAGER_OPTIONS_INIT;
  opts.best_mode = 7;
  EXPECT_EQ(ckpt_manager_open(ctx_, root_.c_str(), &opts, &manager_, err_), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("best_mode 7"), std::string::npos) << message();
}

}  // namespace

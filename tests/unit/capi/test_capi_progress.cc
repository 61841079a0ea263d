// What a save and a load report through the C API: ckpt_request_stats_get (final and while the save runs), the
// progress callbacks of ckpt_save_options and ckpt_load_options, and the INFO lines of committed saves and loads.
// ctest-labels: threaded
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ckpt.h"
#include "runtime/core/progress.h"
#include "tests/unit/support/temp_dir.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kArenaBytes = 64ull << 20;  // the smallest arena: a large state goes through it in many windows

// One call of a progress callback.
struct Call {
  int32_t phase;
  uint64_t done;
  uint64_t total;
  std::thread::id thread;
  Clock::time_point at;
};

// Records progress calls; optionally holds the calling thread in the first call of `hold_phase` until released.
class Recorder {
 public:
  static void Progress(void* user, int32_t phase, uint64_t done, uint64_t total) {
    static_cast<Recorder*>(user)->Record(phase, done, total);
  }

  std::vector<Call> calls() {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }

  void HoldAt(int32_t phase) { hold_phase_ = phase; }

  // Whether a call reached the held phase within the time allowed.
  bool WaitUntilHeld() {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(60), [this] { return held_; });
  }

  void Release() {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = true;
    changed_.notify_all();
  }

 private:
  void Record(int32_t phase, uint64_t done, uint64_t total) {
    std::unique_lock<std::mutex> lock(mutex_);
    calls_.push_back(Call{phase, done, total, std::this_thread::get_id(), Clock::now()});
    if (phase != hold_phase_ || held_) return;
    held_ = true;
    changed_.notify_all();
    changed_.wait(lock, [this] { return released_; });
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Call> calls_;
  int32_t hold_phase_ = -1;
  bool held_ = false;
  bool released_ = false;
};

// Log lines as a context's log callback receives them.
struct LogLines {
  std::mutex mutex;
  std::vector<std::pair<int32_t, std::string>> lines;

  static void Log(void* user, int32_t level, const char* message) {
    auto* self = static_cast<LogLines*>(user);
    std::lock_guard<std::mutex> lock(self->mutex);
    self->lines.emplace_back(level, message);
  }

  // The INFO line that starts with `prefix`, or "".
  std::string InfoStartingWith(const std::string& prefix) {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& [level, text] : lines) {
      if (level == CKPT_LOG_INFO && text.rfind(prefix, 0) == 0) return text;
    }
    return "";
  }
};

class CapiProgressTest : public ckpt::testing::TempDirTest {
 protected:
  void SetUp() override { ASSERT_EQ(ckpt_error_create(&err_), CKPT_OK); }

  void TearDown() override {
    ckpt_state_free(state_);
    ckpt_context_free(ctx_);
    ckpt_error_free(err_);
  }

  std::string message() const { return ckpt_error_message(err_); }

  void Open(ckpt_log_fn log = nullptr, void* log_user = nullptr) {
    ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
    opts.rank = 0;
    opts.world_size = 1;
    opts.io_workers = 0;  // unit tests link libckpt statically: no worker executable beside them
    opts.arena_bytes = kArenaBytes;
    opts.log = log;
    opts.log_user = log_user;
    ASSERT_EQ(ckpt_context_create(&opts, &ctx_, err_), CKPT_OK) << message();
    ASSERT_EQ(ckpt_state_create(&state_, err_), CKPT_OK);
  }

  // Registers `data` as the whole F32 tensor "x".
  void Register(ckpt_state_t* state, std::vector<float>& data) {
    shape_[0] = data.size();
    ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
    shard.key = "x";
    shard.dtype = CKPT_DTYPE_F32;
    shard.ndim = 1;
    shard.global_shape = shape_;
    shard.local_shape = shape_;
    shard.global_offset = zero_;
    shard.data = data.data();
    shard.data_size = data.size() * sizeof(float);
    ASSERT_EQ(ckpt_state_add_tensor(state, &shard, err_), CKPT_OK) << message();
  }

  // A state of `bytes` bytes in one tensor, registered in state_.
  void Fill(uint64_t bytes) {
    values_.resize(bytes / sizeof(float));
    for (size_t i = 0; i < values_.size(); ++i) values_[i] = static_cast<float>(i % 1000);
    Register(state_, values_);
  }

  uint64_t StateBytes() const { return values_.size() * sizeof(float); }

  ckpt_request_t* Save(const std::string& name, const ckpt_save_options* opts = nullptr) {
    ckpt_request_t* request = nullptr;
    EXPECT_EQ(ckpt_save(ctx_, state_, Path(name).c_str(), opts, &request, err_), CKPT_OK) << message();
    return request;
  }

  ckpt_request_stats Stats(const ckpt_request_t* request) {
    ckpt_request_stats stats = CKPT_REQUEST_STATS_INIT;
    EXPECT_EQ(ckpt_request_stats_get(request, &stats, err_), CKPT_OK) << message();
    return stats;
  }

  // Saves the state as `name` and waits for the commit.
  void SaveAndWait(const std::string& name) {
    ckpt_request_t* request = Save(name);
    ASSERT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
    ckpt_request_free(request);
  }

  ckpt_error_t* err_ = nullptr;
  ckpt_context_t* ctx_ = nullptr;
  ckpt_state_t* state_ = nullptr;
  std::vector<float> values_;
  uint64_t shape_[1] = {0};
  const uint64_t zero_[1] = {0};
};

ckpt_save_options SaveOptionsReportingTo(Recorder& recorder) {
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.progress = &Recorder::Progress;
  opts.progress_user = &recorder;
  return opts;
}

// Phases come in the order given, each once or more in a row; within a phase `done` never shrinks nor passes
// `total`; and after a phase's first call the next ones of that phase are at least the reporting interval apart.
void ExpectOrderlyProgress(const std::vector<Call>& calls, const std::vector<int32_t>& order) {
  ASSERT_FALSE(calls.empty());
  size_t at = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    while (at < order.size() && order[at] != c.phase) ++at;
    ASSERT_LT(at, order.size()) << "call " << i << ": phase " << c.phase << " out of order";
    EXPECT_LE(c.done, c.total) << "call " << i;
    if (i == 0 || calls[i - 1].phase != c.phase) continue;
    EXPECT_GE(c.done, calls[i - 1].done) << "call " << i << ": progress went back";
    // The library measures from just before the previous call; this test stamps inside it, a little later.
    EXPECT_GE(c.at - calls[i - 1].at, ckpt::runtime::ProgressReporter::kInterval - std::chrono::milliseconds(5))
        << "call " << i << " came too soon after the one before";
  }
}

TEST(ProgressReporter, ReportsEveryPhaseChangeAndGrowthAtMostOncePerInterval) {
  using ckpt::runtime::Phase;
  std::vector<std::pair<Phase, uint64_t>> reports;
  ckpt::runtime::ProgressReporter progress([&](Phase phase, uint64_t done, uint64_t total) {
    reports.emplace_back(phase, done);
    EXPECT_EQ(total, 1000u);
  });
  progress.Enter(Phase::kStaging, 0, 1000);
  for (uint64_t done = 1; done <= 500; ++done) progress.Update(done);
  EXPECT_EQ(reports.size(), 1u) << "updates within the interval were reported";
  std::this_thread::sleep_for(ckpt::runtime::ProgressReporter::kInterval + std::chrono::milliseconds(10));
  progress.Update(500);  // no growth: nothing to report
  EXPECT_EQ(reports.size(), 1u);
  progress.Update(5000);  // past the total: reported as the total
  progress.Enter(Phase::kWriting, 0, 1000);
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_EQ(reports[1], std::make_pair(Phase::kStaging, uint64_t{1000}));
  EXPECT_EQ(reports[2], std::make_pair(Phase::kWriting, uint64_t{0}));
}

TEST_F(CapiProgressTest, StatsOfAFinishedSaveAddUp) {
  Open();
  Fill(8ull << 20);
  ckpt_request_t* request = Save("step-1");
  ASSERT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
  const ckpt_request_stats s = Stats(request);
  ckpt_request_free(request);
  EXPECT_EQ(s.struct_size, sizeof(ckpt_request_stats));
  EXPECT_EQ(s.committed, 1u);
  EXPECT_EQ(s.state_bytes, StateBytes());
  EXPECT_EQ(s.bytes_to_write, StateBytes());  // one rank writes everything
  EXPECT_EQ(s.bytes_staged, StateBytes());
  EXPECT_EQ(s.bytes_written, StateBytes());
  EXPECT_EQ(s.bytes_committed, StateBytes());
  EXPECT_GE(s.files_written, 1u);
  for (uint64_t ns : {s.planning_ns, s.staging_ns, s.blocking_ns, s.writing_ns, s.committing_ns, s.total_ns}) {
    EXPECT_GT(ns, 0u);
  }
  EXPECT_EQ(s.blocking_ns, s.planning_ns + s.staging_ns);
  EXPECT_EQ(s.total_ns, s.planning_ns + s.staging_ns + s.writing_ns + s.committing_ns);
  EXPECT_GE(s.total_ns, s.staging_ns);
}

TEST_F(CapiProgressTest, SnapshotWhileTheSaveRunsShowsItUncommittedAndStillCounting) {
  Open();
  Fill(8ull << 20);
  Recorder recorder;
  recorder.HoldAt(CKPT_PHASE_COMMITTING);  // the save thread waits in the callback: the save cannot commit
  const ckpt_save_options opts = SaveOptionsReportingTo(recorder);
  ckpt_request_t* request = Save("step-1", &opts);
  ASSERT_TRUE(recorder.WaitUntilHeld());

  const ckpt_request_stats first = Stats(request);
  EXPECT_EQ(ckpt_request_test(request, err_), CKPT_E_IN_PROGRESS);
  EXPECT_EQ(first.committed, 0u);
  EXPECT_EQ(first.bytes_committed, 0u);
  EXPECT_EQ(first.bytes_staged, StateBytes());
  EXPECT_EQ(first.bytes_written, StateBytes());  // durable before committing starts
  EXPECT_GT(first.writing_ns, 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const ckpt_request_stats second = Stats(request);
  EXPECT_GT(second.committing_ns, first.committing_ns) << "a running phase counts until now";
  EXPECT_EQ(second.writing_ns, first.writing_ns) << "a finished phase stays as it was";

  recorder.Release();
  ASSERT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
  const ckpt_request_stats last = Stats(request);
  ckpt_request_free(request);
  EXPECT_EQ(last.committed, 1u);
  EXPECT_EQ(last.bytes_committed, StateBytes());
  EXPECT_GE(last.total_ns, second.total_ns);
}

TEST_F(CapiProgressTest, SaveProgressRunsThroughEveryPhaseToCommittedFromTheDocumentedThreads) {
  Open();
  Fill(4 * kArenaBytes);  // staged and written in many windows
  Recorder recorder;
  const ckpt_save_options opts = SaveOptionsReportingTo(recorder);
  const auto started = Clock::now();
  ckpt_request_t* request = Save("step-1", &opts);
  ASSERT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
  const auto elapsed = Clock::now() - started;
  ckpt_request_free(request);
  const std::vector<Call> calls = recorder.calls();

  ExpectOrderlyProgress(calls, {CKPT_PHASE_PLANNING, CKPT_PHASE_STAGING, CKPT_PHASE_WRITING, CKPT_PHASE_COMMITTING,
                                CKPT_PHASE_COMMITTED});
  const std::thread::id caller = std::this_thread::get_id();
  for (const Call& c : calls) {
    if (c.phase == CKPT_PHASE_PLANNING || c.phase == CKPT_PHASE_STAGING) EXPECT_EQ(c.thread, caller);
    if (c.phase == CKPT_PHASE_COMMITTING || c.phase == CKPT_PHASE_COMMITTED) EXPECT_NE(c.thread, caller);
    if (c.phase != CKPT_PHASE_PLANNING) EXPECT_EQ(c.total, StateBytes());
  }
  EXPECT_EQ(calls.front().phase, CKPT_PHASE_PLANNING);
  EXPECT_EQ(calls.back().phase, CKPT_PHASE_COMMITTED);
  EXPECT_EQ(calls.back().done, StateBytes());
  // One call per phase change, plus at most one per interval.
  EXPECT_LE(calls.size(), 5 + static_cast<size_t>(elapsed / ckpt::runtime::ProgressReporter::kInterval));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(recorder.calls().size(), calls.size()) << "a call came after the request was freed";
}

TEST_F(CapiProgressTest, LoadProgressRunsFromPlanningToLoadedOnTheCallingThread) {
  Open();
  Fill(2 * kArenaBytes);
  SaveAndWait("step-1");
  std::vector<float> loaded(values_.size(), -1.0f);
  ckpt_state_t* state = nullptr;
  ASSERT_EQ(ckpt_state_create(&state, err_), CKPT_OK);
  Register(state, loaded);
  Recorder recorder;
  ckpt_load_options opts = CKPT_LOAD_OPTIONS_INIT;
  opts.progress = &Recorder::Progress;
  opts.progress_user = &recorder;
  EXPECT_EQ(ckpt_load(ctx_, state, Path("step-1").c_str(), &opts, err_), CKPT_OK) << message();
  ckpt_state_free(state);
  EXPECT_TRUE(loaded == values_);

  const std::vector<Call> calls = recorder.calls();
  ExpectOrderlyProgress(calls, {CKPT_PHASE_PLANNING, CKPT_PHASE_READING, CKPT_PHASE_LOADED});
  for (const Call& c : calls) EXPECT_EQ(c.thread, std::this_thread::get_id());
  EXPECT_EQ(calls.front().phase, CKPT_PHASE_PLANNING);
  EXPECT_EQ(calls.back().phase, CKPT_PHASE_LOADED);
  EXPECT_EQ(calls.back().done, StateBytes());
  EXPECT_EQ(calls.back().total, StateBytes());
}

TEST_F(CapiProgressTest, ASaveRefusedByTheRanksEndsItsProgressWithFailed) {
  Open();
  Fill(1 << 20);
  SaveAndWait("step-1");
  Recorder recorder;
  const ckpt_save_options opts = SaveOptionsReportingTo(recorder);
  ckpt_request_t* request = nullptr;
  EXPECT_EQ(ckpt_save(ctx_, state_, Path("step-1").c_str(), &opts, &request, err_), CKPT_E_ALREADY_EXISTS);
  const std::vector<Call> calls = recorder.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].phase, CKPT_PHASE_PLANNING);
  EXPECT_EQ(calls[1].phase, CKPT_PHASE_FAILED);
}

TEST_F(CapiProgressTest, ALoadThatFailsEndsItsProgressWithFailed) {
  Open();
  Fill(1 << 20);
  Recorder recorder;
  ckpt_load_options opts = CKPT_LOAD_OPTIONS_INIT;
  opts.progress = &Recorder::Progress;
  opts.progress_user = &recorder;
  EXPECT_EQ(ckpt_load(ctx_, state_, Path("absent").c_str(), &opts, err_), CKPT_E_NOT_FOUND);
  const std::vector<Call> calls = recorder.calls();
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.front().phase, CKPT_PHASE_PLANNING);
  EXPECT_EQ(calls.back().phase, CKPT_PHASE_FAILED);
}

// An older caller's struct ends before bytes_to_write: the library writes no byte past it.
struct OlderStats {
  uint32_t struct_size;
  uint32_t committed;
  uint64_t state_bytes;
  unsigned char guard[64];
};

TEST_F(CapiProgressTest, StatsRefuseNullAndFillNoMoreThanTheCallersSize) {
  Open();
  Fill(1 << 20);
  ckpt_request_t* request = Save("step-1");
  ASSERT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
  ckpt_request_stats stats = CKPT_REQUEST_STATS_INIT;
  EXPECT_EQ(ckpt_request_stats_get(nullptr, &stats, err_), CKPT_E_INVALID_ARGUMENT);
  EXPECT_EQ(ckpt_request_stats_get(request, nullptr, err_), CKPT_E_INVALID_ARGUMENT);
  stats.struct_size = 0;
  EXPECT_EQ(ckpt_request_stats_get(request, &stats, err_), CKPT_E_INVALID_ARGUMENT);

  static_assert(offsetof(ckpt_request_stats, bytes_to_write) == offsetof(OlderStats, guard));
  OlderStats older;
  std::memset(&older, 0xAB, sizeof older);
  older.struct_size = offsetof(OlderStats, guard);
  EXPECT_EQ(ckpt_request_stats_get(request, reinterpret_cast<ckpt_request_stats*>(&older), err_), CKPT_OK);
  ckpt_request_free(request);
  EXPECT_EQ(older.struct_size, offsetof(OlderStats, guard));
  EXPECT_EQ(older.committed, 1u);
  EXPECT_EQ(older.state_bytes, StateBytes());
  for (unsigned char byte : older.guard) ASSERT_EQ(byte, 0xAB);
}

TEST_F(CapiProgressTest, ACommittedSaveAndALoadLogAnInfoLineWithTheirSpeed) {
  LogLines log;
  Open(&LogLines::Log, &log);
  Fill(1 << 20);
  SaveAndWait("step-1");
  const std::string saved = log.InfoStartingWith("saved '" + Path("step-1") + "': ");
  EXPECT_NE(saved.find("GB/s"), std::string::npos) << saved;
  EXPECT_NE(saved.find("committed after"), std::string::npos) << saved;
  ASSERT_EQ(ckpt_load(ctx_, state_, Path("step-1").c_str(), nullptr, err_), CKPT_OK) << message();
  const std::string loaded = log.InfoStartingWith("loaded '" + Path("step-1") + "': ");
  EXPECT_NE(loaded.find("GB/s"), std::string::npos) << loaded;
}

// What the ckpt tool and any program without a log callback rely on: CKPT_LOG_LEVEL=info prints the lines.
TEST_F(CapiProgressTest, TheDefaultLogPrintsTheInfoLinesOnlyWhenCkptLogLevelAsksForThem) {
  for (const char* level : {"", "info", "2"}) {
    setenv("CKPT_LOG_LEVEL", level, 1);
    testing::internal::CaptureStderr();
    Open();
    Fill(1 << 20);
    SaveAndWait(std::string("step-") + level);
    EXPECT_EQ(ckpt_load(ctx_, state_, Path(std::string("step-") + level).c_str(), nullptr, err_), CKPT_OK);
    ckpt_state_free(state_);
    ckpt_context_free(ctx_);
    state_ = nullptr;
    ctx_ = nullptr;
    const std::string printed = testing::internal::GetCapturedStderr();
    unsetenv("CKPT_LOG_LEVEL");
    const bool wanted = *level != '\0';
    EXPECT_EQ(printed.find("ckpt[rank 0] info: saved '") != std::string::npos, wanted) << level << ": " << printed;
    EXPECT_EQ(printed.find("ckpt[rank 0] info: loaded '") != std::string::npos, wanted) << level << ": " << printed;
  }
}

}  // namespace

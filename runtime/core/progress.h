// What a save or a load tells its caller while it runs: progress reports (ckpt_progress_fn) at a bounded rate, and
// the clock and wording of its timings (ckpt_request_stats, the INFO line logged when it ends).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace ckpt::runtime {

// Numbered as CKPT_PHASE_*.
enum class Phase : int32_t {
  kPlanning = 0,
  kStaging = 1,
  kWriting = 2,
  kCommitting = 3,
  kCommitted = 4,
  kReading = 5,
  kLoaded = 6,
  kFailed = 7,
};

// `done` of `total` bytes of this rank in `phase`.
using ProgressSink = std::function<void(Phase phase, uint64_t done, uint64_t total)>;

// Reports through a sink: at every phase change, and within a phase at most once per interval, so that a callback
// that logs or draws never slows the copy loops that feed it. Without a sink it does nothing. Not thread-safe: one
// thread at a time uses it (a save's reporter passes from the caller's thread to the save thread with its ticket).
class ProgressReporter {
 public:
  static constexpr std::chrono::milliseconds kInterval{100};

  explicit ProgressReporter(ProgressSink sink = {}) : sink_(std::move(sink)) {}

  // Always reports.
  void Enter(Phase phase, uint64_t done, uint64_t total);
  // Records `done` (at most the phase's total); reports it if it grew and the interval has passed since the last
  // report.
  void Update(uint64_t done);
  uint64_t done() const { return done_; }
  uint64_t total() const { return total_; }

 private:
  void Report();

  ProgressSink sink_;
  Phase phase_ = Phase::kPlanning;
  uint64_t done_ = 0;
  uint64_t total_ = 0;
  std::chrono::steady_clock::time_point last_;
};

// Nanoseconds on the steady clock, never 0 (0 marks a point not reached yet).
int64_t NowNs();

// "1.23 GB in 0.456 s (2.70 GB/s)": decimal units, so that GB/s is bytes per nanosecond; always GB/s, so that
// lines compare at a glance.
std::string DescribeThroughput(uint64_t bytes, uint64_t ns);
// "176 B", "1.23 GB": decimal units.
std::string DescribeBytes(uint64_t bytes);
// "0.456 s".
std::string DescribeSeconds(uint64_t ns);

}  // namespace ckpt::runtime

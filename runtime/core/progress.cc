#include "runtime/core/progress.h"

#include <algorithm>
#include <cstdio>

namespace ckpt::runtime {

void ProgressReporter::Enter(Phase phase, uint64_t done, uint64_t total) {
  phase_ = phase;
  done_ = done;
  total_ = total;
  Report();
}

void ProgressReporter::Update(uint64_t done) {
  done = std::min(done, total_);
  if (done == done_) return;
  done_ = done;
  if (sink_ && std::chrono::steady_clock::now() - last_ >= kInterval) Report();
}

void ProgressReporter::Report() {
  if (!sink_) return;
  last_ = std::chrono::steady_clock::now();
  sink_(phase_, done_, total_);
}

int64_t NowNs() {
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  return std::max<int64_t>(ns, 1);
}

std::string DescribeThroughput(uint64_t bytes, uint64_t ns) {
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.3g GB/s", ns > 0 ? static_cast<double>(bytes) / static_cast<double>(ns) : 0.0);
  return DescribeBytes(bytes) + " in " + DescribeSeconds(ns) + " (" + rate + ")";
}

std::string DescribeBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "kB", "MB", "GB", "TB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1000 && unit + 1 < sizeof kUnits / sizeof kUnits[0]) value /= 1000, ++unit;
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.2f %s", value, kUnits[unit]);
  return text;
}

std::string DescribeSeconds(uint64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f s", static_cast<double>(ns) / 1e9);
  return text;
}

}  // namespace ckpt::runtime

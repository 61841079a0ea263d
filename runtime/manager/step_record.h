// What the manager stores with each step besides its checkpoint: the user's metrics (a JSON object), the score that
// keep_best ranks the step by, and when the step committed, for keep_for. One small JSON file beside the MANIFEST,
// <step>/STEP.json, written by rank 0 into the save's temporary directory before the MANIFEST (on object storage:
// as an object under the step before its MANIFEST), so that it commits with the step and goes with it, and so that
// retention reads one small file per step (once per manager: a record never changes) instead of its manifest.
//
//   {"committed_unix_ns": 1764662400123456789, "score": 0.91, "metrics": {"accuracy": 0.91, "loss": 0.3}}
//
// "score" and "metrics" are absent when the save had none. The file may be hostile like any other in a checkpoint:
// it is read with a size bound, without following links, and parsed with a depth bound; anything else is kCorrupt
// naming it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace ckpt::runtime {

inline constexpr char kStepRecordName[] = "STEP.json";
// The metrics' text: plenty for scalars and small tables, and a bound on what a hostile record makes us read.
inline constexpr uint64_t kMaxMetricsBytes = 1ull << 20;

struct StepRecord {
  int64_t committed_unix_ns = 0;  // rank 0's wall clock when it committed the step
  std::optional<double> score;    // finite
  std::string metrics;            // a JSON object's text; empty: none
};

// The wall clock, as StepRecord::committed_unix_ns counts it.
int64_t UnixNowNs();

// kInvalidArgument unless `text` is one JSON object of at most kMaxMetricsBytes (nested at most 64 deep).
Status CheckMetrics(std::string_view text);
std::string EncodeStepRecord(const StepRecord& record);
// kCorrupt naming `origin` for anything but what EncodeStepRecord writes.
Result<StepRecord> DecodeStepRecord(std::string_view text, const std::string& origin);

// Writes the record into `step_directory` (a directory, or a step's URL on object storage), durably.
Status WriteStepRecord(const std::string& step_directory, const StepRecord& record);
// The record of the step at `step_directory`; nullopt if it has none (saved without a manager, by an older
// version, or through the memory tier, whose agents copy the MANIFEST and data only).
Result<std::optional<StepRecord>> ReadStepRecord(const std::string& step_directory);

}  // namespace ckpt::runtime

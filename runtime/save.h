// The collective save (DESIGN.md §5, synchronous): agree on the state, plan, write, commit atomically.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "runtime/context.h"
#include "runtime/save_plan.h"
#include "runtime/state.h"

namespace ckpt::runtime {

struct SaveSettings {
  std::vector<std::pair<std::string, std::string>> metadata;  // rank 0's are stored
  SavePlanOptions plan;
  uint64_t block_size = 1ull << 20;      // checksum granularity
  uint64_t inline_common_max = 64 << 10;  // larger common entries go to a data file
};

// Collective. On success `path` is a committed, durable checkpoint; on failure, on every rank, the same error and
// no directory at `path`.
Status Save(Context& ctx, const State& state, const std::string& path, const SaveSettings& settings);

}  // namespace ckpt::runtime

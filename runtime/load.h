// The collective load (DESIGN.md §6 without the read-once exchange): each rank validates its request against the
// manifest, all ranks agree on the verdict, then each reads the blocks it needs and all agree on the outcome.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "runtime/context.h"
#include "runtime/state.h"

namespace ckpt::runtime {

enum class Strictness : int32_t { kFail = 0, kLog = 1, kIgnore = 2 };

struct LoadSettings {
  Strictness missing_keys = Strictness::kFail;
  Strictness unexpected_keys = Strictness::kLog;
};

// What a load read, for tests and benchmarks of read amplification.
struct LoadStats {
  uint64_t bytes_read = 0;
};

// Collective. Fills the state's buffers, objects and common entries from the checkpoint at `path`.
Status Load(Context& ctx, State& state, const std::string& path, const LoadSettings& settings,
            LoadStats* stats = nullptr);

}  // namespace ckpt::runtime

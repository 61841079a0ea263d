// The collective load (DESIGN.md §6 without the read-once exchange): each rank validates its request against the
// manifest, all ranks agree on the verdict, then each reads the blocks it needs and all agree on the outcome.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "runtime/checkpoint_source.h"
#include "runtime/context.h"
#include "runtime/file_holders.h"
#include "runtime/progress.h"
#include "runtime/state.h"

namespace ckpt::runtime {

enum class Strictness : int32_t { kFail = 0, kLog = 1, kIgnore = 2 };

struct LoadSettings {
  Strictness missing_keys = Strictness::kFail;
  Strictness unexpected_keys = Strictness::kLog;
  // This rank's progress, from the calling thread: PLANNING, READING (bytes of its tensor pieces filled), then
  // LOADED or FAILED. Empty: none.
  ProgressSink progress;
  // Set by Load itself for a memory copy that no node holds whole (runtime/memory_load.h): which ranks may read
  // which data files. Null: every rank reads every file it is planned to.
  std::shared_ptr<const FileHolders> holders;
};

// Collective. Fills the state's buffers, objects and common entries from the checkpoint at `path`; the bytes it
// read, sent and received are added to the context's statistics, and a successful load logs an INFO line with its
// size and speed.
Status Load(Context& ctx, State& state, const std::string& path, const LoadSettings& settings);
// The same from a source already opened with every chunk decoded (OpenCheckpointSource's default), as a series of
// loads from one checkpoint does; `path` names it in messages.
Status Load(Context& ctx, State& state, const CheckpointSource& source, const std::string& path,
            const LoadSettings& settings);

}  // namespace ckpt::runtime

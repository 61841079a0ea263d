// The collective load: each rank matches its state against the manifest (of the memory tier's copy where the node
// agents hold one, else of the stored checkpoint), all ranks agree on the verdict (runtime/load/load_agreement.h),
// then the tensors are read as the verdict chose (runtime/load/read_strategy.h): each needed stored byte once over the
// transport (runtime/load/exchange_load.h), or by every rank for its own pieces; objects and common entries follow,
// and all ranks agree on the outcome.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "runtime/core/context.h"
#include "runtime/core/progress.h"
#include "runtime/core/state.h"
#include "runtime/format/checkpoint_source.h"
#include "runtime/format/file_holders.h"
#include "runtime/load/exchange_load.h"
#include "runtime/load/key_map.h"
#include "runtime/memtier/memory_attachment.h"

namespace ckpt::runtime {

enum class Strictness : int32_t { kFail = 0, kLog = 1, kIgnore = 2 };

struct LoadSettings {
  Strictness missing_keys = Strictness::kFail;
  Strictness unexpected_keys = Strictness::kLog;
  // Where the registered keys lie in the checkpoint; common entries come back under the registered keys too.
  KeyMap key_map;
  // This rank's progress, from the calling thread: PLANNING, READING (bytes of its tensor pieces filled), then
  // LOADED or FAILED. Empty: none.
  ProgressSink progress;
  // Set by Load itself for a memory copy that no node holds whole (runtime/memtier/memory_load.h): which ranks may read
  // which data files. Null: every rank reads every file it is planned to.
  std::shared_ptr<const FileHolders> holders;
};

// Collective. Fills the state's buffers, objects and common entries from the checkpoint at `path`; the bytes it
// read, sent and received are added to the context's statistics, and a successful load logs an INFO line with its
// size and speed.
// `plans` and `attachment` are this rank's (the C API's context object owns them beside `ctx`).
Status Load(Context& ctx, LoadPlanCache& plans, MemoryAttachment& attachment, State& state, const std::string& path,
            const LoadSettings& settings);
// The same from a source already opened with every chunk decoded (OpenCheckpointSource's default), as a series of
// loads from one checkpoint does; `path` names it in messages.
Status Load(Context& ctx, LoadPlanCache& plans, State& state, const CheckpointSource& source, const std::string& path,
            const LoadSettings& settings);

}  // namespace ckpt::runtime

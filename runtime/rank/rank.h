// One rank of a job, whole: its context (the resources every layer shares) and what its saves, its loads and its
// attachment to the memory tier keep between calls. The C API's context object holds one; the manager's sessions
// save and load through it.
#pragma once

#include <memory>

#include "common/status.h"
#include "runtime/core/context.h"
#include "runtime/load/exchange_load.h"
#include "runtime/memtier/memory_attachment.h"
#include "runtime/save/rank_saves.h"

namespace ckpt::runtime {

struct Rank {
  // Collective, as Context::Create.
  static Result<std::unique_ptr<Rank>> Create(ContextConfig config);
  // Declared in the order of their dependencies, so that they go in reverse: the saves in flight finish first
  // (they use the others), then the memory tier is let go of, then the context's resources.
  std::unique_ptr<Context> context;
  MemoryAttachment memory;
  LoadPlanCache load_plans;
  std::unique_ptr<RankSaves> saves;
};

}  // namespace ckpt::runtime

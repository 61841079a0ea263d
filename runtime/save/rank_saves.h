// What one rank's saves keep between calls: the background executor that finishes them (runtime/save/save_executor.h)
// and the plan of the last save, reused while the structure of the state stays the same on every rank.
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "runtime/core/context.h"
#include "runtime/save/save_executor.h"
#include "runtime/save/save_partition.h"
#include "runtime/save/save_plan.h"

namespace ckpt::runtime {

// The plan of the last save, kept while the structure of the state stays the same on every rank.
struct PlanCache {
  uint64_t structure = 0;                            // 0: none
  SavePlan plan;                                     // this rank's items only
  std::shared_ptr<const ManifestSkeleton> skeleton;  // rank 0
};

class RankSaves {
 public:
  // Starts the executor on the context's arena and workers, committing through the context's second store
  // connection (or locally, for one rank). `ctx` must outlive the saves.
  static std::unique_ptr<RankSaves> Start(Context& ctx);
  // Finishes the saves in flight first.
  ~RankSaves() = default;

  SaveExecutor& executor() { return *executor_; }
  PlanCache& plan_cache() { return plan_cache_; }

 private:
  explicit RankSaves(std::unique_ptr<SaveExecutor> executor) : executor_(std::move(executor)) {}

  std::unique_ptr<SaveExecutor> executor_;
  PlanCache plan_cache_;
};

}  // namespace ckpt::runtime

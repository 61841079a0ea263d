// What one rank's saves keep between calls: the background executor that finishes them (runtime/save/save_executor.h),
// the plan of the last save, reused while the structure of the state stays the same on every rank, and the fault
// handler of copy-on-write saves with the last one's staging.
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "runtime/core/context.h"
#include "runtime/save/save_executor.h"
#include "runtime/save/save_partition.h"
#include "runtime/save/save_plan.h"
#include "runtime/save/write_fault_handler.h"

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

  // The fault handler of copy-on-write saves and of replica checks, started at the first; null where userfaultfd is
  // refused, which the first asking logs at INFO (the saves then stage, and checksum replicas, at the call).
  WriteFaultHandler* CopyOnWrite(const Context& ctx);
  // Saves stage one at a time, as they share the arena and the workers: a save waits here for the staging of the
  // copy-on-write save before it, which runs on after its call (`ticket`: that save, from RanInBackground).
  void AwaitBackgroundStaging();
  void RanInBackground(std::shared_ptr<const SaveTicket> ticket) { background_ = std::move(ticket); }

 private:
  explicit RankSaves(std::unique_ptr<SaveExecutor> executor) : executor_(std::move(executor)) {}

  // Declared first, so destroyed last: the executor's saves stage through it until they finish.
  std::unique_ptr<WriteFaultHandler> copy_on_write_;
  bool copy_on_write_refused_ = false;
  std::unique_ptr<SaveExecutor> executor_;
  PlanCache plan_cache_;
  std::shared_ptr<const SaveTicket> background_;
};

}  // namespace ckpt::runtime

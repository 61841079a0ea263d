// The manager as ranks use it together: a collective open that claims the root for the job and clears a crashed
// run's debris, saves whose commit moves the latest pointer and applies retention (on rank 0, in the background),
// and a collective resume.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/core/context.h"
#include "runtime/core/state.h"
#include "runtime/load/load.h"
#include "runtime/manager/manager.h"
#include "runtime/rank/rank.h"
#include "runtime/save/save.h"

namespace ckpt::runtime {

// The manager's use of the memory tier: every save goes to memory, and every `storage_every`-th step (by step
// number) to storage as well, written there by the agents.
struct MemoryPolicy {
  bool enabled = false;
  uint64_t storage_every = 0;  // 0: steps reach storage only when the trainers die (the agents persist then)
};

class ManagerSession {
 public:
  // Collective: opens `root` on every rank. Rank 0 claims it for the session's lifetime (CheckpointManager::Claim)
  // and removes uncommitted debris; a root another job holds fails the open on every rank with kAlreadyExists
  // naming the holder.
  static Result<std::unique_ptr<ManagerSession>> Open(Rank& rank, std::string root, RetentionPolicy policy,
                                                      MemoryPolicy memory = {});
  // Waits for this manager's saves in flight, so that none finishes against a freed manager.
  ~ManagerSession();

  // Collective, as StartSave, into the directory of `step` (through the memory tier as the policy or the settings'
  // tier say; such a step becomes `latest` once the agents have written it to storage).
  Result<std::shared_ptr<SaveTicket>> Save(const State& state, uint64_t step, SaveSettings settings);
  Result<std::optional<uint64_t>> Latest() const { return manager_->Latest(); }
  Result<std::vector<uint64_t>> CommittedSteps() const { return manager_->CommittedSteps(); }
  // Collective: the step a resume loads, the same on every rank: the latest on storage as rank 0 sees it, or the
  // newest step any rank's node agent holds in memory when it is at least as new; kNotFound on every rank if there
  // is none.
  Result<uint64_t> ResumeStep();
  // Collective: loads ResumeStep's step (from memory when the agents hold it); kNotFound on every rank if none.
  Result<uint64_t> LoadLatest(State& state, const LoadSettings& settings);
  std::string StepPath(uint64_t step) const { return manager_->StepPath(step); }

 private:
  ManagerSession(Rank& rank, std::shared_ptr<CheckpointManager> manager, MemoryPolicy memory)
      : rank_(rank), ctx_(*rank.context), manager_(std::move(manager)), memory_(memory) {}
  // The newest of this root's steps this rank's node agent holds in memory.
  std::optional<uint64_t> NewestInMemory();

  Rank& rank_;
  Context& ctx_;  // rank_'s
  std::shared_ptr<CheckpointManager> manager_;
  MemoryPolicy memory_;
  std::vector<std::shared_ptr<SaveTicket>> in_flight_;
};

}  // namespace ckpt::runtime

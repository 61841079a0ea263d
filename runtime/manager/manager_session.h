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
#include "runtime/manager/background_retention.h"
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

// What a save stores with its step besides the checkpoint (runtime/manager/step_record.h). Every rank passes its
// own, checked before the save starts; rank 0's are stored.
struct StepAnnotations {
  std::string metrics;          // a JSON object's text; empty: none
  std::optional<double> score;  // what keep_best ranks the step by
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

  // Not collective. Waits for the saves in flight, then releases rank 0's claim on the root: from then on the
  // session answers the queries that read the root (Latest, CommittedSteps, StepPath), and Save, ResumeStep and
  // LoadLatest refuse with kInvalidArgument. Closing again does nothing.
  void Close();
  // Not collective. Waits for the saves in flight and, on rank 0, for the retention passes their commits asked for,
  // so that the root then holds what the policy keeps.
  void Wait();

  // Collective, as StartSave, into the directory of `step` (through the memory tier as the policy or the settings'
  // tier say; such a step becomes `latest` once the agents have written it to storage). Rank 0 writes the step's
  // record (its annotations and commit time) into it before the commit, except through the memory tier, whose agents
  // copy the checkpoint alone to storage: there annotations are refused with kInvalidArgument. Once the save
  // commits, rank 0 publishes it and asks for a retention pass, which runs on a thread of its own.
  Result<std::shared_ptr<SaveTicket>> Save(const State& state, uint64_t step, SaveSettings settings,
                                           StepAnnotations annotations = {});
  // Not collective: the metrics saved with `step`, as CheckpointManager::StepMetrics.
  Result<std::optional<std::string>> Metrics(uint64_t step) const { return manager_->StepMetrics(step); }
  Result<std::optional<uint64_t>> Latest() const { return manager_->Latest(); }
  Result<std::vector<uint64_t>> CommittedSteps() const { return manager_->CommittedSteps(); }
  // Collective: the step a resume loads, the same on every rank: the latest on storage as rank 0 sees it, or the
  // newest step any rank's node agent holds in memory when it is at least as new; kNotFound on every rank if there
  // is none. Rank 0 first waits for the retention passes asked for, so that every rank then sees the root as
  // retention left it.
  Result<uint64_t> ResumeStep();
  // Collective: loads ResumeStep's step (from memory when the agents hold it); kNotFound on every rank if none.
  Result<uint64_t> LoadLatest(State& state, const LoadSettings& settings);
  std::string StepPath(uint64_t step) const { return manager_->StepPath(step); }

 private:
  ManagerSession(Rank& rank, std::shared_ptr<CheckpointManager> manager, MemoryPolicy memory);
  // kInvalidArgument naming `what` once the session is closed.
  Status RefuseIfClosed(std::string_view what) const;
  // The newest of this root's steps this rank's node agent holds in memory.
  std::optional<uint64_t> NewestInMemory();

  Rank& rank_;
  Context& ctx_;  // rank_'s
  std::shared_ptr<CheckpointManager> manager_;
  MemoryPolicy memory_;
  std::vector<std::shared_ptr<SaveTicket>> in_flight_;
  // Rank 0's retention passes. Declared after manager_, so destroyed first: its last pass still has the manager.
  std::shared_ptr<BackgroundRetention> retention_;
  bool closed_ = false;
};

}  // namespace ckpt::runtime

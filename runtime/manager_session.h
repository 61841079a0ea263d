// The manager as ranks use it together: a collective open that clears a crashed run's debris, saves whose commit
// moves the latest pointer and applies retention (on rank 0, in the background), and a collective resume.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/context.h"
#include "runtime/load.h"
#include "runtime/manager.h"
#include "runtime/save.h"
#include "runtime/state.h"

namespace ckpt::runtime {

class ManagerSession {
 public:
  // Collective: opens `root` on every rank; rank 0 removes uncommitted debris first.
  static Result<std::unique_ptr<ManagerSession>> Open(Context& ctx, std::string root, RetentionPolicy policy);
  // Waits for this manager's saves in flight, so that none finishes against a freed manager.
  ~ManagerSession();

  // Collective, as StartSave, into the directory of `step`.
  Result<std::shared_ptr<SaveTicket>> Save(const State& state, uint64_t step, SaveSettings settings);
  Result<std::optional<uint64_t>> Latest() const { return manager_->Latest(); }
  Result<std::vector<uint64_t>> CommittedSteps() const { return manager_->CommittedSteps(); }
  // Collective: loads the step that rank 0 sees as latest; kNotFound on every rank if there is none.
  Result<uint64_t> LoadLatest(State& state, const LoadSettings& settings);
  std::string StepPath(uint64_t step) const { return manager_->StepPath(step); }

 private:
  ManagerSession(Context& ctx, std::shared_ptr<CheckpointManager> manager) : ctx_(ctx), manager_(std::move(manager)) {}

  Context& ctx_;
  std::shared_ptr<CheckpointManager> manager_;
  std::vector<std::shared_ptr<SaveTicket>> in_flight_;
};

}  // namespace ckpt::runtime

#include "runtime/manager_session.h"

#include <algorithm>

#include "collectives/agent_protocol.h"
#include "common/bytes.h"
#include "runtime/agreement.h"
#include "runtime/memory_tier.h"

namespace ckpt::runtime {

Result<std::unique_ptr<ManagerSession>> ManagerSession::Open(Context& ctx, std::string root, RetentionPolicy policy,
                                                             MemoryPolicy memory) {
  Result<std::unique_ptr<CheckpointManager>> opened = CheckpointManager::Open(std::move(root), policy);
  Status local = opened.status();
  if (local.ok() && ctx.rank() == 0) {
    Result<std::vector<std::string>> removed = opened.value()->CleanupUncommitted();
    local = removed.status();
    if (removed.ok() && !removed->empty()) {
      ctx.Log(LogLevel::kInfo,
              "removed " + std::to_string(removed->size()) + " uncommitted entries under " + opened.value()->root());
    }
  }
  RETURN_IF_ERROR(Agree(ctx.control(), "manager open", local));
  std::shared_ptr<CheckpointManager> manager = std::move(opened).value();
  return std::unique_ptr<ManagerSession>(new ManagerSession(ctx, std::move(manager), memory));
}

ManagerSession::~ManagerSession() {
  for (const auto& ticket : in_flight_) (void)ticket->Wait(std::chrono::milliseconds(0));
}

Result<std::shared_ptr<SaveTicket>> ManagerSession::Save(const State& state, uint64_t step, SaveSettings settings) {
  if (settings.tier == Tier::kStorage && memory_.enabled) {
    const bool to_storage = memory_.storage_every != 0 && step % memory_.storage_every == 0;
    settings.tier = to_storage ? Tier::kBoth : Tier::kMemory;
  }
  const bool in_memory = settings.tier != Tier::kStorage;
  if (in_memory) {
    settings.manager_root = AbsoluteStoragePath(manager_->root());
    settings.step = step;
  }
  if (ctx_.rank() == 0) {
    // A step saved to memory reaches storage through the agent, which publishes it there; retention still runs.
    settings.after_commit = [manager = manager_, step, in_memory, &ctx = ctx_] {
      const Status published = in_memory ? Status::Ok() : manager->PublishLatest(step);
      if (!published.ok()) ctx.Log(LogLevel::kWarning, "step " + std::to_string(step) + ": " + published.message());
      Result<std::vector<uint64_t>> removed = manager->ApplyRetention();
      if (!removed.ok()) ctx.Log(LogLevel::kWarning, "retention: " + removed.status().message());
    };
  }
  ASSIGN_OR_RETURN(std::shared_ptr<SaveTicket> ticket, StartSave(ctx_, state, manager_->StepPath(step), settings));
  in_flight_.erase(std::remove_if(in_flight_.begin(), in_flight_.end(),
                                  [](const auto& t) { return t->Test().code() != Code::kInProgress; }),
                   in_flight_.end());
  in_flight_.push_back(ticket);
  return ticket;
}

std::optional<uint64_t> ManagerSession::NewestInMemory() {
  const std::string root = AbsoluteStoragePath(manager_->root());
  std::optional<uint64_t> newest;
  for (const coll::agent::MemoryCheckpoint& checkpoint : ctx_.HeldInMemory().checkpoints) {
    if (checkpoint.manager_root == root && (!newest || checkpoint.step > *newest)) newest = checkpoint.step;
  }
  return newest;
}

Result<uint64_t> ManagerSession::LoadLatest(State& state, const LoadSettings& settings) {
  Status local;
  ByteWriter mine;
  if (ctx_.rank() == 0) {
    Result<std::optional<uint64_t>> latest = manager_->Latest();
    local = latest.status();
    std::optional<uint64_t> step = latest.ok() ? *latest : std::nullopt;
    const std::optional<uint64_t> in_memory = local.ok() ? NewestInMemory() : std::nullopt;
    if (in_memory && (!step || *in_memory >= *step)) step = in_memory;
    if (local.ok() && !step) local = NotFound("no committed step under " + manager_->root());
    if (local.ok()) mine.U64(*step);
  }
  ASSIGN_OR_RETURN(std::vector<std::string> views,
                   AgreeAndGather(ctx_.control(), "load latest (step)", local, mine.data()));
  ByteReader rank0(views[0], "latest step from rank 0");
  uint64_t step = 0;
  RETURN_IF_ERROR(rank0.U64(&step));
  RETURN_IF_ERROR(Load(ctx_, state, manager_->StepPath(step), settings));
  return step;
}

}  // namespace ckpt::runtime

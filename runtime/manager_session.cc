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

Result<uint64_t> ManagerSession::ResumeStep() {
  // Rank 0 says the latest step on storage; every rank the newest its node's agent holds, since across nodes a
  // replaced node (rank 0's among them) holds none, and the load fetches it from the others.
  Status local;
  ByteWriter mine;
  std::optional<uint64_t> on_storage;
  if (ctx_.rank() == 0) {
    Result<std::optional<uint64_t>> latest = manager_->Latest();
    local = latest.status();
    if (latest.ok()) on_storage = *latest;
  }
  const std::optional<uint64_t> in_memory = local.ok() ? NewestInMemory() : std::nullopt;
  mine.U8(on_storage.has_value() ? 1 : 0);
  mine.U64(on_storage.value_or(0));
  mine.U8(in_memory.has_value() ? 1 : 0);
  mine.U64(in_memory.value_or(0));
  ASSIGN_OR_RETURN(std::vector<std::string> views,
                   AgreeAndGather(ctx_.control(), "load latest (step)", local, mine.data()));
  std::optional<uint64_t> step, newest_in_memory;
  for (size_t r = 0; r < views.size(); ++r) {
    ByteReader in(views[r], "latest steps from rank " + std::to_string(r));
    uint8_t has_storage = 0, has_memory = 0;
    uint64_t storage_step = 0, memory_step = 0;
    RETURN_IF_ERROR(in.U8(&has_storage));
    RETURN_IF_ERROR(in.U64(&storage_step));
    RETURN_IF_ERROR(in.U8(&has_memory));
    RETURN_IF_ERROR(in.U64(&memory_step));
    RETURN_IF_ERROR(in.ExpectDone());
    if (r == 0 && has_storage) step = storage_step;
    if (has_memory && (!newest_in_memory || memory_step > *newest_in_memory)) newest_in_memory = memory_step;
  }
  if (newest_in_memory && (!step || *newest_in_memory >= *step)) step = newest_in_memory;
  if (!step) return NotFound("no committed step under " + manager_->root() + ", on storage or in memory");
  return *step;
}

Result<uint64_t> ManagerSession::LoadLatest(State& state, const LoadSettings& settings) {
  ASSIGN_OR_RETURN(const uint64_t step, ResumeStep());
  RETURN_IF_ERROR(Load(ctx_, state, manager_->StepPath(step), settings));
  return step;
}

}  // namespace ckpt::runtime

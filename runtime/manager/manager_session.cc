#include "runtime/manager/manager_session.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>

#include "collectives/agent/agent_protocol.h"
#include "common/bytes.h"
#include "common/fault_injection.h"
#include "runtime/core/agreement.h"
#include "runtime/memtier/memory_tier.h"

namespace ckpt::runtime {

namespace {

// Who claims a root, as a job that finds it claimed reads it: "host n1, pid 4242, job 77, rank 0 of 8, since
// 2026-12-02 05:10:00 UTC".
std::string HolderNote(const Context& ctx) {
  Result<std::string> job = coll::agent::JobIdFromEnvironment();
  char since[32] = "";
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  if (gmtime_r(&now, &utc) != nullptr) std::strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S UTC", &utc);
  return "host " + ctx.node_name() + ", pid " + std::to_string(getpid()) + ", job " +
         (job.ok() ? *job : std::string("without an id (CKPT_JOB_ID unset)")) + ", rank " + std::to_string(ctx.rank()) +
         " of " + std::to_string(ctx.world_size()) + ", since " + since;
}

// Rank 0 claims the root and clears a crashed run's debris; the other ranks open it to read.
Result<std::unique_ptr<CheckpointManager>> OpenOnThisRank(Context& ctx, std::string root, RetentionPolicy policy) {
  if (ctx.rank() != 0) return CheckpointManager::Open(std::move(root), policy);
  std::string warning;
  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointManager> manager,
                   CheckpointManager::Claim(std::move(root), policy, HolderNote(ctx), &warning));
  if (!warning.empty()) ctx.Log(LogLevel::kWarning, warning);
  ASSIGN_OR_RETURN(std::vector<std::string> removed, manager->CleanupUncommitted());
  if (!removed.empty()) {
    ctx.Log(LogLevel::kInfo,
            "removed " + std::to_string(removed.size()) + " uncommitted entries under " + manager->root());
  }
  return manager;
}

}  // namespace

Result<std::unique_ptr<ManagerSession>> ManagerSession::Open(Rank& rank, std::string root, RetentionPolicy policy,
                                                             MemoryPolicy memory) {
  Context& ctx = *rank.context;
  Result<std::unique_ptr<CheckpointManager>> opened = OpenOnThisRank(ctx, std::move(root), policy);
  // Every rank returns rank 0's refusal (a root claimed by another job), none waits for a manager that never opens.
  RETURN_IF_ERROR(Agree(ctx.control(), "manager open", opened.status()));
  std::shared_ptr<CheckpointManager> manager = std::move(opened).value();
  return std::unique_ptr<ManagerSession>(new ManagerSession(rank, std::move(manager), memory));
}

ManagerSession::ManagerSession(Rank& rank, std::shared_ptr<CheckpointManager> manager, MemoryPolicy memory)
    : rank_(rank), ctx_(*rank.context), manager_(std::move(manager)), memory_(memory) {
  if (ctx_.rank() != 0) return;
  retention_ = std::make_shared<BackgroundRetention>([manager = manager_, &ctx = ctx_] {
    fault::PauseBeforeRetention();
    Result<std::vector<uint64_t>> removed = manager->ApplyRetention();
    if (!removed.ok()) ctx.Log(LogLevel::kWarning, "retention: " + removed.status().message());
  });
}

ManagerSession::~ManagerSession() {
  for (const auto& ticket : in_flight_) (void)ticket->Wait(std::chrono::milliseconds(0));
}

void ManagerSession::Close() {
  if (closed_) return;
  for (const auto& ticket : in_flight_) (void)ticket->Wait(std::chrono::milliseconds(0));
  in_flight_.clear();
  // The passes the saves asked for run while the steps are still the manager's to remove.
  if (retention_) retention_->Drain();
  manager_->ReleaseClaim();
  closed_ = true;
}

void ManagerSession::Wait() {
  for (const auto& ticket : in_flight_) (void)ticket->Wait(std::chrono::milliseconds(0));
  if (retention_) retention_->Drain();
}

Status ManagerSession::RefuseIfClosed(std::string_view what) const {
  if (!closed_) return Status::Ok();
  return InvalidArgument(std::string(what) + " through the manager of " + Quoted(manager_->root()) +
                         ", which is closed: it answers queries only");
}

Result<std::shared_ptr<SaveTicket>> ManagerSession::Save(const State& state, uint64_t step, SaveSettings settings,
                                                         StepAnnotations annotations) {
  RETURN_IF_ERROR(RefuseIfClosed("cannot save step " + std::to_string(step)));
  if (!annotations.metrics.empty()) RETURN_IF_ERROR(CheckMetrics(annotations.metrics));
  if (settings.tier == Tier::kStorage && memory_.enabled) {
    const bool to_storage = memory_.storage_every != 0 && step % memory_.storage_every == 0;
    settings.tier = to_storage ? Tier::kBoth : Tier::kMemory;
  }
  const bool in_memory = settings.tier != Tier::kStorage;
  if (in_memory && (!annotations.metrics.empty() || annotations.score)) {
    return InvalidArgument("step " + std::to_string(step) +
                           " goes through the memory tier, whose agents write the checkpoint alone to storage: its "
                           "metrics and score would be lost there; save it to storage alone to keep them");
  }
  if (in_memory) {
    settings.manager_root = AbsoluteStoragePath(manager_->root());
    settings.step = step;
  }
  if (ctx_.rank() == 0 && settings.incremental && settings.base.empty() && !in_memory) {
    ASSIGN_OR_RETURN(const std::optional<uint64_t> base, manager_->PinLatest());
    if (base) {
      settings.base = manager_->StepPath(*base);
      settings.base_pin = std::shared_ptr<void>(
          new char, [weak = std::weak_ptr<CheckpointManager>(manager_), step = *base](char* token) {
            delete token;
            if (const std::shared_ptr<CheckpointManager> manager = weak.lock()) manager->Unpin(step);
          });
    }
  }
  if (ctx_.rank() == 0) {
    // A step saved to memory reaches storage through the agent, which publishes it there; retention still runs.
    // Weak: a request the caller keeps must not keep the manager, and with it the root's claim, alive.
    settings.after_commit = [weak = std::weak_ptr<CheckpointManager>(manager_),
                             weak_retention = std::weak_ptr<BackgroundRetention>(retention_), step, in_memory,
                             &ctx = ctx_] {
      const std::shared_ptr<CheckpointManager> manager = weak.lock();
      const std::shared_ptr<BackgroundRetention> retention = weak_retention.lock();
      if (manager == nullptr || retention == nullptr) return;
      manager->AdoptStep(step);
      const Status published = in_memory ? Status::Ok() : manager->PublishLatest(step);
      if (!published.ok()) ctx.Log(LogLevel::kWarning, "step " + std::to_string(step) + ": " + published.message());
      retention->Request();
    };
    // Through the memory tier the record would stay in memory (refused above when it carries annotations).
    if (!in_memory) {
      StepRecord record{0, annotations.score, std::move(annotations.metrics)};
      settings.before_commit = [record = std::move(record)](const std::string& dir) mutable {
        record.committed_unix_ns = UnixNowNs();  // the commit's time, not the save's start
        return WriteStepRecord(dir, record);
      };
    }
  }
  ASSIGN_OR_RETURN(std::shared_ptr<SaveTicket> ticket,
                   StartSave(ctx_, *rank_.saves, rank_.memory, state, manager_->StepPath(step), settings));
  in_flight_.erase(std::remove_if(in_flight_.begin(), in_flight_.end(),
                                  [](const auto& t) { return t->Test().code() != Code::kInProgress; }),
                   in_flight_.end());
  in_flight_.push_back(ticket);
  return ticket;
}

std::optional<uint64_t> ManagerSession::NewestInMemory() {
  const std::string root = AbsoluteStoragePath(manager_->root());
  std::optional<uint64_t> newest;
  for (const coll::agent::MemoryCheckpoint& checkpoint : rank_.memory.HeldInMemory(ctx_).checkpoints) {
    if (checkpoint.manager_root == root && (!newest || checkpoint.step > *newest)) newest = checkpoint.step;
  }
  return newest;
}

Result<uint64_t> ManagerSession::ResumeStep() {
  RETURN_IF_ERROR(RefuseIfClosed("cannot resume"));
  if (retention_) retention_->Drain();
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
  RETURN_IF_ERROR(Load(ctx_, rank_.load_plans, rank_.memory, state, manager_->StepPath(step), settings));
  return step;
}

}  // namespace ckpt::runtime

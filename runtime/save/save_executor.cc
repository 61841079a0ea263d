#include "runtime/save/save_executor.h"

#include "io/file_io.h"
#include "runtime/format/save_directory.h"
#include "runtime/save/commit.h"
#include "runtime/save/memory_commit.h"
#include "runtime/save/save_stager.h"
#include "runtime/save/write_report.h"

namespace ckpt::runtime {
namespace {

// The checkpoint stands whatever happens in the manager's follow-up (publishing `latest`, retention), which
// reports its own problems; an exception there must not turn a committed save into a failed one.
void RunAfterCommit(const CommitInputs& commit) {
  (void)ExceptionIn("after the commit", [&] { commit.after_commit(); });
}

}  // namespace

SaveExecutor::SaveExecutor(io::StagingArena& arena, io::WorkerPool& workers, std::unique_ptr<CommitChannel> channel,
                           int rank, std::function<void(const SaveTicket&, const Status&)> on_finished)
    : arena_(arena),
      workers_(workers),
      channel_(std::move(channel)),
      rank_(rank),
      on_finished_(std::move(on_finished)) {
  thread_ = std::thread([this] { Run(); });
}

SaveExecutor::~SaveExecutor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_all();
  thread_.join();
}

void SaveExecutor::Enqueue(std::shared_ptr<SaveTicket> ticket) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(ticket));
  }
  queued_.notify_all();
}

void SaveExecutor::Run() {
  while (true) {
    std::shared_ptr<SaveTicket> ticket;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queued_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      ticket = std::move(queue_.front());
      queue_.pop_front();
    }
    const CommitInputs& commit = ticket->commit;
    const std::string saving =
        commit.storage_path.empty() ? "saving '" + commit.path + "'" : "saving '" + commit.storage_path + "' to memory";
    Status outcome = GuardedFinalize(*ticket).WithContext(saving);
    if (outcome.ok() && ticket->commit.await_replicas) ticket->commit.await_replicas();
    // Every write of the save has been answered, so no job of it can reopen a file after this. A file whose last
    // job never came (staging stopped early) stays open in its worker otherwise. The save has failed either way: a
    // worker too busy to answer in time closes the files when it gets there, or is killed with them.
    if (!outcome.ok()) (void)workers_.AbandonFiles(ticket->commit.tmp_dir);
    ticket->marks.finished = NowNs();
    // The last report comes before Finish: ckpt_request_free waits for Finish, so none reaches a freed request.
    const uint64_t written = outcome.ok() ? ticket->bytes_to_write : ticket->bytes_written.load();
    ticket->progress.Enter(outcome.ok() ? Phase::kCommitted : Phase::kFailed, written, ticket->bytes_to_write);
    if (on_finished_) on_finished_(*ticket, outcome);
    ticket->Finish(std::move(outcome));
  }
}

Status SaveExecutor::GuardedFinalize(SaveTicket& t) {
  Status outcome;
  std::optional<Status> failure = ExceptionIn("while finishing the save", [&] { outcome = Finalize(t); });
  if (!failure) return outcome;
  // Nothing was committed (the commit's last steps cannot throw). The other ranks wait for rank 0's outcome: they
  // learn of the failure instead of timing out.
  if (rank_ == 0) {
    (void)io::RemoveTree(UncommittedSaveFiles(t.commit.path, t.commit.save_id));
    t.commit.claim.Reset();
    t.commit.base_pin.reset();
    // Should this throw too, the others time out naming rank 0, which is still the truth.
    (void)ExceptionIn("while posting the save's failure", [&] {
      (void)channel_->PostOutcome(t.commit.save_id, *failure);
      // Ranks past the first round of a commit across nodes wait for the second.
      if (t.commit.memory_nodes.node_count > 1) {
        (void)channel_->PostOutcome(NodesRoundId(t.commit.save_id), *failure);
      }
    });
  }
  return *failure;
}

Status SaveExecutor::Finalize(SaveTicket& t) {
  // A copy-on-write save still staging owns the ticket's pending writes until it is done.
  if (t.staging.joinable()) t.staging.join();
  while (!t.pending.empty()) {
    AbsorbOldest(arena_, t);
    t.progress.Update(t.bytes_written);
  }
  t.marks.durable = NowNs();
  if (t.failure.ok()) t.progress.Enter(Phase::kCommitting, t.bytes_written, t.bytes_to_write);
  const std::string& id = t.commit.save_id;
  const std::string report = t.failure.ok() ? EncodeWriterReport(t.report) : std::string();
  Status posted = channel_->PostReport(id, rank_, t.failure, report);
  const bool across_nodes = t.commit.memory_nodes.node_count > 1;
  if (rank_ != 0) {
    if (!posted.ok()) return posted;
    return across_nodes ? FollowCommitAcrossNodes(*channel_, t.commit, rank_) : channel_->AwaitOutcome(id);
  }

  Status outcome = posted;
  std::vector<std::string> own_files;
  if (outcome.ok()) {
    Result<std::vector<std::string>> reports = channel_->CollectReports(id);
    if (reports.ok() && across_nodes) {
      Result<std::vector<std::string>> own = OwnDataFiles(t.commit.tmp_dir);
      if (own.ok()) own_files = std::move(own).value();
      outcome = own.status();
    }
    if (outcome.ok()) outcome = reports.ok() ? CommitSave(t.commit, *reports) : reports.status();
  }
  std::string outcome_id = id;
  if (across_nodes) {
    bool second_awaited = false;
    outcome = CommitAcrossNodes(*channel_, t.commit, outcome, own_files, &second_awaited);
    if (second_awaited) outcome_id = NodesRoundId(id);
  } else if (outcome.ok() && t.commit.announce) {
    outcome = t.commit.announce(own_files);
    if (!outcome.ok()) (void)io::RemoveTree(t.commit.path);
  }
  if (!outcome.ok()) (void)io::RemoveTree(UncommittedSaveFiles(t.commit.path, t.commit.save_id));
  t.commit.claim.Reset();
  t.commit.base_pin.reset();
  if (outcome.ok() && t.commit.after_commit) RunAfterCommit(t.commit);
  // Across nodes, a first round that failed was posted as such, and no rank waits for a second.
  const Status shared = outcome_id == id && across_nodes ? Status::Ok() : channel_->PostOutcome(outcome_id, outcome);
  return outcome.ok() ? shared : outcome;
}

}  // namespace ckpt::runtime

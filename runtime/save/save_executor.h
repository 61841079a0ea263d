// A rank's background save thread (runtime/save/rank_saves.h keeps it between saves): takes staged saves in order,
// waits for their writes, and runs the commit protocol (reports to rank 0, rank 0 commits, every rank learns the
// outcome), so that the training loop never takes part in a collective after ckpt_save returns. When a save fails, on
// whichever rank, this rank's I/O workers close its files before the request reports the failure: a failed save holds
// no descriptor and no disk space.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "io/staging_arena.h"
#include "io/worker_pool.h"
#include "runtime/save/commit_channel.h"
#include "runtime/save/save_ticket.h"

namespace ckpt::runtime {

class SaveExecutor {
 public:
  // `on_finished` runs on the background thread after each save, with its outcome (for statistics and logs).
  // `workers` are the pool the saves were staged to; it must outlive the executor.
  SaveExecutor(io::StagingArena& arena, io::WorkerPool& workers, std::unique_ptr<CommitChannel> channel, int rank,
               std::function<void(const SaveTicket&, const Status&)> on_finished);
  // Finishes every save already queued, then stops.
  ~SaveExecutor();

  void Enqueue(std::shared_ptr<SaveTicket> ticket);

 private:
  void Run();
  // Finalize, with any exception turned into the save's failure (and, on rank 0, into the outcome the others
  // wait for): none may leave the executor's thread.
  Status GuardedFinalize(SaveTicket& ticket);
  Status Finalize(SaveTicket& ticket);

  io::StagingArena& arena_;
  io::WorkerPool& workers_;
  std::unique_ptr<CommitChannel> channel_;
  const int rank_;
  std::function<void(const SaveTicket&, const Status&)> on_finished_;
  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<std::shared_ptr<SaveTicket>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ckpt::runtime

// The context's background thread: takes staged saves in order, waits for their writes, and runs the commit
// protocol (reports to rank 0, rank 0 commits, every rank learns the outcome), so that the training loop never
// takes part in a collective after ckpt_save returns.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "io/staging_arena.h"
#include "runtime/commit_channel.h"
#include "runtime/save_ticket.h"

namespace ckpt::runtime {

class SaveExecutor {
 public:
  // `on_finished` runs on the background thread after each save, with its outcome (for statistics and logs).
  SaveExecutor(io::StagingArena& arena, std::unique_ptr<CommitChannel> channel, int rank,
               std::function<void(const SaveTicket&, const Status&)> on_finished);
  // Finishes every save already queued, then stops.
  ~SaveExecutor();

  void Enqueue(std::shared_ptr<SaveTicket> ticket);

 private:
  void Run();
  Status Finalize(SaveTicket& ticket);

  io::StagingArena& arena_;
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

// Writing memory checkpoints to storage, on a thread of its own so that the agent keeps answering its ranks while
// gigabytes are copied. A persist commits all-or-nothing without the trainers: the copy goes into a claimed
// temporary directory beside the storage path (runtime/format/save_directory.h), is synced, and is renamed into place;
// a manager step is then published as `latest` unless a newer step is.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "agent/memory_store.h"

namespace ckpt::agent {

struct PersistReport {
  uint64_t bytes = 0;            // copied; 0 when the checkpoint was found committed
  bool found_committed = false;  // the storage path held a committed checkpoint already, left untouched
  std::string publish_error;     // committed, but the manager's `latest` could not be moved
};

// Commits the memory checkpoint `checkpoint` of `memory_dir` at its storage path (see above). On failure nothing
// is left at or beside the storage path.
//
// A checkpoint that spans nodes is persisted by every node's agent together, through shared storage and without
// the trainers: node 0 claims the temporary named after the memory save's id, each other node copies its own files
// into it and leaves a marker, and node 0 commits with the MANIFEST once every marker is there. A node missing
// for `peer_wait` means nothing is committed (all-or-nothing); the other nodes wait as long for node 0.
Result<PersistReport> PersistCheckpoint(const std::string& memory_dir, const MemoryCheckpoint& checkpoint,
                                        std::chrono::milliseconds peer_wait);

class Persister {
 public:
  // Starts the thread; verdicts go to `store` (MemoryStore::FinishPersist). `peer_wait`: PersistCheckpoint's.
  Persister(MemoryStore& store, LogFn log, std::chrono::milliseconds peer_wait = kDefaultPeerWait);
  static constexpr std::chrono::milliseconds kDefaultPeerWait{300000};
  // Stop().
  ~Persister();
  Persister(const Persister&) = delete;
  Persister& operator=(const Persister&) = delete;

  void Enqueue(MemoryCheckpoint checkpoint);
  // Whether a persist is queued or running.
  bool Busy() const;
  // Whether any persist failed since the agent started (its log is then kept).
  bool AnyFailed() const;
  // Finishes the persist in progress, drops the queued ones and ends the thread.
  void Stop();

 private:
  void Loop();
  void RunOne(const MemoryCheckpoint& checkpoint);

  MemoryStore& store_;
  const LogFn log_;
  const std::chrono::milliseconds peer_wait_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<MemoryCheckpoint> queue_;
  bool running_one_ = false;
  bool any_failed_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ckpt::agent

// What the two WorkerPool implementations share, private to io/: the pending-job record, the JobPool base, and the
// factory of each pool (in_process_pool.cc, process_pool.cc). WorkerPool::Start (worker_pool.cc) picks one.
#pragma once

#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"
#include "io/file_jobs.h"
#include "io/staging_arena.h"
#include "io/worker_pool.h"

namespace ckpt::io::internal {

enum class JobKind { kWrite, kRead, kAbandonFiles };

// A submitted job waiting for its answer. Exactly one promise is used: write_done for a write, status_done else.
struct PendingJob {
  JobKind kind = JobKind::kWrite;
  std::string description;  // "write '/ckpt/data/0-1.bin'"
  std::promise<Result<WriteResult>> write_done;
  std::promise<Status> status_done;
  ReadFailure* failure = nullptr;
  // The job itself, until it is encoded (processes) or run (threads): the one of its kind.
  WriteJob write;
  ReadJob read;
  std::string directory;

  // For failures outside the job itself (the pool shut down, a worker that would not exit): names the job.
  void Fail(const Status& status) { Refuse(status.WithContext(description)); }
  // Its worker's process or thread ended, or never started, before answering: a write or read fails with `why`,
  // but an abandon succeeds, since the files it was to close went with the worker.
  void WorkerEnded(const Status& why);
  // For a job refused before it was sent, with a message that already names it.
  void Refuse(const Status& status);
};

// What both pools share: jobs become PendingJobs, those reaching past the arena are refused before anything runs,
// the worker index is taken modulo the size, and an abandon is one job per worker, waited for up to the timeout.
class JobPool : public WorkerPool {
 public:
  std::future<Result<WriteResult>> SubmitWrite(int worker, WriteJob job) final;
  std::future<Status> SubmitRead(int worker, ReadJob job, ReadFailure* failure) final;
  Status AbandonFiles(const std::string& directory) final;
  std::string backend_name() const final;

 protected:
  JobPool(uint64_t arena_bytes, std::chrono::milliseconds timeout) : arena_bytes_(arena_bytes), timeout_(timeout) {}
  // Queues a job for worker `index` (already in range); its promise must be fulfilled exactly once.
  virtual void Dispatch(int index, PendingJob job) = 0;
  void SetBackendName(const std::string& name);

  const uint64_t arena_bytes_;
  const std::chrono::milliseconds timeout_;

 private:
  void Submit(int worker, PendingJob pending, const Status& fits);

  mutable std::mutex backend_mutex_;
  std::string backend_name_;
};

// workers == 0: the jobs run on threads of this process.
Result<std::unique_ptr<WorkerPool>> StartInProcessPool(const StagingArena& arena, const WorkerPoolOptions& options);

// workers > 0: `options.workers` ckpt-io-worker processes spawned from `worker_path` (an executable file), each
// mapping `arena`; returns once all have reported ready.
Result<std::unique_ptr<WorkerPool>> StartProcessPool(std::string worker_path, const StagingArena& arena,
                                                     const WorkerPoolOptions& options);

}  // namespace ckpt::io::internal

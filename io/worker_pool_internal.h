// What the two WorkerPool implementations share, private to io/: the pending-job record, the JobPool base, and the
// factory of each pool (in_process_pool.cc, process_pool.cc). WorkerPool::Start (worker_pool.cc) picks one.
#pragma once

#include <future>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"
#include "io/file_jobs.h"
#include "io/staging_arena.h"
#include "io/worker_pool.h"

namespace ckpt::io::internal {

// A submitted job waiting for its answer. Exactly one promise is used, the one of its kind.
struct PendingJob {
  bool is_write = true;
  std::string description;  // "write '/ckpt/data/0-1.bin'"
  std::promise<Result<WriteResult>> write_done;
  std::promise<Status> read_done;
  ReadFailure* failure = nullptr;
  WriteJob write;  // the job itself, until it is encoded (processes) or run (threads)
  ReadJob read;

  // For failures outside the job itself (its worker died, the pool shut down): the message names the job.
  void Fail(const Status& status) { Refuse(status.WithContext(description)); }
  // For a job refused before it was sent, with a message that already names it.
  void Refuse(const Status& status);
};

// What both pools share: jobs become PendingJobs, those reaching past the arena are refused before anything runs,
// and the worker index is taken modulo the size.
class JobPool : public WorkerPool {
 public:
  std::future<Result<WriteResult>> SubmitWrite(int worker, WriteJob job) final;
  std::future<Status> SubmitRead(int worker, ReadJob job, ReadFailure* failure) final;
  std::string backend_name() const final;

 protected:
  explicit JobPool(uint64_t arena_bytes) : arena_bytes_(arena_bytes) {}
  // Queues a job for worker `index` (already in range); its promise must be fulfilled exactly once.
  virtual void Dispatch(int index, PendingJob job) = 0;
  void SetBackendName(const std::string& name);

  const uint64_t arena_bytes_;

 private:
  void Submit(int worker, PendingJob pending, const Status& fits);

  mutable std::mutex backend_mutex_;
  std::string backend_name_;
};

// workers == 0: the jobs run on threads of this process.
Result<std::unique_ptr<WorkerPool>> StartInProcessPool(const StagingArena& arena, const IoTuning& tuning);

// workers > 0: `options.workers` ckpt-io-worker processes spawned from `worker_path` (an executable file), each
// mapping `arena`; returns once all have reported ready.
Result<std::unique_ptr<WorkerPool>> StartProcessPool(std::string worker_path, const StagingArena& arena,
                                                     const WorkerPoolOptions& options);

}  // namespace ckpt::io::internal

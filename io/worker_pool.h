// A rank's I/O workers: helper processes (the ckpt-io-worker executable, started with posix_spawn when the context
// is created, never forked from the trainer) that map the staging arena and run file jobs, so that a crash in the
// trainer's threads cannot corrupt a write in flight, and CUDA state is never inherited. With zero workers the jobs
// run on threads of this process instead.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "io/file_jobs.h"
#include "io/staging_arena.h"

namespace ckpt::io {

struct WorkerPoolOptions {
  int workers = 2;          // 0: in-process threads
  std::string worker_path;  // empty: CKPT_WORKER_PATH, else beside libckpt.so, else installed (FindWorkerExecutable)
  IoTuning tuning;
  std::chrono::milliseconds timeout{300000};  // a job not answered by then fails with kTimeout
};

class WorkerPool {
 public:
  static Result<std::unique_ptr<WorkerPool>> Start(const StagingArena& arena, const WorkerPoolOptions& options);
  virtual ~WorkerPool() = default;

  // Jobs for one file must go to the same worker (index modulo size()). Thread-safe. A worker that died fails its
  // pending jobs with kIo naming the worker, its pid and how it died, and is restarted for the next job.
  virtual std::future<Result<WriteResult>> SubmitWrite(int worker, WriteJob job) = 0;
  virtual std::future<Status> SubmitRead(int worker, ReadJob job, ReadFailure* failure) = 0;
  // A save under `directory` has failed: every worker closes, without syncing, the files inside it that it keeps
  // open for jobs that will now never come. Returns once each worker has, after the jobs submitted to it before;
  // a worker that is not running holds no files and is not started for this. kTimeout (naming the worker) when one
  // has not answered within the pool's timeout: it still closes them when it gets there, or is killed with them.
  // Thread-safe; jobs for that directory submitted afterwards open their files again.
  virtual Status AbandonFiles(const std::string& directory) = 0;
  virtual int size() const = 0;
  // The workers' process ids (empty for in-process threads); for tests that kill one.
  virtual std::vector<pid_t> pids() const = 0;
  virtual std::string backend_name() const = 0;
};

// CKPT_WORKER_PATH if set, else ckpt-io-worker in the directory of the loaded libckpt.so (or of the program that
// links libckpt.a), else in <that dir>/ckpt/, else where `cmake --install` put it (<prefix>/<libdir>/ckpt/).
Result<std::string> FindWorkerExecutable();

}  // namespace ckpt::io

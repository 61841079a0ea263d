#include "io/worker_pool.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <future>
#include <utility>
#include <vector>

#include "io/helper_executable.h"
#include "io/worker_pool_internal.h"
#include "io/worker_protocol.h"

namespace ckpt::io {
namespace {

// CKPT_WORKER_PATH: the ckpt-io-worker executable to spawn instead of the one found beside libckpt. Read here, not
// in common/settings.h, because it concerns only this file and must be honoured even without the runtime layer.
constexpr char kWorkerPathVar[] = "CKPT_WORKER_PATH";
constexpr char kWorkerExecutableName[] = "ckpt-io-worker";

Status CheckOptions(const WorkerPoolOptions& options) {
  if (options.workers < 0) return InvalidArgument("I/O worker count " + std::to_string(options.workers) + " < 0");
  if (options.timeout.count() <= 0) return InvalidArgument("I/O worker timeout must be positive");
  return Status::Ok();
}

}  // namespace

namespace internal {

void PendingJob::Refuse(const Status& status) {
  if (kind == JobKind::kWrite) {
    write_done.set_value(status);
  } else {
    status_done.set_value(status);
  }
}

void PendingJob::WorkerEnded(const Status& why) {
  if (kind == JobKind::kAbandonFiles) return status_done.set_value(Status::Ok());
  Fail(why);
}

std::future<Result<WriteResult>> JobPool::SubmitWrite(int worker, WriteJob job) {
  PendingJob pending;
  pending.description = "write '" + job.path + "'";
  auto done = pending.write_done.get_future();
  const Status fits = CheckSegmentsInArena(job.path, job.segments, arena_bytes_);
  pending.write = std::move(job);
  Submit(worker, std::move(pending), fits);
  return done;
}

std::future<Status> JobPool::SubmitRead(int worker, ReadJob job, ReadFailure* failure) {
  PendingJob pending;
  pending.kind = JobKind::kRead;
  pending.description = "read '" + job.path + "'";
  pending.failure = failure;
  auto done = pending.status_done.get_future();
  const Status fits = CheckSegmentsInArena(job.path, job.segments, arena_bytes_);
  pending.read = std::move(job);
  Submit(worker, std::move(pending), fits);
  return done;
}

Status JobPool::AbandonFiles(const std::string& directory) {
  if (directory.empty()) return InvalidArgument("no directory given whose files the I/O workers should abandon");
  std::vector<std::future<Status>> done;
  for (int worker = 0; worker < size(); ++worker) {
    PendingJob pending;
    pending.kind = JobKind::kAbandonFiles;
    pending.description = "abandon the files under '" + directory + "'";
    pending.directory = directory;
    done.push_back(pending.status_done.get_future());
    Dispatch(worker, std::move(pending));
  }
  // One deadline for all: the workers close their files in parallel.
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  Status first;
  for (size_t worker = 0; worker < done.size(); ++worker) {
    const Status status =
        done[worker].wait_until(deadline) == std::future_status::ready
            ? done[worker].get()
            : Timeout("I/O worker " + std::to_string(worker) + " did not abandon the files under '" + directory +
                      "' within " + std::to_string(timeout_.count()) + " ms: it is still busy with earlier jobs");
    if (first.ok()) first = status;
  }
  return first;
}

std::string JobPool::backend_name() const {
  std::lock_guard<std::mutex> lock(backend_mutex_);
  return backend_name_;
}

void JobPool::SetBackendName(const std::string& name) {
  std::lock_guard<std::mutex> lock(backend_mutex_);
  backend_name_ = name;
}

void JobPool::Submit(int worker, PendingJob pending, const Status& fits) {
  if (!fits.ok()) return pending.Refuse(fits);
  const int n = size();
  Dispatch(((worker % n) + n) % n, std::move(pending));
}

}  // namespace internal

Result<std::string> FindWorkerExecutable() {
  return FindHelperExecutable(kWorkerExecutableName, kWorkerPathVar, ", or use 0 I/O workers (threads)");
}

Result<std::unique_ptr<WorkerPool>> WorkerPool::Start(const StagingArena& arena, const WorkerPoolOptions& options) {
  RETURN_IF_ERROR(CheckOptions(options));
  if (options.workers == 0) return internal::StartInProcessPool(arena, options);
  std::string path = options.worker_path;
  if (path.empty()) {
    ASSIGN_OR_RETURN(path, FindWorkerExecutable());
  } else if (!IsExecutableFile(path)) {
    return NotFound("the I/O worker executable '" + path + "' is missing or not executable (set " +
                    std::string(kWorkerPathVar) + " or the worker path option to the built ckpt-io-worker)");
  }
  return internal::StartProcessPool(std::move(path), arena, options);
}

}  // namespace ckpt::io

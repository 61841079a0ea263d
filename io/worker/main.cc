// ckpt-io-worker: one I/O worker process of a rank. The WorkerPool spawns it (io/process_pool.cc) with the pool's
// socket on fd 3 and the staging arena's memfd on fd 4. It maps the arena, runs the file jobs the pool sends, one at
// a time and in order (a job may keep its file open for the file's next job, until the pool says the save was
// abandoned), and exits 0 when the pool closes the socket. It dies with the pool's process (parent-death
// signal), so a crashed trainer never leaves workers behind. Protocol: io/worker_protocol.h.
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/os_error.h"
#include "io/file_jobs.h"
#include "io/worker_protocol.h"

namespace ckpt::io {
namespace {

// Exit statuses, so that the pool's "exited with status S" says which stage failed.
constexpr int kExitBadArguments = 2;
constexpr int kExitOrphaned = 3;
constexpr int kExitStartupFailed = 4;
constexpr int kExitProtocolError = 5;

void Report(const std::string& who, const Status& status) {
  std::fprintf(stderr, "%s: %s\n", who.c_str(), status.message().c_str());
}

// Asks the kernel to kill this process when the pool's process dies. The parent may already have died before the
// request took effect, which shows as a parent pid other than the one we were given.
bool TieLifetimeToParent(pid_t parent) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return false;
  return getppid() == parent;
}

Result<char*> MapArena(uint64_t arena_bytes) {
  struct stat st;
  if (fstat(kWorkerArenaFd, &st) != 0) {
    return OsError("cannot inspect the staging arena on fd 4", errno);
  }
  if (arena_bytes == 0 || static_cast<uint64_t>(st.st_size) < arena_bytes) {
    return InvalidArgument("the staging arena on fd 4 has " + std::to_string(st.st_size) + " bytes, " +
                           std::to_string(arena_bytes) + " were announced");
  }
  // The rank committed the pages already: map them all now rather than fault them in during a save.
  void* data = mmap(nullptr, arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, kWorkerArenaFd, 0);
  if (data == MAP_FAILED) {
    return OsError("cannot map the staging arena (" + std::to_string(arena_bytes) + " bytes)", errno);
  }
  return static_cast<char*>(data);
}

// Runs one request and returns the reply frame. A job that does not fit the arena is refused, never run.
std::string RunJob(FileJobExecutor& executor, const WorkerRequest& request, uint64_t arena_bytes) {
  if (request.type == MessageType::kAbandonFiles) {
    executor.AbandonFiles(request.directory);
    return EncodeAbandonReply(request.job_id, Status::Ok(), executor.backend_name());
  }
  if (request.type == MessageType::kWrite) {
    const WriteJob& job = request.write;
    const Status fits = CheckSegmentsInArena(job.path, job.segments, arena_bytes);
    const Result<WriteResult> result = fits.ok() ? executor.Write(job) : Result<WriteResult>(fits);
    return EncodeWriteReply(request.job_id, result, executor.backend_name());
  }
  const ReadJob& job = request.read;
  ReadFailure failure;
  Status status = CheckSegmentsInArena(job.path, job.segments, arena_bytes);
  if (status.ok()) status = executor.Read(job, &failure);
  return EncodeReadReply(request.job_id, status, failure, executor.backend_name());
}

// Serves requests until the pool closes the socket.
Status Serve(FileJobExecutor& executor, uint64_t arena_bytes) {
  std::string body;
  for (;;) {
    bool eof = false;
    RETURN_IF_ERROR(ReadFrame(kWorkerSocketFd, &body, &eof));
    if (eof) return Status::Ok();
    ASSIGN_OR_RETURN(WorkerRequest request, DecodeRequest(body));
    RETURN_IF_ERROR(SendAll(kWorkerSocketFd, RunJob(executor, request, arena_bytes)));
  }
}

constexpr int kWorkerNiceness = 10;

int Main(int argc, char** argv) {
  const Result<WorkerArgs> args = ParseWorkerArgs(std::vector<std::string>(argv + 1, argv + argc));
  if (!args.ok()) {
    Report("ckpt-io-worker", args.status());
    return kExitBadArguments;
  }
  const std::string who = "ckpt-io-worker " + std::to_string(args->worker_index);
  if (!TieLifetimeToParent(args->parent_pid)) return kExitOrphaned;
  // Hashing and I/O submission yield the CPU to the training process, whose staging copy is what blocks it.
  (void)setpriority(PRIO_PROCESS, 0, kWorkerNiceness);

  Result<char*> arena = MapArena(args->arena_bytes);
  Result<std::unique_ptr<FileJobExecutor>> executor =
      arena.ok() ? FileJobExecutor::Create(arena.value(), args->arena_bytes, args->tuning) : arena.status();
  ReadyMessage ready;
  ready.status = executor.status();
  if (executor.ok()) ready.backend = executor.value()->backend_name();
  const Status sent = SendAll(kWorkerSocketFd, EncodeReady(ready));
  if (!executor.ok()) {
    Report(who, executor.status());
    return kExitStartupFailed;
  }
  const Status served = sent.ok() ? Serve(*executor.value(), args->arena_bytes) : sent;
  if (!served.ok()) {
    Report(who, served);
    return kExitProtocolError;
  }
  return 0;
}

}  // namespace
}  // namespace ckpt::io

int main(int argc, char** argv) { return ckpt::io::Main(argc, argv); }

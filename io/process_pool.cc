// workers > 0: the pool's jobs run in ckpt-io-worker processes, spawned (never forked) and restarted as needed.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "common/os_error.h"
#include "common/unique_fd.h"
#include "io/worker_pool_internal.h"
#include "io/worker_protocol.h"

namespace ckpt::io::internal {
namespace {

// How long a new worker may take to map the arena and report ready.
constexpr std::chrono::milliseconds kStartupTimeout{30000};
// After a worker's socket closes it should exit at once; after this long it is killed, and after as long again
// its jobs are failed even though it was not reaped (a process stuck in uninterruptible I/O).
constexpr std::chrono::milliseconds kExitGrace{1000};
// How often the loop looks whether an exiting worker can be reaped.
constexpr std::chrono::milliseconds kReapPollInterval{5};
// On destruction, how long workers may take to finish their current job and exit before they are killed.
constexpr std::chrono::milliseconds kShutdownGrace{2000};

using Clock = std::chrono::steady_clock;

std::string DescribeExit(int wait_status) {
  if (WIFEXITED(wait_status)) return "exited with status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    std::string text = "killed by signal " + std::to_string(sig);
#if __GLIBC_PREREQ(2, 32)
    if (const char* name = sigabbrev_np(sig)) text += std::string(" (SIG") + name + ")";
#endif
    return text;
  }
  return "ended with wait status " + std::to_string(wait_status);
}

MessageType ReplyTypeOf(JobKind kind) {
  switch (kind) {
    case JobKind::kWrite:
      return MessageType::kWriteDone;
    case JobKind::kRead:
      return MessageType::kReadDone;
    case JobKind::kAbandonFiles:
    default:
      return MessageType::kFilesAbandoned;
  }
}

std::string WorkerName(int index, pid_t pid) {
  return "I/O worker " + std::to_string(index) + " (pid " + std::to_string(pid) + ")";
}

// One thread owns every socket and child process: it spawns (so PR_SET_PDEATHSIG, which follows the spawning
// thread, lasts as long as the pool), sends, receives, enforces deadlines and reaps. Submitters only queue.
class ProcessPool final : public JobPool {
 public:
  ProcessPool(std::string path, UniqueFd arena_fd, uint64_t arena_bytes, const WorkerPoolOptions& options)
      : JobPool(arena_bytes, options.timeout),
        path_(std::move(path)),
        arena_fd_(std::move(arena_fd)),
        tuning_(options.tuning),
        workers_(options.workers) {}

  ~ProcessPool() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    Wake();
    if (loop_.joinable()) loop_.join();
  }

  Status StartWorkers();

  int size() const override { return static_cast<int>(workers_.size()); }

  // 0 where a worker is not running at the moment (it is restarted by the next job sent to it).
  std::vector<pid_t> pids() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<pid_t> out;
    for (const Worker& w : workers_) out.push_back(w.state == State::kDown ? 0 : w.pid);
    return out;
  }

 private:
  enum class State { kDown, kStarting, kReady };

  struct Worker {
    State state = State::kDown;
    pid_t pid = 0;
    UniqueFd socket;
    FrameReader frames{""};
    std::deque<std::string> outbox;  // frames not yet (fully) sent; the first has outbox_sent bytes sent
    size_t outbox_sent = 0;
    std::map<uint64_t, PendingJob> jobs;  // sent or queued, by job id
    Clock::time_point deadline;           // for the ready message while starting, else for the next answer
    bool start_requested = false;
    std::optional<Status> startup_result;  // what StartWorkers waits for
  };

  // A worker process taken out of service and not yet reaped; its jobs fail once it is.
  struct ExitingProcess {
    int index = 0;
    pid_t pid = 0;
    std::vector<PendingJob> jobs;
    Status cause;  // why it was retired; OK: it died, and its exit status says how
    bool during_startup = false;
    bool killed = false;
    Clock::time_point kill_at;
    Clock::time_point give_up_at;
  };

  void Wake() {
    const uint64_t one = 1;
    if (wake_fd_.get() >= 0) (void)!write(wake_fd_.get(), &one, sizeof one);
  }

  // Encodes the job and queues it for the loop thread, which sends it (starting the worker first if needed). A
  // worker that is down with nothing queued has no file open, so an abandon for it is done without starting it.
  void Dispatch(int index, PendingJob pending) override {
    const uint64_t id = next_job_id_.fetch_add(1);
    std::string frame = Encode(id, pending);
    pending.write = WriteJob();
    pending.read = ReadJob();
    if (frame.size() > kMaxFrameBytes) {
      return pending.Refuse(InvalidArgument(pending.description + ": the job takes " + std::to_string(frame.size()) +
                                            " bytes to describe, more than the I/O worker protocol's limit of " +
                                            std::to_string(kMaxFrameBytes)));
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return pending.Fail(IoError("the I/O worker pool is shutting down"));
      Worker& w = workers_[index];
      if (pending.kind == JobKind::kAbandonFiles && w.state == State::kDown && w.jobs.empty()) {
        return pending.WorkerEnded(Status::Ok());
      }
      if (w.state == State::kReady && w.jobs.empty()) w.deadline = Clock::now() + timeout_;
      w.jobs.emplace(id, std::move(pending));
      w.outbox.push_back(std::move(frame));
    }
    Wake();
  }

  static std::string Encode(uint64_t id, const PendingJob& pending);
  void Loop();
  void Iterate(std::unique_lock<std::mutex>& lock);
  void RetireAll(const Status& why);
  void SpawnWanted();
  Status Spawn(int index);
  void Flush(int index);
  void Receive(int index);
  void HandleReady(int index, const std::string& body);
  void HandleReply(int index, const std::string& body);
  void Retire(int index, Status cause, bool kill_now);
  void CheckDeadlines();
  void ReapExiting();
  void FailExitingJobs(ExitingProcess& exiting, const Status& status, bool reaped);
  void ShutDown(std::unique_lock<std::mutex>& lock);
  int PollTimeoutMs() const;

  const std::string path_;
  const UniqueFd arena_fd_;
  const IoTuning tuning_;
  UniqueFd wake_fd_;
  std::atomic<uint64_t> next_job_id_{1};

  mutable std::mutex mutex_;
  std::condition_variable started_;
  std::vector<Worker> workers_;
  std::vector<ExitingProcess> exiting_;
  bool stopping_ = false;
  std::thread loop_;
};

std::string ProcessPool::Encode(uint64_t id, const PendingJob& pending) {
  switch (pending.kind) {
    case JobKind::kWrite:
      return EncodeWriteRequest(id, pending.write);
    case JobKind::kRead:
      return EncodeReadRequest(id, pending.read);
    case JobKind::kAbandonFiles:
    default:
      return EncodeAbandonRequest(id, pending.directory);
  }
}

Status ProcessPool::StartWorkers() {
  wake_fd_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (wake_fd_.get() < 0) return OsError("cannot create the I/O worker pool's eventfd", errno);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Worker& w : workers_) w.start_requested = true;
  }
  loop_ = std::thread([this] { Loop(); });
  // The loop fails a worker that is not ready within kStartupTimeout; this bound only guards against a loop bug.
  const auto backstop = Clock::now() + kStartupTimeout + 3 * kExitGrace;
  std::unique_lock<std::mutex> lock(mutex_);
  for (Worker& w : workers_) {
    if (!started_.wait_until(lock, backstop, [&] { return w.startup_result.has_value(); })) {
      return Internal("the I/O worker pool did not finish starting its workers");
    }
    if (!w.startup_result->ok()) return *w.startup_result;
  }
  return Status::Ok();
}

void ProcessPool::Loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    // No exception may leave this thread: the workers are retired with it, and the pool serves the next jobs.
    if (std::optional<Status> failure = ExceptionIn("in the I/O worker pool", [&] { Iterate(lock); })) {
      RetireAll(*failure);
    }
  }
  ShutDown(lock);
}

// Workers may still be running the jobs they were given, into the arena: they are killed, and their jobs fail
// once their processes are reaped (ReapExiting), as for a worker that died, never while one may touch the arena.
void ProcessPool::RetireAll(const Status& why) {
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i].state != State::kDown) Retire(static_cast<int>(i), why, /*kill_now=*/true);
  }
}

// One pass of the loop: start workers, send, wait for anything, receive, enforce deadlines. Called with the lock.
void ProcessPool::Iterate(std::unique_lock<std::mutex>& lock) {
  SpawnWanted();
  for (size_t i = 0; i < workers_.size(); ++i) Flush(static_cast<int>(i));
  std::vector<pollfd> fds{{wake_fd_.get(), POLLIN, 0}};
  std::vector<int> owners;
  for (size_t i = 0; i < workers_.size(); ++i) {
    const Worker& w = workers_[i];
    if (w.socket.get() < 0) continue;
    fds.push_back({w.socket.get(), static_cast<short>(POLLIN | (w.outbox.empty() ? 0 : POLLOUT)), 0});
    owners.push_back(static_cast<int>(i));
  }
  const int timeout_ms = PollTimeoutMs();
  lock.unlock();
  const int ready = poll(fds.data(), fds.size(), timeout_ms);
  lock.lock();
  if (ready > 0 && (fds[0].revents & POLLIN) != 0) {
    uint64_t count = 0;
    (void)!read(wake_fd_.get(), &count, sizeof count);
  }
  for (size_t k = 1; ready > 0 && k < fds.size(); ++k) {
    if ((fds[k].revents & (POLLIN | POLLHUP | POLLERR)) != 0) Receive(owners[k - 1]);
  }
  CheckDeadlines();
  ReapExiting();
}

void ProcessPool::SpawnWanted() {
  for (size_t i = 0; i < workers_.size(); ++i) {
    Worker& w = workers_[i];
    if (w.state != State::kDown || (!w.start_requested && w.jobs.empty())) continue;
    w.start_requested = false;
    const Status spawned = Spawn(static_cast<int>(i));
    if (spawned.ok()) continue;
    for (auto& [id, job] : w.jobs) job.WorkerEnded(spawned);
    w.jobs.clear();
    w.outbox.clear();
    w.startup_result = spawned;
    started_.notify_all();
  }
}

Status ProcessPool::Spawn(int index) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    return OsError("cannot create a socket for I/O worker " + std::to_string(index), errno);
  }
  UniqueFd pool_end(pair[0]);
  const UniqueFd child_end(pair[1]);
  // Only the pool's end is non-blocking: the two ends of a socket pair are separate open files.
  if (fcntl(pool_end.get(), F_SETFL, O_NONBLOCK) != 0) {
    return OsError("cannot make the socket of I/O worker " + std::to_string(index) + " non-blocking", errno);
  }
  WorkerArgs args;
  args.worker_index = index;
  args.parent_pid = getpid();
  args.arena_bytes = arena_bytes_;
  args.tuning = tuning_;
  ASSIGN_OR_RETURN(const pid_t pid, SpawnWorker(path_, args, child_end.get(), arena_fd_.get()));
  Worker& w = workers_[index];
  w.state = State::kStarting;
  w.pid = pid;
  w.socket = std::move(pool_end);
  w.frames = FrameReader("messages from " + WorkerName(index, pid));
  w.outbox_sent = 0;
  w.deadline = Clock::now() + kStartupTimeout;
  return Status::Ok();
}

void ProcessPool::Flush(int index) {
  Worker& w = workers_[index];
  while (w.socket.get() >= 0 && !w.outbox.empty()) {
    const std::string& frame = w.outbox.front();
    const ssize_t n =
        send(w.socket.get(), frame.data() + w.outbox_sent, frame.size() - w.outbox_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      // EAGAIN: the worker is busy and its socket is full; poll says when to go on. Otherwise it is gone, and
      // the end of its socket, read next, says so.
      return;
    }
    w.outbox_sent += static_cast<size_t>(n);
    if (w.outbox_sent == frame.size()) {
      w.outbox.pop_front();
      w.outbox_sent = 0;
    }
  }
}

void ProcessPool::Receive(int index) {
  Worker& w = workers_[index];
  char buffer[64 << 10];
  bool ended = false;
  for (;;) {
    const ssize_t n = recv(w.socket.get(), buffer, sizeof buffer, MSG_DONTWAIT);
    if (n > 0) {
      w.frames.Append(buffer, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      ended = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
      break;
    }
  }
  std::string body;
  // Answers sent just before a worker died still count, so they are handled before its end.
  while (w.socket.get() >= 0) {
    Result<bool> next = w.frames.Next(&body);
    if (!next.ok()) return Retire(index, next.status(), true);
    if (!next.value()) break;
    if (w.state == State::kStarting) {
      HandleReady(index, body);
    } else {
      HandleReply(index, body);
    }
  }
  if (ended && w.socket.get() >= 0) Retire(index, Status::Ok(), false);
}

void ProcessPool::HandleReady(int index, const std::string& body) {
  Worker& w = workers_[index];
  const std::string name = WorkerName(index, w.pid);
  Result<ReadyMessage> ready = DecodeReady(body);
  if (!ready.ok()) return Retire(index, ready.status().WithContext(name), true);
  if (ready->protocol != kWorkerProtocolVersion) {
    return Retire(index,
                  VersionError(name + " speaks protocol " + std::to_string(ready->protocol) + ", this libckpt " +
                               std::to_string(kWorkerProtocolVersion) + ": '" + path_ + "' is from another build"),
                  true);
  }
  if (!ready->status.ok()) return Retire(index, ready->status.WithContext(name + " could not start"), true);
  w.state = State::kReady;
  w.deadline = Clock::now() + timeout_;
  SetBackendName(ready->backend);
  w.startup_result = Status::Ok();
  started_.notify_all();
}

void ProcessPool::HandleReply(int index, const std::string& body) {
  Worker& w = workers_[index];
  const std::string name = WorkerName(index, w.pid);
  Result<WorkerReply> reply = DecodeReply(body);
  if (!reply.ok()) return Retire(index, reply.status().WithContext(name), true);
  auto it = w.jobs.find(reply->job_id);
  if (it == w.jobs.end() || ReplyTypeOf(it->second.kind) != reply->type) {
    return Retire(index, Internal(name + " answered job " + std::to_string(reply->job_id) + ", which it was not given"),
                  true);
  }
  PendingJob& job = it->second;
  if (job.kind == JobKind::kWrite) {
    job.write_done.set_value(reply->status.ok() ? Result<WriteResult>(std::move(reply->write_result))
                                                : Result<WriteResult>(reply->status));
  } else {
    if (job.failure != nullptr) *job.failure = reply->read_failure;
    job.status_done.set_value(reply->status);
  }
  w.jobs.erase(it);
  w.deadline = Clock::now() + timeout_;
  if (!reply->backend.empty()) SetBackendName(reply->backend);
}

// Takes a worker out of service: closes its socket (a live worker exits on EOF) and parks its jobs until the
// process is reaped, so no job is reported failed while its process may still touch the arena.
void ProcessPool::Retire(int index, Status cause, bool kill_now) {
  Worker& w = workers_[index];
  const auto now = Clock::now();
  ExitingProcess exiting;
  exiting.index = index;
  exiting.pid = w.pid;
  exiting.cause = std::move(cause);
  exiting.during_startup = w.state == State::kStarting;
  exiting.killed = kill_now && kill(w.pid, SIGKILL) == 0;
  exiting.kill_at = now + kExitGrace;
  exiting.give_up_at = now + 2 * kExitGrace;
  for (auto& [id, job] : w.jobs) exiting.jobs.push_back(std::move(job));
  exiting_.push_back(std::move(exiting));
  w.jobs.clear();
  w.outbox.clear();
  w.outbox_sent = 0;
  w.socket.Reset();
  w.state = State::kDown;
  w.pid = 0;
}

void ProcessPool::CheckDeadlines() {
  const auto now = Clock::now();
  for (size_t i = 0; i < workers_.size(); ++i) {
    Worker& w = workers_[i];
    const std::string name = WorkerName(static_cast<int>(i), w.pid);
    if (w.state == State::kStarting && now >= w.deadline) {
      Retire(static_cast<int>(i),
             Timeout(name + " did not report ready within " + std::to_string(kStartupTimeout.count()) + " ms"), true);
    } else if (w.state == State::kReady && !w.jobs.empty() && now >= w.deadline) {
      Retire(static_cast<int>(i),
             Timeout("no answer from " + name + " within " + std::to_string(timeout_.count()) +
                     " ms; the worker was killed and is restarted for the next job"),
             true);
    }
  }
}

// `reaped`: the process is gone, and with it the files an abandon was to close.
void ProcessPool::FailExitingJobs(ExitingProcess& exiting, const Status& status, bool reaped) {
  for (PendingJob& job : exiting.jobs) {
    if (reaped) {
      job.WorkerEnded(status);
    } else {
      job.Fail(status);
    }
  }
  exiting.jobs.clear();
  if (exiting.during_startup) {
    exiting.during_startup = false;
    workers_[exiting.index].startup_result = status;
    started_.notify_all();
  }
}

void ProcessPool::ReapExiting() {
  const auto now = Clock::now();
  for (auto it = exiting_.begin(); it != exiting_.end();) {
    ExitingProcess& e = *it;
    const std::string name = WorkerName(e.index, e.pid);
    int wait_status = 0;
    const pid_t reaped = waitpid(e.pid, &wait_status, WNOHANG);
    if (reaped == e.pid || (reaped < 0 && errno == ECHILD)) {
      const std::string how =
          reaped == e.pid ? DescribeExit(wait_status) : "exit status unknown (reaped by another waitpid)";
      const std::string phase = e.during_startup ? " failed to start (see its standard error): " : " died: ";
      FailExitingJobs(e, !e.cause.ok() ? e.cause : IoError(name + phase + how), true);
      it = exiting_.erase(it);
      continue;
    }
    if (!e.killed && now >= e.kill_at) e.killed = kill(e.pid, SIGKILL) == 0;
    if (now >= e.give_up_at && (!e.jobs.empty() || e.during_startup)) {
      FailExitingJobs(e, !e.cause.ok() ? e.cause : IoError(name + " closed its socket and did not exit when killed"),
                      false);
    }
    ++it;
  }
}

int ProcessPool::PollTimeoutMs() const {
  const auto now = Clock::now();
  auto wake_at = Clock::time_point::max();
  for (const Worker& w : workers_) {
    const bool has_deadline = w.state == State::kStarting || (w.state == State::kReady && !w.jobs.empty());
    if (has_deadline) wake_at = std::min(wake_at, w.deadline);
  }
  if (!exiting_.empty()) wake_at = std::min(wake_at, now + kReapPollInterval);
  if (wake_at == Clock::time_point::max()) return -1;
  if (wake_at <= now) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake_at - now).count();
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

// Closes every socket so idle workers exit at once and busy ones after their current job; kills those that take
// longer than kShutdownGrace and reaps them all.
void ProcessPool::ShutDown(std::unique_lock<std::mutex>& lock) {
  const Status closing = IoError("the I/O worker pool was shut down first");
  for (size_t i = 0; i < workers_.size(); ++i) {
    Worker& w = workers_[i];
    if (w.state == State::kDown) {
      for (auto& [id, job] : w.jobs) job.WorkerEnded(closing);
      w.jobs.clear();
      continue;
    }
    Retire(static_cast<int>(i), closing, false);
    exiting_.back().kill_at = Clock::now() + kShutdownGrace;
    exiting_.back().give_up_at = Clock::now() + kShutdownGrace + kExitGrace;
  }
  const auto deadline = Clock::now() + kShutdownGrace + 2 * kExitGrace;
  while (true) {
    ReapExiting();
    if (exiting_.empty() || Clock::now() >= deadline) break;
    lock.unlock();
    std::this_thread::sleep_for(kReapPollInterval);
    lock.lock();
  }
}

}  // namespace

Result<std::unique_ptr<WorkerPool>> StartProcessPool(std::string worker_path, const StagingArena& arena,
                                                     const WorkerPoolOptions& options) {
  // The pool's own reference to the memfd, so restarts work whatever happens to the arena's descriptor number.
  UniqueFd arena_fd(fcntl(arena.fd(), F_DUPFD_CLOEXEC, 0));
  if (arena_fd.get() < 0) return OsError("cannot duplicate the staging arena's descriptor", errno);
  auto pool = std::make_unique<ProcessPool>(std::move(worker_path), std::move(arena_fd), arena.capacity(), options);
  RETURN_IF_ERROR(pool->StartWorkers());
  return std::unique_ptr<WorkerPool>(std::move(pool));
}

}  // namespace ckpt::io::internal

// ckpt-agent: the node agent of the memory tier. One runs per user, job and node; a rank starts it
// when none answers on the job's socket. It owns the memory directory the ranks save into, keeps the newest
// complete checkpoint there past the trainers' death, writes checkpoints to storage when asked and when the
// trainers die, and removes the directory when the job no longer needs it.
//
// Its log (--log) stays after anything a user may want to read about: a trainer that died, a failed persist, a
// signal, a failure to start or to leave, a crash of the agent itself. It is removed when the agent leaves after a
// clean end of the job (every rank detached) with none of those.
//
// Exit status: 0 when the agent is ready (as a daemon: once the daemon serves), when an agent of the job already
// runs here, or when it left after its work; 1 when it could not start; CLI11's own for bad flags.
#include <fcntl.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include "agent/agent_server.h"
#include "collectives/agent/agent_protocol.h"
#include "collectives/agent/agent_socket.h"
#include "collectives/store/store_auth.h"
#include "common/os_error.h"
#include "common/settings.h"

namespace ckpt::agent {
namespace {

constexpr uint64_t kDefaultIdleSeconds = 600;
constexpr uint64_t kDefaultLingerSeconds = 2;

struct Flags {
  std::string job_id;
  std::string node;
  std::string shm_root = "/dev/shm";
  std::string socket_dir = coll::agent::DefaultSocketDirectory();
  uint64_t budget_bytes = 0;
  double idle_timeout_s = 0;
  double linger_s = 0;
  int secret_fd = -1;
  std::string log_path;
  bool foreground = false;
};

uint64_t HalfOfMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) / 2 : 0;
}

std::string HostName() {
  char name[256] = {0};
  return gethostname(name, sizeof name - 1) == 0 ? name : "localhost";
}

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000)));
}

// The lines of the log: "ckpt-agent[pid] 2026-01-02T03:04:05 what happened", each in one write, so that lines of
// the persister's thread never interleave with the loop's.
LogFn MakeLog(int fd) {
  return [fd](const std::string& line) {
    char when[32] = {0};
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", localtime_r(&now, &local));
    const std::string text = "ckpt-agent[" + std::to_string(getpid()) + "] " + when + " " + line + "\n";
    (void)!write(fd, text.data(), text.size());
  };
}

// The job's secret, read from `fd` to its end; never from the command line, which every user can read.
Result<std::string> ReadSecret(int fd) {
  std::string secret;
  char buffer[4096];
  while (true) {
    const ssize_t got = read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return OsError("cannot read the job's secret from fd " + std::to_string(fd), errno);
    if (got == 0) break;
    secret.append(buffer, static_cast<size_t>(got));
  }
  close(fd);
  if (!secret.empty()) RETURN_IF_ERROR(coll::store_auth::ValidateSecret(secret, "--secret-fd"));
  return secret;
}

void ParseFlags(CLI::App& app, Flags& flags) {
  app.add_option("--job-id", flags.job_id, "the job served (CKPT_JOB_ID of its ranks)")->required();
  app.add_option("--node", flags.node, "this node's name, as the ranks know it (default: the host name)");
  app.add_option("--shm-root", flags.shm_root, "where the memory directory is made")->capture_default_str();
  app.add_option("--socket-dir", flags.socket_dir,
                 "the directory, private to this user, where the agent listens (default: $CKPT_AGENT_SOCKET_DIR, "
                 "else $XDG_RUNTIME_DIR/ckpt, else /tmp/ckpt-<uid>)")
      ->capture_default_str();
  app.add_option("--budget-bytes", flags.budget_bytes,
                 "bytes of memory checkpoints held at most (default: $CKPT_AGENT_BUDGET_BYTES, else half the memory)");
  app.add_option("--idle-timeout-s", flags.idle_timeout_s,
                 "seconds the checkpoints are kept for a restart after the trainers died (default: $CKPT_AGENT_IDLE_S, "
                 "else 600)");
  flags.linger_s = static_cast<double>(settings::CountFromEnv(settings::kAgentLingerVar, kDefaultLingerSeconds));
  app.add_option("--linger-s", flags.linger_s,
                 "seconds to wait for a new session after the job ended cleanly (default: $CKPT_AGENT_LINGER_S, else " +
                     std::to_string(kDefaultLingerSeconds) + ")");
  app.add_option("--secret-fd", flags.secret_fd, "read the job's secret from this descriptor to its end");
  app.add_option("--log", flags.log_path, "append the log to this file (default: standard error)");
  app.add_flag("--foreground", flags.foreground, "do not become a daemon");
}

// Fills in the defaults the environment gives and checks what the flags cannot.
Status CompleteFlags(Flags& flags) {
  RETURN_IF_ERROR(coll::agent::ValidateJobId(flags.job_id).WithContext("--job-id"));
  if (flags.node.empty()) flags.node = HostName();
  if (flags.budget_bytes == 0)
    flags.budget_bytes = settings::PositiveFromEnv(settings::kAgentBudgetVar, HalfOfMemory());
  if (flags.idle_timeout_s <= 0)
    flags.idle_timeout_s = settings::PositiveFromEnv(settings::kAgentIdleVar, kDefaultIdleSeconds);
  if (flags.linger_s < 0) return InvalidArgument("--linger-s must not be negative");
  // The daemon runs in "/": a relative root would name another directory there.
  flags.shm_root = std::filesystem::absolute(flags.shm_root).lexically_normal().string();
  return Status::Ok();
}

// The daemon's standard streams: /dev/null, and the log for errors, so that it holds none of its starter's pipes.
Status RedirectStandardStreams(int log_fd) {
  UniqueFd null_fd(open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!null_fd.valid()) return OsError("cannot open /dev/null", errno);
  if (dup2(null_fd.get(), STDIN_FILENO) < 0 || dup2(null_fd.get(), STDOUT_FILENO) < 0 ||
      dup2(log_fd == STDERR_FILENO ? null_fd.get() : log_fd, STDERR_FILENO) < 0) {
    return OsError("cannot redirect the standard streams", errno);
  }
  return Status::Ok();
}

// Forks the daemon. The starter returns only in the daemon; it waits for the daemon to report ready (a byte on
// `ready`) and exits 0, or 1 if the daemon failed first, so that the rank that started it knows an agent serves.
Result<UniqueFd> Daemonize(int log_fd) {
  int ends[2];
  if (pipe2(ends, O_CLOEXEC) != 0) return OsError("pipe2 failed", errno);
  UniqueFd read_end(ends[0]), write_end(ends[1]);
  const pid_t pid = fork();
  if (pid < 0) return OsError("fork failed", errno);
  if (pid > 0) {
    write_end.Reset();
    char byte = 0;
    ssize_t got;
    do {
      got = read(read_end.get(), &byte, 1);
    } while (got < 0 && errno == EINTR);
    _exit(got == 1 ? 0 : 1);
  }
  read_end.Reset();
  setsid();
  if (chdir("/") != 0) return OsError("chdir / failed", errno);
  RETURN_IF_ERROR(RedirectStandardStreams(log_fd));
  return write_end;
}

// SIGTERM and SIGINT arrive on a descriptor the loop polls; blocked first, so that the persister's thread
// inherits the mask and a signal never interrupts a copy.
Result<UniqueFd> SignalDescriptor() {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  if (pthread_sigmask(SIG_BLOCK, &mask, nullptr) != 0) return IoError("cannot block SIGTERM and SIGINT");
  UniqueFd fd(signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!fd.valid()) return OsError("signalfd failed", errno);
  return fd;
}

std::string Seconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", seconds);
  return text;
}

std::string Describe(const Flags& flags, bool has_secret, const std::string& memory_dir) {
  return "started: job '" + flags.job_id + "', node '" + flags.node + "', memory directory " + Quoted(memory_dir) +
         ", budget " + std::to_string(flags.budget_bytes) + " bytes, linger " + Seconds(flags.linger_s) +
         ", idle timeout " + Seconds(flags.idle_timeout_s) + ", " +
         (flags.log_path.empty() ? "log on standard error" : "log " + Quoted(flags.log_path)) + ", " +
         (has_secret ? "with the job's secret" : "no job secret") +
         (flags.foreground ? ", in the foreground" : ", as a daemon");
}

int Fail(const Status& status) {
  std::fprintf(stderr, "ckpt-agent: %s\n", status.message().c_str());
  return 1;
}

// The agent proper, in the daemon (or the foreground process). `ready`, when valid, tells the starter it serves.
// `log_needed` says whether the agent met anything its log should be kept for (see the top of this file).
int Serve(const Flags& flags, std::string secret, int listener_fd, MemoryStore& store, const LogFn& log, UniqueFd ready,
          bool* log_needed) {
  Result<UniqueFd> signals = SignalDescriptor();
  if (!signals.ok()) {
    log(signals.status().message());
    return 1;
  }
  log(Describe(flags, !secret.empty(), store.directory()));
  const double persist_wait_s = static_cast<double>(settings::PositiveFromEnv(settings::kAgentPersistWaitVar, 300));
  Persister persister(store, log, Millis(persist_wait_s));
  // Started in the daemon (a fork keeps no thread) once the signals are blocked, which its thread inherits.
  Result<std::unique_ptr<Replicator>> replicator = Replicator::Start(store, {flags.job_id, flags.node, secret}, log);
  Replication replication;
  if (replicator.ok()) {
    replication.replicator = replicator->get();
  } else {
    replication.unavailable = replicator.status().message();
    log("no replication to peer nodes: " + replication.unavailable);
  }
  AgentServer server(listener_fd, signals->get(), AgentIdentity{flags.job_id, flags.node, std::move(secret)},
                     AgentTimes{Millis(flags.linger_s), Millis(flags.idle_timeout_s)}, store, persister,
                     std::move(replication), log);
  if (ready.valid()) {
    const char byte = 1;
    (void)!write(ready.get(), &byte, 1);
    ready.Reset();
  }
  Status removed = server.Run();
  log(removed.ok() ? "exit: the memory directory is removed" : "exit: " + removed.message());
  *log_needed = !removed.ok() || !server.EndedCleanly() || persister.AnyFailed();
  return removed.ok() ? 0 : 1;
}

// The log, for appending: a regular file of this user, never reached through a link (nor a FIFO that would block
// the open), as it lies beside the memory directory in a root that other users may write to (/dev/shm).
Result<UniqueFd> OpenLog(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK, 0600));
  if (!fd.valid()) return OsError("cannot open the log " + Quoted(path), errno);
  struct stat st = {};
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
    return InvalidArgument("the log " + Quoted(path) + " is no regular file of uid " + std::to_string(geteuid()) +
                           ": another user may have put it there; remove it");
  }
  return fd;
}

// Removes the log at `path` if it is still the file the agent wrote (`fd`).
void RemoveLog(const std::string& path, int fd) {
  struct stat held = {}, named = {};
  if (fstat(fd, &held) == 0 && lstat(path.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
      held.st_ino == named.st_ino) {
    (void)unlink(path.c_str());
  }
}

// The socket is bound first, in the process the rank started: its lock is the job's lock on this node, so that of
// two agents started at once one serves and the other says so and leaves.
int Run(Flags& flags) {
  if (Status checked = CompleteFlags(flags); !checked.ok()) return Fail(checked);
  std::string secret;
  if (flags.secret_fd >= 0) {
    Result<std::string> read = ReadSecret(flags.secret_fd);
    if (!read.ok()) return Fail(read.status());
    secret = std::move(*read);
  }
  signal(SIGHUP, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  Result<coll::agent::AgentListener> listener =
      coll::agent::AgentListener::Open(flags.socket_dir, coll::agent::SocketName(flags.job_id, flags.node));
  if (listener.status().code() == Code::kAlreadyExists) {
    std::fprintf(stderr, "ckpt-agent: an agent of job %s already runs here\n", flags.job_id.c_str());
    return 0;
  }
  if (!listener.ok()) return Fail(listener.status());
  UniqueFd log_file;
  if (!flags.log_path.empty()) {
    Result<UniqueFd> opened = OpenLog(flags.log_path);
    if (!opened.ok()) return Fail(opened.status());
    log_file = std::move(*opened);
  }
  const int log_fd = log_file.valid() ? log_file.get() : STDERR_FILENO;
  const LogFn log = MakeLog(log_fd);
  Result<std::unique_ptr<MemoryStore>> store = MemoryStore::Open(
      coll::agent::MemoryDirectory(flags.shm_root, static_cast<uint32_t>(geteuid()), flags.job_id, flags.node),
      flags.node, flags.budget_bytes, log);
  if (!store.ok()) return Fail(store.status());
  UniqueFd ready;
  if (!flags.foreground) {
    Result<UniqueFd> daemon = Daemonize(log_fd);
    if (!daemon.ok()) {
      log(daemon.status().message());
      return 1;
    }
    ready = std::move(*daemon);
  }
  bool log_needed = true;
  const int status = Serve(flags, std::move(secret), listener->fd(), **store, log, std::move(ready), &log_needed);
  listener->Remove();
  if (!log_needed && log_file.valid()) RemoveLog(flags.log_path, log_file.get());
  return status;
}

}  // namespace
}  // namespace ckpt::agent

int main(int argc, char** argv) {
  ckpt::agent::Flags flags;
  CLI::App app{"ckpt-agent: keeps a job's checkpoints in this node's memory and writes them to storage"};
  ckpt::agent::ParseFlags(app, flags);
  CLI11_PARSE(app, argc, argv);
  ckpt::agent::SetReplicationUcxDefaults();
  int status = 1;
  if (std::optional<ckpt::Status> thrown =
          ckpt::ExceptionIn("in ckpt-agent", [&] { status = ckpt::agent::Run(flags); })) {
    std::fprintf(stderr, "ckpt-agent: %s\n", thrown->message().c_str());
    return 1;
  }
  return status;
}

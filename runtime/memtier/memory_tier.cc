#include "runtime/memtier/memory_tier.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "collectives/agent/agent_protocol.h"
#include "collectives/agent/agent_socket.h"
#include "common/os_error.h"
#include "io/checksum.h"
#include "io/helper_executable.h"
#include "io/object_storage.h"

extern char** environ;

namespace ckpt::runtime {
namespace {

namespace agent = coll::agent;

constexpr char kAgentPathVar[] = "CKPT_AGENT_PATH";
// Where agents keep their memory: a tmpfs. Tests point it elsewhere to keep their runs apart.
constexpr char kAgentShmRootVar[] = "CKPT_AGENT_SHM_ROOT";
constexpr char kDefaultShmRoot[] = "/dev/shm";
// The descriptor the agent reads the job's secret from, so that it never appears in a command line.
constexpr int kSecretFd = 3;
// How long a starting agent may take to answer: it only binds its socket and makes its directory.
constexpr std::chrono::seconds kStartTimeout{30};
// How often a rank asks the agent whether its replication or fetch is done: both take far longer.
constexpr std::chrono::milliseconds kPollInterval{5};
// How long a rank that started an agent waits for one to listen on the job's socket: a bound socket listens a
// moment later, and a dying agent is gone a moment later.
constexpr std::chrono::seconds kListenWait{5};
// While nobody listens, how often that rank starts an agent again: one started while the job's lock was still held
// left at once.
constexpr std::chrono::milliseconds kRestartInterval{200};

// Absolute, as the agent (which runs in "/") makes it, so that the rank finds the memory directory beneath it.
std::string ShmRoot() {
  const char* root = std::getenv(kAgentShmRootVar);
  return AbsoluteStoragePath(root != nullptr && *root != '\0' ? root : kDefaultShmRoot);
}

agent::AgentEndpoint EndpointOf(const MemoryTierConfig& config) {
  return {agent::DefaultSocketDirectory(), config.job_id, config.node_name, ShmRoot(), config.job_secret};
}

class Pipe {
 public:
  Status Open() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return OsError("pipe2 failed", errno);
    read_end = UniqueFd(fds[0]);
    write_end = UniqueFd(fds[1]);
    return Status::Ok();
  }
  UniqueFd read_end;
  UniqueFd write_end;
};

// Reads `fd` to end of file, for at most `timeout`. The starting agent closes its end once it is ready (or has
// failed, its reason written there).
Result<std::string> ReadUntilClosed(int fd, std::chrono::milliseconds timeout) {
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return Status(Code::kTimeout, "ckpt-agent did not start within " + std::to_string(timeout.count()) + " ms");
    pollfd waiting{fd, POLLIN, 0};
    if (poll(&waiting, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) {
      return OsError("poll failed", errno);
    }
    char buffer[512];
    const ssize_t got = read(fd, buffer, sizeof buffer);
    if (got == 0) return text;
    if (got > 0 && text.size() < 4096) text.append(buffer, static_cast<size_t>(got));
    if (got < 0 && errno != EINTR && errno != EAGAIN) return OsError("read failed", errno);
  }
}

std::vector<std::string> AgentArguments(const std::string& path, const MemoryTierConfig& config, bool with_secret) {
  const std::string shm_root = ShmRoot();
  const std::string memory_dir =
      agent::MemoryDirectory(shm_root, static_cast<uint32_t>(geteuid()), config.job_id, config.node_name);
  std::vector<std::string> args = {path,     "--job-id",         config.job_id,
                                   "--node", config.node_name,   "--shm-root",
                                   shm_root, "--socket-dir",     agent::DefaultSocketDirectory(),
                                   "--log",  memory_dir + ".log"};
  if (with_secret) {
    args.push_back("--secret-fd");
    args.push_back(std::to_string(kSecretFd));
  }
  return args;
}

// Starts ckpt-agent and waits until it answers: the program binds its socket, daemonizes, and exits 0 once the
// daemon serves (or at once if an agent of this job already runs here); anything else is a failure whose reason
// it wrote to its standard error.
Status StartAgent(const MemoryTierConfig& config) {
  ASSIGN_OR_RETURN(const std::string path, io::FindHelperExecutable("ckpt-agent", kAgentPathVar, ""));
  Pipe output, secret;
  RETURN_IF_ERROR(output.Open());
  const bool with_secret = !config.job_secret.empty();
  if (with_secret) {
    RETURN_IF_ERROR(secret.Open());
    // A secret is far smaller than a pipe's buffer: the write completes before the agent reads.
    if (write(secret.write_end.get(), config.job_secret.data(), config.job_secret.size()) !=
        static_cast<ssize_t>(config.job_secret.size())) {
      return OsError("cannot hand the job's secret to ckpt-agent", errno);
    }
    secret.write_end.Reset();
  }
  std::vector<std::string> strings = AgentArguments(path, config, with_secret);
  std::vector<char*> argv;
  for (std::string& s : strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, output.write_end.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, output.write_end.get(), STDERR_FILENO);
  if (with_secret) posix_spawn_file_actions_adddup2(&actions, secret.read_end.get(), kSecretFd);
  posix_spawn_file_actions_addclosefrom_np(&actions, with_secret ? kSecretFd + 1 : STDERR_FILENO + 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t signals;
  sigemptyset(&signals);
  posix_spawnattr_setsigmask(&attr, &signals);
  sigfillset(&signals);
  sigdelset(&signals, SIGKILL);
  sigdelset(&signals, SIGSTOP);
  posix_spawnattr_setsigdefault(&attr, &signals);
  // A session of its own from the start: a signal to the trainers' process group never reaches the agent.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSID);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, path.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (spawned != 0) return OsError("cannot start " + Quoted(path), spawned);
  output.write_end.Reset();
  secret.read_end.Reset();

  Result<std::string> said = ReadUntilClosed(output.read_end.get(), kStartTimeout);
  if (!said.ok()) kill(pid, SIGKILL);
  int wait_status = 0;
  while (waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
  }
  RETURN_IF_ERROR(said.status());
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) return Status::Ok();
  std::string reason = said.value();
  while (!reason.empty() && reason.back() == '\n') reason.pop_back();
  return IoError("ckpt-agent ('" + path + "') could not start on node '" + config.node_name + "'" +
                 (reason.empty() ? std::string() : ": " + reason));
}

}  // namespace

std::string AbsoluteStoragePath(const std::string& path) {
  if (io::IsObjectStorePath(path)) return path;  // already names one place, from any directory
  std::error_code ignored;
  std::string absolute = std::filesystem::absolute(path, ignored).lexically_normal().string();
  while (absolute.size() > 1 && absolute.back() == '/') absolute.pop_back();
  return absolute;
}

std::string MemoryTier::NameFor(const std::string& storage_path) {
  const std::string absolute = AbsoluteStoragePath(storage_path);
  std::string last = absolute.substr(absolute.rfind('/') + 1).substr(0, 64);
  for (char& c : last) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  }
  if (last.empty() || last[0] == '.') last.insert(0, "c");
  char digest[17];
  std::snprintf(digest, sizeof digest, "%016llx",
                static_cast<unsigned long long>(io::Checksum(absolute.data(), absolute.size())));
  return last + "-" + digest;
}

Result<std::unique_ptr<MemoryTier>> MemoryTier::Attach(const MemoryTierConfig& config, bool start) {
  RETURN_IF_ERROR(agent::ValidateJobId(config.job_id));
  const agent::AgentEndpoint endpoint = EndpointOf(config);
  Result<agent::AgentConnection> opened = agent::AgentConnection::Open(endpoint, config.rank, config.timeout);
  // Two moments pass by themselves, and the rank waits them out for kListenWait. kNotFound: no agent listens yet;
  // the one that serves may be another rank's, whose socket ours found bound (and so left at once) before that one
  // listens on it. kPeerFailed: an agent that is going (killed, or leaving after its linger) closed this connection
  // before welcoming it; it holds the job's lock until it is gone, so an agent started meanwhile found the lock held
  // and left at once: one is started again once nobody listens.
  const auto now = [] { return std::chrono::steady_clock::now(); };
  const auto deadline = now() + kListenWait;
  auto next_start = now();
  while (start && !opened.ok() && now() < deadline) {
    const Code code = opened.status().code();
    if (code != Code::kNotFound && code != Code::kPeerFailed) break;
    if (code == Code::kNotFound && now() >= next_start) {
      RETURN_IF_ERROR(StartAgent(config));
      next_start = now() + kRestartInterval;
    } else {
      std::this_thread::sleep_for(kPollInterval);
    }
    opened = agent::AgentConnection::Open(endpoint, config.rank, config.timeout);
  }
  RETURN_IF_ERROR(opened.status());
  return std::unique_ptr<MemoryTier>(new MemoryTier(std::move(opened).value()));
}

MemoryTier::~MemoryTier() {
  if (broken_) return;
  agent::Request detach;
  detach.op = agent::Op::kDetach;
  (void)Call(detach);
}

Result<agent::Reply> MemoryTier::Call(const agent::Request& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_) return PeerFailed("the node's ckpt-agent died earlier; this rank attaches afresh at its next save");
  Result<agent::Reply> reply = connection_.Call(request);
  // The agent's refusals carry other codes; these two mean that the connection itself is gone.
  if (!reply.ok() && (reply.status().code() == Code::kPeerFailed || reply.status().code() == Code::kTimeout)) {
    broken_ = true;
  }
  return reply;
}

void MemoryTier::NoticeClosedConnection() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!broken_ && connection_.Closed()) broken_ = true;
}

Status MemoryTier::Reserve(const std::string& tmp_name, uint64_t bytes, const std::vector<std::string>& files,
                           const std::vector<uint64_t>& file_sizes) {
  agent::Request request;
  request.op = agent::Op::kReserve;
  request.name = tmp_name;
  request.bytes = bytes;
  request.files = files;
  request.file_sizes = file_sizes;
  return Call(request).status();
}

Status MemoryTier::Release(const std::string& tmp_name) {
  agent::Request request;
  request.op = agent::Op::kRelease;
  request.name = tmp_name;
  return Call(request).status();
}

Status MemoryTier::Complete(const std::string& reservation, const agent::MemoryCheckpoint& checkpoint, bool persist) {
  agent::Request request;
  request.op = agent::Op::kComplete;
  request.reservation = reservation;
  request.checkpoint = checkpoint;
  request.persist = persist;
  return Call(request).status();
}

Result<std::vector<agent::MemoryCheckpoint>> MemoryTier::List() {
  agent::Request request;
  request.op = agent::Op::kList;
  ASSIGN_OR_RETURN(agent::Reply reply, Call(request));
  return agent::DecodeCheckpoints(reply.payload);
}

Status MemoryTier::SetPeers(const std::vector<agent::PeerAgent>& peers, uint32_t node_index, uint32_t replicas) {
  agent::Request request;
  request.op = agent::Op::kPeers;
  request.peers = peers;
  request.node_index = node_index;
  request.replicas = replicas;
  return Call(request).status();
}

Status MemoryTier::Reassign(const agent::MemoryCheckpoint& layout) {
  agent::Request request;
  request.op = agent::Op::kReassign;
  request.checkpoint = layout;
  return Call(request).status();
}

Status MemoryTier::AwaitReplicas(const std::string& name, bool replicas_asked, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    ASSIGN_OR_RETURN(const std::vector<agent::MemoryCheckpoint> held, List());
    auto it = std::find_if(held.begin(), held.end(), [&](const auto& c) { return c.name == name; });
    if (it != held.end() && !replicas_asked) return Status::Ok();
    if (it != held.end() && !it->replication_error.empty()) {
      return PeerFailed("replicating '" + name + "': " + it->replication_error);
    }
    if (it != held.end() && it->replicated) return Status::Ok();
    if (std::chrono::steady_clock::now() >= deadline) {
      const std::string awaited = replicas_asked ? "the replicas of memory checkpoint '" + name + "' were"
                                                 : "memory checkpoint '" + name + "' was";
      return Timeout(awaited + " not in place within " + std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

Status MemoryTier::Fetch(const agent::MemoryCheckpoint& checkpoint, const std::vector<std::string>& files,
                         std::chrono::milliseconds timeout) {
  agent::Request request;
  request.op = agent::Op::kFetch;
  request.checkpoint = checkpoint;
  request.files = files;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    // The agent's refusals arrive as failed calls; kInProgress among them means "ask again".
    const Status answered = Call(request).status();
    if (answered.code() != Code::kInProgress) {
      return answered.WithContext("fetching memory checkpoint '" + checkpoint.name + "' from peers");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Timeout("fetching memory checkpoint '" + checkpoint.name + "' from peers took more than " +
                     std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

}  // namespace ckpt::runtime

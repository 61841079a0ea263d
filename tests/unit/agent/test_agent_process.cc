// The built ckpt-agent as ranks meet it (agent/): started with --foreground (or as a daemon), each test
// with a job id, a memory root and a socket directory of its own, short timeouts, and the agent killed at the end
// whatever happened.
// ctest-labels: threaded
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ckpt.h"
#include "collectives/agent/agent_connection.h"
#include "collectives/agent/agent_socket.h"
#include "common/fault_injection.h"
#include "io/file_io.h"
#include "runtime/manager/manager.h"
#include "runtime/memtier/memory_tier.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::agent {
namespace {

using coll::agent::AgentConnection;
using coll::agent::MemoryCheckpoint;
using coll::agent::Op;
using coll::agent::Request;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kCallTimeout{5000};
constexpr char kNode[] = "n1";
constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";

// Saves a small real checkpoint (one f64 tensor) at `path` through the C API, as a job of one rank.
void SaveTinyCheckpoint(const std::string& path) {
  ckpt_error_t* err = nullptr;
  ASSERT_EQ(ckpt_error_create(&err), CKPT_OK);
  ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
  opts.rank = 0;
  opts.world_size = 1;
  opts.io_workers = 0;  // unit tests link libckpt statically: no worker executable beside them
  ckpt_context_t* ctx = nullptr;
  ASSERT_EQ(ckpt_context_create(&opts, &ctx, err), CKPT_OK) << ckpt_error_message(err);
  ckpt_state_t* state = nullptr;
  ASSERT_EQ(ckpt_state_create(&state, err), CKPT_OK);
  std::vector<double> values(1024, 0.25);
  const uint64_t shape[1] = {values.size()}, zero[1] = {0};
  ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
  shard.key = "w";
  shard.dtype = CKPT_DTYPE_F64;
  shard.ndim = 1;
  shard.global_shape = shape;
  shard.local_shape = shape;
  shard.global_offset = zero;
  shard.data = values.data();
  shard.data_size = sizeof(double) * values.size();
  ASSERT_EQ(ckpt_state_add_tensor(state, &shard, err), CKPT_OK) << ckpt_error_message(err);
  ckpt_request_t* request = nullptr;
  ASSERT_EQ(ckpt_save(ctx, state, path.c_str(), nullptr, &request, err), CKPT_OK) << ckpt_error_message(err);
  EXPECT_EQ(ckpt_request_wait(request, 0, err), CKPT_OK) << ckpt_error_message(err);
  ckpt_request_free(request);
  ckpt_state_free(state);
  ckpt_context_free(ctx);
  ckpt_error_free(err);
}

// What `ckpt verify` checks: the checkpoint at `path` opens and every checksum and size holds.
bool Verifies(const std::string& path) {
  ckpt_error_t* err = nullptr;
  if (ckpt_error_create(&err) != CKPT_OK) return false;
  ckpt_reader_t* reader = nullptr;
  bool ok = ckpt_reader_open(path.c_str(), &reader, err) == CKPT_OK && ckpt_reader_verify(reader, err) == CKPT_OK;
  if (!ok) ADD_FAILURE() << ckpt_error_message(err);
  ckpt_reader_free(reader);
  ckpt_error_free(err);
  return ok;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A connection to the unix socket `path` that checks nothing: a stranger's.
Result<UniqueFd> RawConnect(const std::string& path) {
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un address = {};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
  if (!fd.valid() || connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    return IoError("cannot connect to " + path);
  }
  return fd;
}

template <typename Predicate>
bool WaitUntil(milliseconds limit, Predicate done) {
  const Clock::time_point end = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return true;
}

// Sets environment variables for as long as it lives, then puts back what was there.
class ScopedVariables {
 public:
  explicit ScopedVariables(const std::vector<std::pair<const char*, std::string>>& variables) {
    for (const auto& [name, value] : variables) {
      const char* old = std::getenv(name);
      before_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      setenv(name, value.c_str(), 1);
    }
  }
  ~ScopedVariables() {
    for (const auto& [name, old] : before_) {
      if (old) {
        setenv(name, old->c_str(), 1);
      } else {
        unsetenv(name);
      }
    }
  }

 private:
  std::vector<std::pair<const char*, std::optional<std::string>>> before_;
};

// The test's directory, on tmpfs, is the agent's memory root; storage_ is a directory on a disk.
class AgentProcessTest : public testing::TempDirTest {
 protected:
  AgentProcessTest() : TempDirTest("/dev/shm") {}

  void SetUp() override {
    socket_dir_ = Path("sockets");
    static std::atomic<int> counter{0};
    job_ = "agent-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  }

  void TearDown() override {
    for (pid_t pid : started_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    for (pid_t pid : daemons_) kill(pid, SIGKILL);
  }

  std::string MemoryDir() const {
    return coll::agent::MemoryDirectory(dir(), static_cast<uint32_t>(geteuid()), job_, kNode);
  }
  std::string LogPath(int n) const { return Path("agent-" + std::to_string(n) + ".log"); }
  std::string SocketPath() const { return socket_dir_ + "/" + coll::agent::SocketName(job_, kNode); }

  // Runs ckpt-agent for this test's job with `extra` flags; its output goes to LogPath(n). `secret_fd`, when set,
  // becomes its descriptor 3. `foreground` processes are reaped in TearDown.
  pid_t Spawn(int n, std::vector<std::string> extra, int secret_fd = -1, bool foreground = true) {
    std::vector<std::string> args = {CKPT_AGENT_PATH, "--job-id", job_,           "--node",   kNode,
                                     "--shm-root",    dir(),      "--socket-dir", socket_dir_};
    if (foreground) args.push_back("--foreground");
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const int out = open(LogPath(n).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(out, STDOUT_FILENO);
      dup2(out, STDERR_FILENO);
      if (secret_fd >= 0) dup2(secret_fd, 3);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out);
    if (foreground) started_.push_back(pid);
    return pid;
  }

  // The variables with which MemoryTier::Attach, and the agents it starts, find this test's agent, memory and socket.
  std::vector<std::pair<const char*, std::string>> AttachVariables() const {
    return {{"CKPT_AGENT_PATH", CKPT_AGENT_PATH}, {"CKPT_AGENT_SHM_ROOT", dir()}, {"CKPT_AGENT_SOCKET_DIR", socket_dir_}};
  }
  // A rank attaching to this test's job, starting an agent when none runs.
  Result<std::unique_ptr<runtime::MemoryTier>> AttachAsRank() const {
    runtime::MemoryTierConfig config;
    config.job_id = job_;
    config.node_name = kNode;
    config.timeout = kCallTimeout;
    return runtime::MemoryTier::Attach(config, true);
  }

  Result<AgentConnection> Connect(int rank, const std::string& secret = "") {
    return AgentConnection::Open({socket_dir_, job_, kNode, dir(), secret}, rank, kCallTimeout);
  }

  // Starts a foreground agent and waits until it answers.
  pid_t StartAgent(std::vector<std::string> extra = {}, int secret_fd = -1, const std::string& secret = "") {
    const pid_t pid = Spawn(0, std::move(extra), secret_fd);
    EXPECT_TRUE(WaitUntil(milliseconds(5000), [&] { return Connect(99, secret).ok(); })) << ReadFile(LogPath(0));
    return pid;
  }

  // Waits up to `limit` for the agent `pid` (a child) to exit; its exit status, or -1 if it did not.
  int WaitExit(pid_t pid, milliseconds limit) {
    int status = 0;
    const bool exited = WaitUntil(limit, [&] { return waitpid(pid, &status, WNOHANG) == pid; });
    if (!exited) return -1;
    started_.erase(std::remove(started_.begin(), started_.end(), pid), started_.end());
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  static Request Complete(const std::string& reservation, const MemoryCheckpoint& checkpoint, bool persist) {
    Request request;
    request.op = Op::kComplete;
    request.reservation = reservation;
    request.checkpoint = checkpoint;
    request.persist = persist;
    return request;
  }
  static Request Named(Op op, const std::string& name, uint64_t bytes = 0) {
    Request request;
    request.op = op;
    request.name = name;
    request.bytes = bytes;
    return request;
  }
  static std::vector<MemoryCheckpoint> List(AgentConnection& connection) {
    Result<coll::agent::Reply> reply = connection.Call(Named(Op::kList, ""));
    EXPECT_TRUE(reply.ok()) << reply.status().message();
    if (!reply.ok()) return {};
    return coll::agent::DecodeCheckpoints(reply->payload).value();
  }
  MemoryCheckpoint CheckpointFor(const std::string& name, const std::string& storage_path) const {
    MemoryCheckpoint c;
    c.name = name;
    c.storage_path = storage_path;
    return c;
  }
  // Waits until the agent lists `name` as persisted (or failed to).
  MemoryCheckpoint WaitPersisted(AgentConnection& connection, const std::string& name) {
    MemoryCheckpoint found;
    EXPECT_TRUE(WaitUntil(milliseconds(10000), [&] {
      for (const MemoryCheckpoint& c : List(connection)) {
        if (c.name == name && (c.persisted || !c.persist_error.empty())) found = c;
      }
      return found.persisted || !found.persist_error.empty();
    })) << ReadFile(LogPath(0));
    return found;
  }

  const testing::TempDir storage_{"agent-storage"};
  std::string socket_dir_, job_;
  std::vector<pid_t> started_, daemons_;
};

TEST_F(AgentProcessTest, RankReservesCompletesAndLists) {
  StartAgent();
  Result<AgentConnection> rank = Connect(0);
  ASSERT_TRUE(rank.ok()) << rank.status().message();
  EXPECT_EQ(rank->welcome().memory_dir, MemoryDir());
  ASSERT_TRUE(rank->Call(Named(Op::kReserve, "ck.tmp-1", 1 << 20)).ok());
  SaveTinyCheckpoint(MemoryDir() + "/ck");
  ASSERT_TRUE(rank->Call(Complete("ck.tmp-1", CheckpointFor("ck", storage_.Path("ck")), false)).ok());
  std::vector<MemoryCheckpoint> listed = List(*rank);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].name, "ck");
  EXPECT_EQ(listed[0].storage_path, storage_.Path("ck"));
  EXPECT_GT(listed[0].bytes, 8192u);
  EXPECT_FALSE(listed[0].persisted);
  EXPECT_EQ(rank->Call(Complete("", CheckpointFor("none", storage_.Path("x")), false)).status().code(),
            Code::kNotFound);
  EXPECT_TRUE(rank->Call(Named(Op::kDetach, "")).ok());
}

TEST_F(AgentProcessTest, AConnectionSeesTheAgentsDeathWithoutACall) {
  const pid_t agent = StartAgent();
  Result<AgentConnection> rank = Connect(0);
  ASSERT_TRUE(rank.ok()) << rank.status().message();
  ASSERT_TRUE(rank->Call(Named(Op::kList, "")).ok());
  EXPECT_FALSE(rank->Closed()) << "a live agent, nothing unread";
  kill(agent, SIGKILL);
  EXPECT_EQ(WaitExit(agent, milliseconds(5000)), 128 + SIGKILL);
  EXPECT_TRUE(rank->Closed());
}

TEST_F(AgentProcessTest, ReserveBeyondTheBudgetIsNoSpaceWithTheFigures) {
  StartAgent({"--budget-bytes", "1000"});
  Result<AgentConnection> first = Connect(0), second = Connect(1);
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_TRUE(first->Call(Named(Op::kReserve, "s.tmp-1", 600)).ok());
  Result<coll::agent::Reply> refused = second->Call(Named(Op::kReserve, "s.tmp-1", 500));
  ASSERT_EQ(refused.status().code(), Code::kNoSpace);
  for (const char* part :
       {"node 'n1'", "1000 bytes", "600 bytes reserved", "needs 500 bytes", "CKPT_AGENT_BUDGET_BYTES"}) {
    EXPECT_NE(refused.status().message().find(part), std::string::npos) << refused.status().message();
  }
}

TEST_F(AgentProcessTest, AnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become another user (uid 65534)";
  StartAgent();
  // Opened to the stranger here only, as if it had found a way in: the agent must not rely on the directory alone.
  ASSERT_EQ(chmod(dir().c_str(), 0711), 0);
  ASSERT_EQ(chmod(socket_dir_.c_str(), 0711), 0);
  ASSERT_EQ(chmod(SocketPath().c_str(), 0666), 0);
  const pid_t child = fork();
  if (child == 0) {
    if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) _exit(2);
    // The stranger's own socket directory would differ: it dials the agent of root's job directly.
    Result<UniqueFd> fd = RawConnect(SocketPath());
    if (!fd.ok()) _exit(3);
    Result<std::string> challenge = coll::agent::ReceiveMessage(fd->get(), kCallTimeout);
    coll::agent::Hello hello;
    hello.job_id = job_;
    hello.nonce = std::string(32, 'n');
    if (!challenge.ok() || !coll::agent::SendMessage(fd->get(), coll::agent::EncodeHello(hello)).ok()) _exit(4);
    Result<std::string> reply = coll::agent::ReceiveMessage(fd->get(), kCallTimeout);
    if (!reply.ok()) _exit(5);
    Result<coll::agent::Reply> decoded = coll::agent::DecodeReply(*reply);
    const bool refused = decoded.ok() && decoded->code == Code::kInvalidArgument &&
                         decoded->message.find("uid 65534 may not attach") != std::string::npos;
    _exit(refused ? 0 : 6);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  ASSERT_EQ(chmod(socket_dir_.c_str(), 0700), 0);
  EXPECT_TRUE(Connect(0).ok()) << "the agent still serves its own user";
}

TEST_F(AgentProcessTest, AWrongSecretIsMismatch) {
  int ends[2];
  ASSERT_EQ(pipe(ends), 0);
  ASSERT_EQ(write(ends[1], kSecret, sizeof kSecret - 1), static_cast<ssize_t>(sizeof kSecret - 1));
  close(ends[1]);
  StartAgent({"--secret-fd", "3"}, ends[0], kSecret);
  close(ends[0]);
  Result<AgentConnection> wrong = Connect(0, "fedcba9876543210fedcba9876543210");
  EXPECT_EQ(wrong.status().code(), Code::kMismatch);
  EXPECT_NE(wrong.status().message().find("CKPT_AGENT_SECRET"), std::string::npos) << wrong.status().message();
  EXPECT_EQ(Connect(0).status().code(), Code::kMismatch) << "no secret at all";
  EXPECT_TRUE(Connect(0, kSecret).ok());
}

TEST_F(AgentProcessTest, AProofWithoutTheAgentHavingASecretIsMismatch) {
  StartAgent();
  EXPECT_EQ(Connect(0, kSecret).status().code(), Code::kMismatch);
}

// Sends `bytes` instead of a hello on a connection of its own and expects at most a refusal (garbage may read as
// another protocol version), then the end of that connection.
void ExpectHelloRefusedAndClosed(const std::string& socket_dir, const std::string& job_id, const std::string& bytes) {
  Result<UniqueFd> raw = coll::agent::ConnectToAgent(socket_dir, coll::agent::SocketName(job_id, kNode));
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE(coll::agent::ReceiveMessage(raw->get(), kCallTimeout).ok());
  ASSERT_TRUE(coll::agent::SendMessage(raw->get(), bytes).ok());
  Result<std::string> answer = coll::agent::ReceiveMessage(raw->get(), kCallTimeout);
  if (answer.ok()) {
    Result<coll::agent::Reply> refusal = coll::agent::DecodeReply(*answer);
    ASSERT_TRUE(refusal.ok());
    EXPECT_NE(refusal->code, Code::kOk);
    answer = coll::agent::ReceiveMessage(raw->get(), kCallTimeout);
  }
  EXPECT_EQ(answer.status().code(), Code::kPeerFailed);
}

TEST_F(AgentProcessTest, GarbageInsteadOfAHelloClosesOnlyThatConnection) {
  StartAgent();
  coll::agent::Hello hello;
  hello.job_id = job_;
  ExpectHelloRefusedAndClosed(socket_dir_, job_, "garbage, no hello");
  ExpectHelloRefusedAndClosed(socket_dir_, job_, coll::agent::EncodeHello(hello).substr(0, 7));  // cut short
  Result<AgentConnection> rank = Connect(0);
  ASSERT_TRUE(rank.ok()) << rank.status().message();
  EXPECT_TRUE(List(*rank).empty());
  EXPECT_NE(ReadFile(LogPath(0)).find("undecodable hello"), std::string::npos) << ReadFile(LogPath(0));
}

TEST_F(AgentProcessTest, ASilentConnectionIsClosedAfterTheHelloTimeoutAndStallsNoOne) {
  StartAgent();
  Result<UniqueFd> silent = coll::agent::ConnectToAgent(socket_dir_, coll::agent::SocketName(job_, kNode));
  ASSERT_TRUE(silent.ok());
  ASSERT_TRUE(coll::agent::ReceiveMessage(silent->get(), kCallTimeout).ok());
  Result<AgentConnection> rank = Connect(0);
  ASSERT_TRUE(rank.ok()) << rank.status().message();
  const Clock::time_point start = Clock::now();
  EXPECT_EQ(coll::agent::ReceiveMessage(silent->get(), milliseconds(10000)).status().code(), Code::kPeerFailed);
  EXPECT_LT(Clock::now() - start, milliseconds(7000));
}

TEST_F(AgentProcessTest, TrainerDeathPersistsTheNewestCheckpoint) {
  StartAgent();
  SaveTinyCheckpoint(MemoryDir() + "/ck");
  const std::string target = storage_.Path("run/ck");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t trainer = fork();
  if (trainer == 0) {
    Result<AgentConnection> rank = Connect(0);
    const bool done = rank.ok() && rank->Call(Named(Op::kReserve, "ck.tmp-1", 1 << 20)).ok() &&
                      rank->Call(Complete("ck.tmp-1", CheckpointFor("ck", target), false)).ok();
    const char byte = done ? 1 : 0;
    (void)!write(ready[1], &byte, 1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  kill(trainer, SIGKILL);
  waitpid(trainer, nullptr, 0);
  ASSERT_EQ(byte, 1) << "the trainer could not complete its checkpoint";

  Result<AgentConnection> observer = Connect(1);
  ASSERT_TRUE(observer.ok());
  EXPECT_TRUE(WaitPersisted(*observer, "ck").persisted) << ReadFile(LogPath(0));
  EXPECT_TRUE(io::PathExists(target + "/MANIFEST"));
  EXPECT_EQ(io::ListDirectory(storage_.Path("run")).value(), std::vector<std::string>{"ck"}) << "no .tmp- left";
  EXPECT_TRUE(Verifies(target));
}

TEST_F(AgentProcessTest, ACleanEndExitsAfterTheLingerAndRemovesTheMemory) {
  const pid_t agent = StartAgent({"--linger-s", "0.5", "--idle-timeout-s", "60"});
  Result<AgentConnection> a = Connect(0), b = Connect(1);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(io::IsDirectory(MemoryDir()));
  ASSERT_TRUE(a->Call(Named(Op::kDetach, "")).ok());
  std::this_thread::sleep_for(milliseconds(800));
  EXPECT_TRUE(io::IsDirectory(MemoryDir())) << "rank 1 is still attached";
  ASSERT_TRUE(b->Call(Named(Op::kDetach, "")).ok());
  EXPECT_EQ(WaitExit(agent, milliseconds(1500)), 0) << ReadFile(LogPath(0));
  EXPECT_FALSE(io::PathExists(MemoryDir()));
}

TEST_F(AgentProcessTest, WithoutTheFlagTheLingerComesFromTheEnvironment) {
  setenv("CKPT_AGENT_LINGER_S", "0", 1);
  const pid_t agent = StartAgent({"--idle-timeout-s", "60"});
  unsetenv("CKPT_AGENT_LINGER_S");
  Result<AgentConnection> rank = Connect(0);
  ASSERT_TRUE(rank.ok());
  ASSERT_TRUE(rank->Call(Named(Op::kDetach, "")).ok());
  EXPECT_EQ(WaitExit(agent, milliseconds(1000)), 0)
      << "gone at once, not after the default 2 s: " << ReadFile(LogPath(0));
}

TEST_F(AgentProcessTest, AfterADeathTheAgentStaysForTheIdleTimeoutThenLeaves) {
  const pid_t agent = StartAgent({"--linger-s", "0.2", "--idle-timeout-s", "1.5"});
  {
    Result<AgentConnection> rank = Connect(0);
    ASSERT_TRUE(rank.ok());
  }  // closed without detaching: a death
  std::this_thread::sleep_for(milliseconds(800));
  EXPECT_EQ(WaitExit(agent, milliseconds(0)), -1) << "it left after the linger, not the idle timeout";
  EXPECT_EQ(WaitExit(agent, milliseconds(3000)), 0) << ReadFile(LogPath(0));
  EXPECT_FALSE(io::PathExists(MemoryDir()));
}

TEST_F(AgentProcessTest, ACleanEndRemovesTheAgentsLogSocketAndLock) {
  const std::string log = Path("agent.log");
  const pid_t agent = StartAgent({"--linger-s", "0", "--idle-timeout-s", "60", "--log", log});
  Result<AgentConnection> rank = Connect(0);
  ASSERT_TRUE(rank.ok());
  ASSERT_TRUE(io::PathExists(log));
  ASSERT_TRUE(rank->Call(Named(Op::kDetach, "")).ok());
  EXPECT_EQ(WaitExit(agent, milliseconds(3000)), 0) << ReadFile(log);
  EXPECT_FALSE(io::PathExists(log)) << ReadFile(log);
  EXPECT_EQ(io::ListDirectory(socket_dir_).value(), std::vector<std::string>{}) << "socket or lock left";
}

TEST_F(AgentProcessTest, AfterATrainerDiedTheAgentsLogStaysToReadWhy) {
  const std::string log = Path("agent.log");
  const pid_t agent = StartAgent({"--linger-s", "0", "--idle-timeout-s", "1", "--log", log});
  {
    Result<AgentConnection> rank = Connect(0);
    ASSERT_TRUE(rank.ok());
  }  // closed without detaching: a death
  EXPECT_EQ(WaitExit(agent, milliseconds(3000)), 0);
  EXPECT_NE(ReadFile(log).find("session died"), std::string::npos) << ReadFile(log);
}

TEST_F(AgentProcessTest, AnAgentTakesOverTheSocketAKilledOneLeft) {
  const pid_t first = StartAgent();
  kill(first, SIGKILL);
  EXPECT_EQ(WaitExit(first, milliseconds(3000)), 128 + SIGKILL);
  ASSERT_TRUE(io::PathExists(SocketPath())) << "a killed agent leaves its socket file";
  EXPECT_EQ(Connect(0).status().code(), Code::kNotFound) << "nobody listens there";
  StartAgent();
  EXPECT_TRUE(Connect(0).ok());
}

TEST_F(AgentProcessTest, ASecondAgentOfTheJobExitsAtOnceSayingOneRuns) {
  StartAgent();
  const pid_t second = Spawn(1, {});
  EXPECT_EQ(WaitExit(second, milliseconds(3000)), 0);
  EXPECT_NE(ReadFile(LogPath(1)).find("an agent of job " + job_ + " already runs here"), std::string::npos)
      << ReadFile(LogPath(1));
  EXPECT_TRUE(Connect(0).ok()) << "the first agent still serves";
}

// A rank whose own agent found the job's socket bound, by another rank's agent that does not listen yet, had it
// exit at once ("already runs"); the rank then waits for that agent to listen instead of failing. The first agent
// pauses between binding and listening (CKPT_FAULT_LISTEN_DELAY_MS) to hold that moment open.
TEST_F(AgentProcessTest, ARankWhoseAgentFindsAnotherOneStartingWaitsForItToListen) {
  if (!fault::kCompiledIn) GTEST_SKIP() << "a build without CKPT_FAULT_INJECTION has no fault hooks";
  std::vector<std::pair<const char*, std::string>> variables = AttachVariables();
  variables.emplace_back(fault::kListenDelayVar, "1500");
  const ScopedVariables set(variables);
  Spawn(0, {});
  std::this_thread::sleep_for(milliseconds(300));  // it has bound the socket, and waits
  Result<std::unique_ptr<runtime::MemoryTier>> attached = AttachAsRank();
  ASSERT_TRUE(attached.ok()) << attached.status().message() << "\n" << ReadFile(LogPath(0));
  EXPECT_EQ((*attached)->memory_dir(), MemoryDir()) << "attached to the first agent";
}

// A rank that meets the job's agent as it goes (its socket still listens and its lock is still held, but it answers
// nobody: here the test holds both, then lets go as a leaving agent does, its queue unserved) starts a new agent
// once that one is gone, instead of failing on the reset connection.
TEST_F(AgentProcessTest, ARankThatMeetsAGoingAgentStartsANewOneOnceItIsGone) {
  Result<coll::agent::AgentListener> opened =
      coll::agent::AgentListener::Open(socket_dir_, coll::agent::SocketName(job_, kNode));
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  std::optional<coll::agent::AgentListener> going(std::move(opened).value());
  std::thread goes([&] {
    std::this_thread::sleep_for(milliseconds(500));
    going.reset();
  });
  const ScopedVariables variables(AttachVariables());
  Result<std::unique_ptr<runtime::MemoryTier>> attached = AttachAsRank();
  goes.join();
  ASSERT_TRUE(attached.ok()) << attached.status().message();
  EXPECT_EQ((*attached)->memory_dir(), MemoryDir()) << "attached to a new agent of the job";
}

TEST_F(AgentProcessTest, ADaemonStartReturnsOnceItServesAndHoldsNoneOfTheStartersStreams) {
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  const std::string log = Path("daemon.log");
  std::vector<std::string> args = {CKPT_AGENT_PATH, "--job-id", job_, "--node",           kNode, "--shm-root",
                                   dir(),           "--log",    log,  "--idle-timeout-s", "30",  "--socket-dir",
                                   socket_dir_};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t starter = fork();
  if (starter == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(out[1], STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  int status = 0;
  ASSERT_EQ(waitpid(starter, &status, 0), starter);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // The daemon's pid, from its first log line, so that TearDown can end it whatever happens below.
  const std::string text = ReadFile(log);
  const size_t open = text.find("ckpt-agent[");
  ASSERT_NE(open, std::string::npos) << text;
  const pid_t daemon = static_cast<pid_t>(std::stol(text.substr(open + 11)));
  daemons_.push_back(daemon);
  EXPECT_NE(text.find("as a daemon"), std::string::npos) << text;

  EXPECT_TRUE(Connect(0).ok()) << "the starter returned before the daemon served";
  pollfd eof{out[0], POLLIN, 0};
  ASSERT_EQ(poll(&eof, 1, 2000), 1) << "the daemon holds the starter's stdout or stderr";
  char byte;
  EXPECT_EQ(read(out[0], &byte, 1), 0);
  close(out[0]);

  ASSERT_EQ(kill(daemon, SIGTERM), 0);
  EXPECT_TRUE(WaitUntil(milliseconds(3000), [&] { return !io::PathExists(MemoryDir()); }));
  EXPECT_TRUE(WaitUntil(milliseconds(3000), [&] { return kill(daemon, 0) != 0; })) << "the daemon did not exit";
  EXPECT_NE(ReadFile(log).find("exit: the memory directory is removed"), std::string::npos) << ReadFile(log);
}

TEST_F(AgentProcessTest, PersistWithAManagerPublishesLatestButNeverMovesItBack) {
  StartAgent();
  const std::string root = storage_.Path("manager");
  Result<AgentConnection> rank = Connect(0);
  ASSERT_TRUE(rank.ok());
  for (uint64_t step : {7, 5}) {
    const std::string name = runtime::StepDirectoryName(step);
    SaveTinyCheckpoint(MemoryDir() + "/" + name);
    MemoryCheckpoint c = CheckpointFor(name, root + "/" + name);
    c.manager_root = root;
    c.step = step;
    ASSERT_TRUE(rank->Call(Complete("", c, true)).ok());
    const MemoryCheckpoint persisted = WaitPersisted(*rank, name);
    EXPECT_TRUE(persisted.persisted) << persisted.persist_error;
    EXPECT_EQ(persisted.persist_error, "");
    Result<std::unique_ptr<runtime::CheckpointManager>> manager = runtime::CheckpointManager::Open(root, {});
    ASSERT_TRUE(manager.ok());
    EXPECT_TRUE((*manager)->IsCommitted(step));
    EXPECT_EQ(ReadFile(root + "/latest"), runtime::StepDirectoryName(7) + "\n");
  }
}

TEST_F(AgentProcessTest, PersistOntoACommittedPathMarksItPersistedWithoutTouchingIt) {
  StartAgent();
  const std::string target = storage_.Path("ck");
  ASSERT_TRUE(io::MakeDirectories(target).ok());
  std::ofstream(target + "/MANIFEST") << "someone else's";
  SaveTinyCheckpoint(MemoryDir() + "/ck");
  Result<AgentConnection> rank = Connect(0);
  ASSERT_TRUE(rank.ok());
  ASSERT_TRUE(rank->Call(Complete("", CheckpointFor("ck", target), true)).ok());
  EXPECT_TRUE(WaitPersisted(*rank, "ck").persisted);
  EXPECT_EQ(ReadFile(target + "/MANIFEST"), "someone else's");
  EXPECT_EQ(io::ListDirectory(target).value(), std::vector<std::string>{"MANIFEST"});
  EXPECT_EQ(io::ListDirectory(storage_.path()).value(), std::vector<std::string>{"ck"});
}

TEST_F(AgentProcessTest, AFailedPersistIsListedAndLeavesNothingOnStorage) {
  StartAgent();
  const std::string target = storage_.Path("ck");
  ASSERT_TRUE(io::MakeDirectories(target).ok());  // a directory that is no checkpoint: never overwritten
  SaveTinyCheckpoint(MemoryDir() + "/ck");
  Result<AgentConnection> rank = Connect(0);
  ASSERT_TRUE(rank.ok());
  ASSERT_TRUE(rank->Call(Complete("", CheckpointFor("ck", target), false)).ok());
  ASSERT_TRUE(rank->Call(Named(Op::kPersist, "ck")).ok());
  const MemoryCheckpoint failed = WaitPersisted(*rank, "ck");
  EXPECT_FALSE(failed.persisted);
  EXPECT_NE(failed.persist_error.find("already exists"), std::string::npos) << failed.persist_error;
  EXPECT_EQ(io::ListDirectory(storage_.path()).value(), std::vector<std::string>{"ck"});
  EXPECT_TRUE(io::PathExists(MemoryDir() + "/ck/MANIFEST")) << "the memory copy stays";
  EXPECT_EQ(rank->Call(Named(Op::kPersist, "missing")).status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace ckpt::agent

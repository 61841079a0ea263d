// A rank meets a process posing as its node's ckpt-agent: another user's process at the agent's address, a socket
// directory another user made first, a process of this user that cannot prove the job's secret, and a memory
// directory that is a link, another user's, open to others, or outside the memory root. Each time the rank refuses
// with a message naming what is wrong, and the impostor receives nothing but the rank's hello (or not even that).
// ctest-labels: threaded
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>

#include "collectives/agent/agent_connection.h"
#include "collectives/agent/agent_socket.h"
#include "collectives/store/private_directory.h"
#include "io/file_io.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::coll::agent {
namespace {

using std::chrono::milliseconds;

constexpr char kNode[] = "n1";
constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";
constexpr uid_t kNobody = 65534;
constexpr milliseconds kTimeout{5000};

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Becomes uid and gid 65534 (a child of the test only).
bool BecomeNobody() { return setresgid(kNobody, kNobody, kNobody) == 0 && setresuid(kNobody, kNobody, kNobody) == 0; }

// A listening unix socket at `path`, bound by this process as it is now; listen() happens in `Listen`.
UniqueFd BoundSocket(const std::string& path) {
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un address = {};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
  if (!fd.valid() || bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) return UniqueFd();
  return fd;
}

// Accepts one connection within `wait` and counts the bytes it sends until it closes: -1 when none came.
int BytesOfOneConnection(int listener, milliseconds wait) {
  pollfd waiting{listener, POLLIN, 0};
  if (poll(&waiting, 1, static_cast<int>(wait.count())) != 1) return -1;
  UniqueFd connection(accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
  if (!connection.valid()) return -1;
  int total = 0;
  char buffer[4096];
  pollfd readable{connection.get(), POLLIN, 0};
  while (poll(&readable, 1, static_cast<int>(kTimeout.count())) == 1) {
    const ssize_t got = recv(connection.get(), buffer, sizeof buffer, 0);
    if (got <= 0) break;
    total += static_cast<int>(got);
  }
  return total;
}

// An agent of this user that says whatever the test wants: it challenges, reads the hello, answers with the welcome
// `answer` makes from (challenge nonce, hello), then counts what the rank sends after the hello.
class FakeAgent {
 public:
  using Answer = std::function<Welcome(const std::string&, const Hello&)>;

  FakeAgent(const std::string& dir, const std::string& job, Answer answer)
      : listener_(AgentListener::Open(dir, SocketName(job, kNode))) {
    EXPECT_TRUE(listener_.ok()) << listener_.status().message();
    if (listener_.ok()) thread_ = std::thread([this, answer] { Serve(answer); });
  }
  ~FakeAgent() {
    if (thread_.joinable()) thread_.join();
  }
  // Once the rank gave up: the bytes it sent after its hello.
  int BytesAfterHello() {
    if (thread_.joinable()) thread_.join();
    return bytes_after_hello_;
  }

 private:
  void Serve(const Answer& answer) {
    pollfd waiting{listener_->fd(), POLLIN, 0};
    if (poll(&waiting, 1, static_cast<int>(kTimeout.count())) != 1) return;
    UniqueFd fd(accept4(listener_->fd(), nullptr, nullptr, SOCK_CLOEXEC));
    const std::string nonce(32, 'c');
    if (!SendMessage(fd.get(), EncodeChallenge({kProtocolVersion, nonce})).ok()) return;
    Result<std::string> hello_bytes = ReceiveMessage(fd.get(), kTimeout);
    if (!hello_bytes.ok()) return;
    Result<Hello> hello = DecodeHello(*hello_bytes);
    if (!hello.ok()) return;
    const Reply reply{Code::kOk, "", EncodeWelcome(answer(nonce, *hello))};
    if (!SendMessage(fd.get(), EncodeReply(reply)).ok()) return;
    bytes_after_hello_ = 0;
    while (true) {
      Result<std::string> more = ReceiveMessage(fd.get(), kTimeout);
      if (!more.ok()) break;
      bytes_after_hello_ += static_cast<int>(more->size());
    }
  }

  Result<AgentListener> listener_;
  std::thread thread_;
  int bytes_after_hello_ = -1;
};

class AgentImpostorTest : public testing::TempDirTest {
 protected:
  AgentImpostorTest() : TempDirTest("/dev/shm") {}

  void SetUp() override {
    sockets_ = Path("sockets");
    shm_ = Path("shm");
    ASSERT_EQ(mkdir(shm_.c_str(), 0700), 0);
    static std::atomic<int> counter{0};
    job_ = "impostor-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  }

  AgentEndpoint Endpoint(const std::string& secret = "") const { return {sockets_, job_, kNode, shm_, secret}; }
  Result<AgentConnection> Connect(const std::string& secret = "") const {
    return AgentConnection::Open(Endpoint(secret), 0, kTimeout);
  }
  // A memory directory the real agent would make: beneath the root, this user's, mode 0700.
  std::string GoodMemoryDirectory() const {
    const std::string dir = shm_ + "/ckpt-good";
    EXPECT_TRUE(MakePrivateDirectory(dir, "test").ok());
    return dir;
  }
  // Connects to a fake agent that names `memory_dir`, without a proof; expects the refusal to name `reason`, and
  // that nothing followed the hello.
  void ExpectMemoryDirectoryRefused(const std::string& memory_dir, const std::string& reason) {
    FakeAgent fake(sockets_, job_, [&](const std::string&, const Hello&) { return Welcome{memory_dir, 1 << 20}; });
    Result<AgentConnection> rank = Connect();
    ASSERT_FALSE(rank.ok()) << memory_dir;
    EXPECT_EQ(rank.status().code(), Code::kInvalidArgument);
    EXPECT_TRUE(Contains(rank.status().message(), reason)) << rank.status().message();
    EXPECT_TRUE(Contains(rank.status().message(), memory_dir)) << rank.status().message();
    EXPECT_EQ(fake.BytesAfterHello(), 0);
  }

  std::string sockets_, shm_, job_;
};

TEST_F(AgentImpostorTest, ARankRefusesAListenerOfAnotherUserAndSendsItNothing) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become another user (uid 65534)";
  ASSERT_TRUE(MakePrivateDirectory(sockets_, "test").ok());
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  const pid_t impostor = fork();
  if (impostor == 0) {
    // Bound where the agent listens, then another user's: the kernel records the listener's credentials at listen().
    UniqueFd fd = BoundSocket(sockets_ + "/" + SocketName(job_, kNode));
    if (!fd.valid() || !BecomeNobody() || listen(fd.get(), 8) != 0) _exit(2);
    const char ready = 'r';
    (void)!write(report[1], &ready, 1);
    const int bytes = BytesOfOneConnection(fd.get(), kTimeout);
    (void)!write(report[1], &bytes, sizeof bytes);
    _exit(0);
  }
  close(report[1]);
  char ready = 0;
  ASSERT_EQ(read(report[0], &ready, 1), 1);
  Result<AgentConnection> rank = Connect(kSecret);
  ASSERT_FALSE(rank.ok());
  EXPECT_EQ(rank.status().code(), Code::kMismatch);
  for (const std::string& part : {std::string("uid 65534"), "pid " + std::to_string(impostor), sockets_,
                                  std::string("posing as the job's ckpt-agent")}) {
    EXPECT_TRUE(Contains(rank.status().message(), part)) << rank.status().message();
  }
  int bytes = -2;
  ASSERT_EQ(read(report[0], &bytes, sizeof bytes), static_cast<ssize_t>(sizeof bytes));
  close(report[0]);
  waitpid(impostor, nullptr, 0);
  EXPECT_EQ(bytes, 0) << "the impostor was connected to, and must have received no byte";
}

TEST_F(AgentImpostorTest, ARankAndAnAgentRefuseASocketDirectoryAnotherUserMadeFirst) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become another user (uid 65534)";
  // A parent everyone may write, as /tmp is: the stranger makes the directory, and listens in it, first.
  ASSERT_EQ(chmod(dir().c_str(), 0711), 0);
  const std::string open_to_all = Path("public");
  ASSERT_EQ(mkdir(open_to_all.c_str(), 0700), 0);
  ASSERT_EQ(chmod(open_to_all.c_str(), 01777), 0);
  sockets_ = open_to_all + "/sockets";
  int report[2], done[2];
  ASSERT_EQ(pipe(report), 0);
  ASSERT_EQ(pipe(done), 0);
  const pid_t impostor = fork();
  if (impostor == 0) {
    if (!BecomeNobody() || mkdir(sockets_.c_str(), 0700) != 0) _exit(2);
    UniqueFd fd = BoundSocket(sockets_ + "/" + SocketName(job_, kNode));
    if (!fd.valid() || listen(fd.get(), 8) != 0) _exit(3);
    const char ready = 'r';
    (void)!write(report[1], &ready, 1);
    char finished;
    (void)!read(done[0], &finished, 1);
    const int bytes = BytesOfOneConnection(fd.get(), milliseconds(0));
    (void)!write(report[1], &bytes, sizeof bytes);
    _exit(0);
  }
  close(report[1]);
  close(done[0]);
  char ready = 0;
  ASSERT_EQ(read(report[0], &ready, 1), 1);
  Result<AgentConnection> rank = Connect();
  ASSERT_FALSE(rank.ok());
  EXPECT_EQ(rank.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(Contains(rank.status().message(), Quoted(sockets_) + " belongs to uid 65534")) << rank.status().message();
  Result<AgentListener> agent = AgentListener::Open(sockets_, SocketName(job_, kNode));
  EXPECT_EQ(agent.status().code(), Code::kInvalidArgument) << "an agent must not listen there either";
  EXPECT_TRUE(Contains(agent.status().message(), "belongs to uid 65534")) << agent.status().message();
  (void)!write(done[1], "d", 1);
  close(done[1]);
  int bytes = -2;
  ASSERT_EQ(read(report[0], &bytes, sizeof bytes), static_cast<ssize_t>(sizeof bytes));
  close(report[0]);
  waitpid(impostor, nullptr, 0);
  EXPECT_EQ(bytes, -1) << "nobody may even connect to the impostor";
}

TEST_F(AgentImpostorTest, ARankWithTheSecretRefusesAnAgentOfItsUserThatCannotProveIt) {
  const std::string memory_dir = GoodMemoryDirectory();
  for (const std::string& proving : {std::string(), std::string("fedcba9876543210fedcba9876543210")}) {
    FakeAgent fake(sockets_, job_, [&](const std::string& nonce, const Hello& hello) {
      Welcome welcome{memory_dir, 1 << 20};
      if (!proving.empty()) welcome.proof = WelcomeProof(proving, nonce, hello.nonce, welcome);
      return welcome;
    });
    Result<AgentConnection> rank = Connect(kSecret);
    ASSERT_FALSE(rank.ok());
    EXPECT_EQ(rank.status().code(), Code::kMismatch);
    EXPECT_TRUE(Contains(rank.status().message(), "cannot prove the job's CKPT_AGENT_SECRET"))
        << rank.status().message();
    EXPECT_EQ(fake.BytesAfterHello(), 0) << (proving.empty() ? "no proof" : "a proof with another secret");
  }
}

TEST_F(AgentImpostorTest, AProofOverAnotherMemoryDirectoryIsRefused) {
  const std::string memory_dir = GoodMemoryDirectory();
  // What a relay of the real agent's answer could send: its proof, with another directory in the welcome.
  FakeAgent fake(sockets_, job_, [&](const std::string& nonce, const Hello& hello) {
    Welcome proven{shm_ + "/ckpt-real", 1 << 20};
    Welcome sent{memory_dir, 1 << 20};
    sent.proof = WelcomeProof(kSecret, nonce, hello.nonce, proven);
    return sent;
  });
  EXPECT_EQ(Connect(kSecret).status().code(), Code::kMismatch);
  EXPECT_EQ(fake.BytesAfterHello(), 0);
}

TEST_F(AgentImpostorTest, ARankAcceptsAnAgentThatProvesTheSecretAndNamesAPrivateDirectory) {
  const std::string memory_dir = GoodMemoryDirectory();
  FakeAgent fake(sockets_, job_, [&](const std::string& nonce, const Hello& hello) {
    Welcome welcome{memory_dir, 1 << 20};
    welcome.proof = WelcomeProof(kSecret, nonce, hello.nonce, welcome);
    return welcome;
  });
  Result<AgentConnection> rank = Connect(kSecret);
  ASSERT_TRUE(rank.ok()) << rank.status().message();
  EXPECT_EQ(rank->welcome().memory_dir, memory_dir);
}

TEST_F(AgentImpostorTest, AMemoryDirectoryThatIsALinkIsRefused) {
  const std::string target = GoodMemoryDirectory();
  const std::string link = shm_ + "/ckpt-link";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  ExpectMemoryDirectoryRefused(link, "is a link");
}

TEST_F(AgentImpostorTest, AMemoryDirectoryOfAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user (uid 65534)";
  const std::string theirs = shm_ + "/ckpt-theirs";
  ASSERT_EQ(mkdir(theirs.c_str(), 0700), 0);
  ASSERT_EQ(chown(theirs.c_str(), kNobody, kNobody), 0);
  ExpectMemoryDirectoryRefused(theirs, "belongs to uid 65534");
}

TEST_F(AgentImpostorTest, AMemoryDirectoryOpenToOthersIsRefused) {
  const std::string open_dir = shm_ + "/ckpt-open";
  ASSERT_EQ(mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(chmod(open_dir.c_str(), 0755), 0);
  ExpectMemoryDirectoryRefused(open_dir, "has mode 0755");
}

TEST_F(AgentImpostorTest, AMemoryDirectoryOutsideTheMemoryRootIsRefused) {
  const std::string elsewhere = Path("elsewhere");
  ASSERT_TRUE(MakePrivateDirectory(elsewhere, "test").ok());
  ExpectMemoryDirectoryRefused(elsewhere, "is not directly beneath");
  ExpectMemoryDirectoryRefused(shm_ + "/../elsewhere", "is not directly beneath");
  ExpectMemoryDirectoryRefused(shm_, "is not directly beneath");
}

}  // namespace
}  // namespace ckpt::coll::agent

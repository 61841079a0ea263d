// The TCP store admits only connections that prove they know the job's secret, proves itself to its clients, and
// bounds what strangers and non-reading clients can make it hold.
// ctest-labels: threaded
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "collectives/store/job_secret.h"
#include "collectives/store/private_directory.h"
#include "collectives/store/store_auth.h"
#include "collectives/store/store_handshake.h"
#include "collectives/store/tcp_store.h"
#include "collectives/store/tcp_store_wire.h"
#include "common/bytes.h"
#include "tests/unit/collectives/free_port.h"

namespace ckpt::coll {
namespace {

using ckpt::testing::PickFreePort;

using std::chrono::milliseconds;
using store_wire::MessageType;

constexpr char kSecret[] = "the-real-jobs-secret-0123456789";

TcpStoreConfig ConfigFor(int rank, int world_size, int port, std::string secret = kSecret,
                         milliseconds timeout = milliseconds(5000)) {
  TcpStoreConfig config;
  config.rank = rank;
  config.world_size = world_size;
  config.port = port;
  config.timeout = timeout;
  config.secret = std::move(secret);
  return config;
}

bool Contains(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

// A raw connection to the store on `port`, retried while rank 0 (on another thread) is still starting it.
int ConnectRaw(int port) {
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int attempt = 0; attempt < 500; ++attempt) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) return fd;
    close(fd);
    std::this_thread::sleep_for(milliseconds(10));
  }
  ADD_FAILURE() << "cannot connect to port " << port;
  return -1;
}

// One whole frame from `fd` (blocking): its type and payload; type 0 if the connection closed first.
std::pair<uint32_t, std::string> ReadFrame(int fd) {
  char header[store_wire::kHeaderBytes];
  if (recv(fd, header, sizeof header, MSG_WAITALL) != static_cast<ssize_t>(sizeof header)) return {0, ""};
  const store_wire::FrameHeader decoded = store_wire::DecodeHeader(std::string_view(header, sizeof header));
  std::string payload(decoded.length, '\0');
  if (decoded.length > 0 &&
      recv(fd, payload.data(), payload.size(), MSG_WAITALL) != static_cast<ssize_t>(payload.size())) {
    return {0, ""};
  }
  return {decoded.type, payload};
}

void SendFrame(int fd, MessageType type, const std::string& payload) {
  const std::string frame = store_wire::EncodeFrame(type, payload);
  ASSERT_EQ(send(fd, frame.data(), frame.size(), MSG_NOSIGNAL), static_cast<ssize_t>(frame.size()));
}

std::string NonceOfChallenge(const std::string& challenge) {
  ByteReader reader(challenge, "challenge");
  uint32_t magic = 0, version = 0;
  std::string nonce;
  EXPECT_TRUE(reader.U32(&magic).ok());
  EXPECT_TRUE(reader.U32(&version).ok());
  EXPECT_TRUE(reader.Bytes(&nonce).ok());
  return nonce;
}

// A hello as a client knowing `secret` writes it, answering `server_nonce`.
std::string Hello(const std::string& secret, const std::string& server_nonce, int rank, int world_size,
                  bool auxiliary) {
  store_handshake::Hello hello;
  hello.rank = rank;
  hello.world_size = world_size;
  hello.timeout_ms = 5000;
  hello.auxiliary = auxiliary;
  hello.client_nonce = std::string(store_auth::kNonceBytes, 'n');
  return store_handshake::EncodeHello(hello, secret, server_nonce);
}

// An authenticated auxiliary connection for `rank`, speaking the protocol by hand.
int RawAuxiliary(int port, int rank, int world_size) {
  const int fd = ConnectRaw(port);
  const auto [type, challenge] = ReadFrame(fd);
  EXPECT_EQ(type, static_cast<uint32_t>(MessageType::kChallenge));
  SendFrame(fd, MessageType::kHello, Hello(kSecret, NonceOfChallenge(challenge), rank, world_size, true));
  EXPECT_EQ(ReadFrame(fd).first, static_cast<uint32_t>(MessageType::kOk));
  return fd;
}

TEST(StoreAuthTest, AClientWithoutTheSecretCannotTakeARanksSlot) {
  const int port = PickFreePort();
  std::thread rank0([port] {
    Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(0, 2, port));
    ASSERT_TRUE(store.ok()) << store.status().message();
    EXPECT_TRUE((*store)->Barrier().ok());
  });
  Result<std::unique_ptr<TcpStore>> impostor = TcpStore::Connect(ConfigFor(1, 2, port, "a-guess-at-the-secret-000000"));
  EXPECT_EQ(impostor.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(Contains(impostor.status(), "does not know the job's secret")) << impostor.status().message();
  {
    Result<std::unique_ptr<TcpStore>> rank1 = TcpStore::Connect(ConfigFor(1, 2, port));
    EXPECT_TRUE(rank1.ok()) << rank1.status().message();
    if (rank1.ok()) EXPECT_TRUE((*rank1)->Barrier().ok());
  }  // rank 1 says goodbye before rank 0's store stops waiting for it
  rank0.join();
}

TEST(StoreAuthTest, AHelloWithoutAProofIsRefusedAndTheConnectionClosed) {
  const int port = PickFreePort();
  std::thread rank0([port] {
    Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(0, 2, port));
    ASSERT_TRUE(store.ok()) << store.status().message();
    EXPECT_TRUE((*store)->Barrier().ok());
  });
  // What any local process could send before: the hello of protocol version 1, with no proof at all.
  const int fd = ConnectRaw(port);
  ASSERT_EQ(ReadFrame(fd).first, static_cast<uint32_t>(MessageType::kChallenge));
  ByteWriter old_hello;
  old_hello.U32(store_wire::kMagic);
  old_hello.U32(store_wire::kVersion);
  old_hello.I32(1);
  old_hello.I32(2);
  old_hello.U64(5000);
  old_hello.U8(0);
  SendFrame(fd, MessageType::kHello, old_hello.data());
  EXPECT_EQ(ReadFrame(fd).first, static_cast<uint32_t>(MessageType::kError));
  EXPECT_EQ(ReadFrame(fd).first, 0u) << "the store kept talking to a client that proved nothing";
  close(fd);
  {
    Result<std::unique_ptr<TcpStore>> rank1 = TcpStore::Connect(ConfigFor(1, 2, port));
    EXPECT_TRUE(rank1.ok()) << rank1.status().message();
    if (rank1.ok()) EXPECT_TRUE((*rank1)->Barrier().ok());
  }  // rank 1 says goodbye before rank 0's store stops waiting for it
  rank0.join();
}

TEST(StoreAuthTest, AnAuxiliaryConnectionWithoutTheSecretCannotReadKeys) {
  const int port = PickFreePort();
  Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(0, 1, port));
  ASSERT_TRUE(store.ok()) << store.status().message();
  ASSERT_TRUE((*store)->Set("commit/outcome", "ok").ok());
  // A local process that guesses: it speaks the protocol, claims to be rank 0's second connection, and asks.
  const int fd = ConnectRaw(port);
  const auto [type, challenge] = ReadFrame(fd);
  ASSERT_EQ(type, static_cast<uint32_t>(MessageType::kChallenge));
  SendFrame(fd, MessageType::kHello, Hello("a-guess-at-the-secret-000000", NonceOfChallenge(challenge), 0, 1, true));
  ByteWriter get;
  get.Bytes("commit/outcome");
  SendFrame(fd, MessageType::kGet, get.data());
  const auto [reply, message] = ReadFrame(fd);
  EXPECT_EQ(reply, static_cast<uint32_t>(MessageType::kError));
  EXPECT_NE(message.find("does not know the job's secret"), std::string::npos) << message;
  EXPECT_EQ(ReadFrame(fd).first, 0u) << "the store answered a client that proved nothing";
  close(fd);
}

TEST(StoreAuthTest, AClientRefusesAServerThatCannotProveItKnowsTheSecret) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  socklen_t length = sizeof address;
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  // A squatter on the store's port: it speaks the protocol but does not know the secret, and welcomes anyone.
  std::thread squatter([listener] {
    const int fd = accept(listener, nullptr, nullptr);
    ByteWriter challenge;
    challenge.U32(store_wire::kMagic);
    challenge.U32(store_wire::kVersion);
    challenge.Bytes(std::string(store_auth::kNonceBytes, 's'));
    SendFrame(fd, MessageType::kChallenge, challenge.data());
    ReadFrame(fd);
    ByteWriter welcome;
    welcome.Bytes(std::string(store_auth::kProofBytes, 'p'));
    SendFrame(fd, MessageType::kOk, welcome.data());
    ReadFrame(fd);  // until the client hangs up
    close(fd);
  });
  Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(1, 2, ntohs(address.sin_port)));
  EXPECT_EQ(store.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(Contains(store.status(), "not this job's store")) << store.status().message();
  squatter.join();
  close(listener);
}

TEST(StoreAuthTest, RanksOnRankZerosNodeShareASecretPublishedForTheirUserOnly) {
  const int port = PickFreePort();
  std::vector<std::thread> ranks;
  std::atomic<int> connected{0};
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([r, port, &connected] {
      Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(r, 3, port, ""));
      ASSERT_TRUE(store.ok()) << "rank " << r << ": " << store.status().message();
      ++connected;
      Result<std::string> secret = ReadPublishedSecret(port);
      ASSERT_TRUE(secret.ok()) << secret.status().message();
      EXPECT_EQ((*store)->AuxiliaryConfig().secret, *secret);
      EXPECT_TRUE((*store)->Barrier().ok());
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(connected.load(), 3);
  // Removed with the store: nothing of the job is left behind.
  EXPECT_EQ(ReadPublishedSecret(port).status().code(), Code::kNotFound);
}

TEST(StoreAuthTest, APublishedSecretIsReadableByItsOwnerOnly) {
  const int port = PickFreePort();
  Result<PublishedSecret> published = PublishedSecret::Publish(port);
  ASSERT_TRUE(published.ok()) << published.status().message();
  const std::string dir = UserPrivateDirectory();
  struct stat st = {};
  ASSERT_EQ(stat((dir + "/store-" + std::to_string(port) + ".secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(StoreAuthTest, ARankOnAnotherNodeWithoutTheSecretIsToldToSetIt) {
  // No store and no published secret on this port: what a rank on another node than rank 0's finds.
  const int port = PickFreePort();
  Result<std::string> secret = ReadPublishedSecret(port);
  EXPECT_EQ(secret.status().code(), Code::kNotFound);
  EXPECT_TRUE(Contains(secret.status(), "CKPT_JOB_SECRET")) << secret.status().message();
}

TEST(StoreAuthTest, ATooShortSecretIsRefused) {
  Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(0, 1, PickFreePort(), "short"));
  EXPECT_EQ(store.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(Contains(store.status(), "at least 16")) << store.status().message();
}

size_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

TEST(StoreAuthTest, AClientThatDoesNotReadItsRepliesCannotMakeTheServerQueueThem) {
  const int port = PickFreePort();
  Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(0, 1, port));
  ASSERT_TRUE(store.ok()) << store.status().message();
  constexpr size_t kValueBytes = 256 * 1024;
  ASSERT_TRUE((*store)->Set("big", std::string(kValueBytes, 'v')).ok());
  const int fd = RawAuxiliary(port, 0, 1);
  ByteWriter get;
  get.Bytes("big");
  const std::string frame = store_wire::EncodeFrame(MessageType::kGet, get.data());
  std::string burst;
  constexpr int kRequests = 2000;  // 500 MiB of replies if the server queued them all
  for (int i = 0; i < kRequests; ++i) burst += frame;
  const size_t before = ResidentBytes();
  // Sent without reading a single reply; the server may stop reading, so the send must not block the test.
  size_t sent = 0;
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(2000);
  while (sent < burst.size() && std::chrono::steady_clock::now() < deadline) {
    const ssize_t n = send(fd, burst.data() + sent, burst.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) sent += static_cast<size_t>(n);
    if (n < 0) std::this_thread::sleep_for(milliseconds(10));
  }
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_LT(ResidentBytes(), before + 64 * 1024 * 1024) << "the server queued the replies nobody reads";
  // The connection still works in order once its client reads.
  ASSERT_EQ(ReadFrame(fd).first, static_cast<uint32_t>(MessageType::kOk));
  close(fd);
  EXPECT_TRUE((*store)->Barrier().ok());
}

}  // namespace
}  // namespace ckpt::coll

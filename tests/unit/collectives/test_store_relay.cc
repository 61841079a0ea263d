// ctest-labels: threaded
// The TCP store's relays (collectives/store/store_relay.h): in a job rank 0 lays out in rows, every other rank
// reaches the store through its row's relay; every request and collective works as if it had connected directly,
// rank 0 serves one link per row, deaths are found through the relays, and relays refuse what is not theirs.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collectives/store/store_auth.h"
#include "collectives/store/store_handshake.h"
#include "collectives/store/store_relay.h"
#include "collectives/store/tcp_store.h"
#include "collectives/store/tcp_store_server.h"
#include "collectives/store/tcp_store_wire.h"
#include "common/bytes.h"
#include "tests/unit/collectives/free_port.h"

namespace ckpt::coll {
namespace {

using ckpt::testing::PickFreePort;
using std::chrono::milliseconds;
using store_wire::MessageType;

constexpr char kSecret[] = "secret-of-the-relay-tests";

TcpStoreConfig ConfigFor(int rank, int world_size, int port, int columns) {
  TcpStoreConfig config;
  config.rank = rank;
  config.world_size = world_size;
  config.port = port;
  config.timeout = milliseconds(5000);
  config.secret = kSecret;
  if (rank == 0) config.relay_columns = columns;
  return config;
}

// Ranks first..world_size-1 of a job in rows of `columns`, each on a thread with its own store connection.
void RunRanks(int first, int world_size, int port, int columns, const std::function<void(TcpStore&)>& body) {
  std::vector<std::thread> threads;
  for (int r = first; r < world_size; ++r) {
    threads.emplace_back([=, &body] {
      Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(r, world_size, port, columns));
      ASSERT_TRUE(store.ok()) << "rank " << r << ": " << store.status().message();
      body(**store);
    });
  }
  for (auto& t : threads) t.join();
}

// The established TCP connections whose local end is `port` on loopback: a server's ends of its clients' connections.
int ServerEndsOn(int port) {
  int count = 0;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      const int local_port = std::stoi(local.substr(local.find(':') + 1), nullptr, 16);
      if (local_port == port && state == "01") ++count;
    }
  }
  return count;
}

bool Contains(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

TEST(StoreRelayTest, EveryRequestAndCollectiveWorksThroughTheRelaysAndRankZeroServesOneLinkPerRow) {
  constexpr int kWorld = 9, kColumns = 3;
  const int port = PickFreePort();
  RunRanks(0, kWorld, port, kColumns, [&](TcpStore& store) {
    const int rank = store.rank();
    EXPECT_EQ(store.relay_columns(), kColumns) << "rank " << rank;
    Result<std::vector<std::string>> gathered = store.AllGather("rank " + std::to_string(rank));
    ASSERT_TRUE(gathered.ok()) << gathered.status().message();
    for (int r = 0; r < kWorld; ++r) EXPECT_EQ((*gathered)[r], "rank " + std::to_string(r));
    // Rank 0 holds its own connection's server end and one link from each row's relay (ranks 2, 3 and 6): 4, where
    // 9 ranks connected directly would make 9.
    if (rank == 0) EXPECT_EQ(ServerEndsOn(port), 1 + kWorld / kColumns);
    ASSERT_TRUE(store.Barrier().ok());

    std::vector<std::string> outgoing(kWorld);
    outgoing[(rank + 1) % kWorld] = std::to_string(rank) + ">" + std::string(rank == 4 ? 2 << 20 : 1, 'm');
    Result<std::vector<std::string>> incoming = store.AllToAllV(outgoing, milliseconds(5000));
    ASSERT_TRUE(incoming.ok()) << incoming.status().message();
    const int from = (rank + kWorld - 1) % kWorld;
    EXPECT_EQ((*incoming)[from], std::to_string(from) + ">" + std::string(from == 4 ? 2 << 20 : 1, 'm'));

    Result<std::string> broadcast = store.Broadcast(rank == 0 ? "from rank 0" : "", milliseconds(5000));
    ASSERT_TRUE(broadcast.ok()) << broadcast.status().message();
    EXPECT_EQ(*broadcast, "from rank 0");

    ASSERT_TRUE(store.Set("key " + std::to_string(rank), std::to_string(rank * rank)).ok());
    Result<std::string> waited = store.Wait("key " + std::to_string((rank + 1) % kWorld));
    ASSERT_TRUE(waited.ok()) << waited.status().message();
    EXPECT_EQ(*waited, std::to_string((rank + 1) % kWorld * ((rank + 1) % kWorld)));
    EXPECT_TRUE(store.CheckPeers().ok());
    // A relay answers the death-check key itself, never asking rank 0: a value set under it at rank 0 is seen only by
    // rank 0, which asks its own store.
    if (rank == 0) ASSERT_TRUE(store.Set(store_wire::kPeersAliveKey, "set at rank 0").ok());
    ASSERT_TRUE(store.Barrier().ok());
    Result<std::optional<std::string>> alive = store.Get(store_wire::kPeersAliveKey);
    ASSERT_TRUE(alive.ok()) << alive.status().message();
    EXPECT_EQ(alive->has_value(), rank == 0) << "rank " << rank;

    // An auxiliary connection goes through the same relay.
    Result<std::unique_ptr<TcpStore>> auxiliary = TcpStore::Connect(store.AuxiliaryConfig());
    ASSERT_TRUE(auxiliary.ok()) << auxiliary.status().message();
    Result<std::optional<std::string>> got = (*auxiliary)->Get("key " + std::to_string(rank));
    ASSERT_TRUE(got.ok() && got->has_value()) << got.status().message();
    EXPECT_EQ(**got, std::to_string(rank * rank));
    ASSERT_TRUE(store.Barrier().ok());
  });
}

// A job of 4 ranks in rows of 2 ({0, 1} relayed by rank 1, {2, 3} by rank 2) whose rank `crasher` exits without a
// goodbye once every rank has connected, relay thread and all, as a crash would; `check` runs on each other rank,
// after its barrier, which the crash fails.
void CrashOneOfFourRanks(int crasher, const std::function<void(TcpStore&, const Status& barrier)>& check) {
  constexpr int kWorld = 4, kColumns = 2;
  const int port = PickFreePort();
  const pid_t child = fork();  // before any thread exists in this process
  if (child == 0) {
    Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(crasher, kWorld, port, kColumns));
    if (store.ok()) (void)(*store)->Wait("crash");
    _exit(0);
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    if (r == crasher) continue;
    threads.emplace_back([&, r] {
      Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(r, kWorld, port, kColumns));
      ASSERT_TRUE(store.ok()) << store.status().message();
      if (r == 0) ASSERT_TRUE((*store)->Set("crash", "").ok());
      const Status barrier = (*store)->Barrier();
      EXPECT_EQ(barrier.code(), Code::kPeerFailed) << "rank " << r << ": " << barrier.message();
      check(**store, barrier);
    });
  }
  for (auto& t : threads) t.join();
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
}

TEST(StoreRelayTest, ARankLostWithoutAGoodbyeIsFoundByEveryRankAndByItsRowMatesDeathChecks) {
  // Rank 3, in the row relayed by rank 2.
  CrashOneOfFourRanks(3, [](TcpStore& store, const Status& barrier) {
    EXPECT_TRUE(Contains(barrier, "rank 3 disconnected")) << barrier.message();
    // Its relay's row mate and the other row's ranks hear of it from their relays.
    const Status check = store.CheckPeers();
    EXPECT_TRUE(Contains(check, "rank 3 disconnected")) << "rank " << store.rank() << ": " << check.message();
  });
}

TEST(StoreRelayTest, ARelayLostTakesItsRowWithItNamingTheRelayFirst) {
  // Rank 2, the relay of row {2, 3}, taking the relay with it.
  CrashOneOfFourRanks(2, [](TcpStore& store, const Status& barrier) {
    const std::string expected =
        store.rank() == 3 ? "lost connection to the store relay on rank 2" : "rank 2 disconnected";
    EXPECT_TRUE(Contains(barrier, expected)) << "rank " << store.rank() << ": " << barrier.message();
    if (store.rank() == 3) return;
    // A request made once both are lost still names the relay first, then every rank lost.
    const Status later = store.Get("crash").status();
    EXPECT_TRUE(Contains(later, "rank 2 disconnected; lost in all: ranks 2, 3"))
        << "rank " << store.rank() << ": " << later.message();
  });
}

// What a client reads after sending `hello` (signed with the secret) to the server at `port`, with the nonces.
struct Reply {
  uint32_t type = 0;
  std::string payload;
  std::string server_nonce;
  std::string client_nonce;
};

Reply HelloReply(const std::string& host, int port, store_handshake::Hello hello) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &address.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  char header[store_wire::kHeaderBytes];
  EXPECT_EQ(recv(fd, header, sizeof header, MSG_WAITALL), static_cast<ssize_t>(sizeof header));
  std::string challenge(store_wire::DecodeHeader(std::string_view(header, sizeof header)).length, '\0');
  EXPECT_EQ(recv(fd, challenge.data(), challenge.size(), MSG_WAITALL), static_cast<ssize_t>(challenge.size()));
  const std::string nonce = store_handshake::DecodeChallenge(challenge, "the test's server").value();
  hello.client_nonce = std::string(store_auth::kNonceBytes, 'n');
  const std::string frame =
      store_wire::EncodeFrame(MessageType::kHello, store_handshake::EncodeHello(hello, kSecret, nonce));
  EXPECT_EQ(send(fd, frame.data(), frame.size(), MSG_NOSIGNAL), static_cast<ssize_t>(frame.size()));
  EXPECT_EQ(recv(fd, header, sizeof header, MSG_WAITALL), static_cast<ssize_t>(sizeof header));
  const store_wire::FrameHeader reply = store_wire::DecodeHeader(std::string_view(header, sizeof header));
  std::string payload(reply.length, '\0');
  EXPECT_EQ(recv(fd, payload.data(), payload.size(), MSG_WAITALL), static_cast<ssize_t>(payload.size()));
  close(fd);
  return {reply.type, payload, nonce, hello.client_nonce};
}

TEST(StoreRelayTest, RankZeroSendsEachRankToItsRowsRelayAndRelaysRefuseWhatIsNotTheirs) {
  constexpr int kWorld = 6, kColumns = 3;  // rows {0, 1, 2} and {3, 4, 5}: relays on ranks 2 and 3
  Result<std::unique_ptr<StoreServer>> server = StoreServer::Start(
      "127.0.0.1", 0, kWorld, kColumns, [](int) -> Result<std::string> { return std::string(kSecret); });
  ASSERT_TRUE(server.ok()) << server.status().message();
  const int port = (*server)->port();
  StoreRelayConfig config;
  config.rank = 3;
  config.world_size = kWorld;
  config.columns = kColumns;
  config.store_host = "127.0.0.1";
  config.store_port = port;
  config.secret = kSecret;
  config.timeout = milliseconds(5000);
  Result<std::unique_ptr<StoreRelay>> relay = StoreRelay::Start(config);
  ASSERT_TRUE(relay.ok()) << relay.status().message();

  // A second relay for the same row, and one on a rank that does not relay its row.
  EXPECT_TRUE(Contains(StoreRelay::Start(config).status(), "does not expect or already has"));
  config.rank = 4;
  EXPECT_TRUE(Contains(StoreRelay::Start(config).status(), "does not expect or already has"));

  store_handshake::Hello hello;
  hello.world_size = kWorld;
  hello.timeout_ms = 1000;
  // Rank 4 is sent to its row's relay, signed with the job's secret.
  hello.rank = 4;
  const Reply sent = HelloReply("127.0.0.1", port, hello);
  ASSERT_EQ(sent.type, static_cast<uint32_t>(MessageType::kRedirect));
  Result<store_handshake::Redirect> redirect =
      store_handshake::DecodeRedirect(sent.payload, kSecret, sent.server_nonce, sent.client_nonce, "rank 0");
  ASSERT_TRUE(redirect.ok()) << redirect.status().message();
  EXPECT_EQ(redirect->columns, static_cast<uint32_t>(kColumns));
  EXPECT_EQ(redirect->host, (*relay)->host());
  EXPECT_EQ(redirect->port, (*relay)->port());
  // Rank 2 is told to start its row's relay (no address); rank 1 is turned away until that relay has connected.
  hello.rank = 2;
  const Reply start = HelloReply("127.0.0.1", port, hello);
  ASSERT_EQ(start.type, static_cast<uint32_t>(MessageType::kRedirect));
  EXPECT_EQ(
      store_handshake::DecodeRedirect(start.payload, kSecret, start.server_nonce, start.client_nonce, "rank 0")->host,
      "");
  hello.rank = 1;
  EXPECT_EQ(HelloReply("127.0.0.1", port, hello).type, static_cast<uint32_t>(MessageType::kBusy));

  // Rank 1 belongs to row {0, 1, 2}: the relay of row {3, 4, 5} refuses it, though it knows the secret.
  const Reply refused = HelloReply((*relay)->host(), (*relay)->port(), hello);
  EXPECT_EQ(refused.type, static_cast<uint32_t>(MessageType::kError));
  EXPECT_TRUE(Contains(store_wire::DecodeError(refused.payload), "is not of the row the store relay on rank 3 serves"));
  (*relay)->Stop(milliseconds(0));
}

TEST(StoreRelayTest, EachRowsRelayIsItsFirstRankAndRowZerosIsItsLast) {
  // 10 ranks in rows of 4: {0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}.
  const std::vector<int> relays = {-1, 3, 3, 3, 4, 4, 4, 4, 8, 8};
  for (int rank = 0; rank < 10; ++rank) EXPECT_EQ(StoreRelayOf(rank, 10, 4), relays[rank]) << "rank " << rank;
  EXPECT_EQ(StoreRelayMembers(3, 10, 4), 3);  // ranks 1, 2 and 3
  EXPECT_EQ(StoreRelayMembers(4, 10, 4), 4);
  EXPECT_EQ(StoreRelayMembers(8, 10, 4), 2);
  EXPECT_EQ(StoreRelayOf(5, 10, 0), -1);
  // A row 0 shorter than the rows (a world of 2, or 3 in rows of 4): its last rank.
  EXPECT_EQ(StoreRelayOf(1, 2, 2), 1);
  EXPECT_EQ(StoreRelayOf(1, 3, 4), 2);
}

TEST(StoreRelayTest, RowsOfTheRootOfHalfTheWorldKeepRankZerosLinksAndARelaysConnectionsAlike) {
  EXPECT_EQ(StoreRelayColumns(2), 2);
  EXPECT_EQ(StoreRelayColumns(13), 3);
  EXPECT_EQ(StoreRelayColumns(48), 5);
  EXPECT_EQ(StoreRelayColumns(65536), 182);
  for (const int world : {257, 4096, 16384, 65536, 1 << 20}) {
    const int columns = StoreRelayColumns(world);
    const int rows = (world + columns - 1) / columns;
    // Rank 0 holds a link per row, a relay two connections per member: each about sqrt(2 N), within 2 of the other.
    EXPECT_LE(rows, 2 * columns) << world;
    EXPECT_GE(rows + 2, 2 * (columns - 1)) << world;
  }
}

TEST(StoreRelayTest, ARedirectIsBelievedOnlyWithTheJobsProof) {
  const std::string server_nonce(store_auth::kNonceBytes, 's'), client_nonce(store_auth::kNonceBytes, 'c');
  store_handshake::Redirect redirect;
  redirect.columns = 7;
  redirect.host = "10.0.0.7";
  redirect.port = 4242;
  const std::string payload = store_handshake::EncodeRedirect(redirect, kSecret, server_nonce, client_nonce);
  Result<store_handshake::Redirect> decoded =
      store_handshake::DecodeRedirect(payload, kSecret, server_nonce, client_nonce, "the store");
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(decoded->columns, 7u);
  EXPECT_EQ(decoded->host, "10.0.0.7");
  EXPECT_EQ(decoded->port, 4242);
  EXPECT_EQ(store_handshake::DecodeRedirect(payload, "another-jobs-secret-123", server_nonce, client_nonce, "the store")
                .status()
                .code(),
            Code::kInvalidArgument);
  // The address altered in flight: the proof no longer matches.
  std::string altered = payload;
  altered[altered.size() - 6] ^= 1;
  EXPECT_EQ(store_handshake::DecodeRedirect(altered, kSecret, server_nonce, client_nonce, "the store").status().code(),
            Code::kInvalidArgument);
}

}  // namespace
}  // namespace ckpt::coll

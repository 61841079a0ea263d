// ctest-labels: threaded
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/peer/peer_control_plane.h"
#include "collectives/peer/peer_links.h"
#include "collectives/store/store_auth.h"
#include "collectives/store/store_handshake.h"
#include "collectives/store/store_strangers.h"
#include "collectives/store/tcp_store.h"
#include "collectives/store/tcp_store_wire.h"
#include "common/bytes.h"
#include "tests/unit/collectives/free_port.h"
#include "tests/unit/collectives/stranger_flood.h"

namespace ckpt::coll {
namespace {

using ckpt::testing::PickFreePort;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using store_wire::MessageType;

constexpr char kSecret[] = "secret-of-the-peer-plane-tests";
constexpr uint64_t kMiB = uint64_t{1} << 20;

TcpStoreConfig ConfigFor(int rank, int world_size, int port) {
  TcpStoreConfig config;
  config.rank = rank;
  config.world_size = world_size;
  config.port = port;
  config.timeout = milliseconds(20000);
  config.secret = kSecret;
  return config;
}

struct Rank {
  std::shared_ptr<TcpStore> store;
  std::unique_ptr<PeerControlPlane> plane;
};

Rank Join(int rank, int world_size, int port, int direct_ranks, int peer_budget) {
  Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(rank, world_size, port));
  EXPECT_TRUE(store.ok()) << "rank " << rank << ": " << store.status().message();
  if (!store.ok()) return {};
  std::shared_ptr<TcpStore> shared = std::move(store).value();
  Result<std::unique_ptr<PeerControlPlane>> plane = PeerControlPlane::Open(shared, direct_ranks, peer_budget);
  EXPECT_TRUE(plane.ok()) << "rank " << rank << ": " << plane.status().message();
  if (!plane.ok()) return {};
  return {shared, std::move(plane).value()};
}

// Runs the given ranks of a world, each on its own thread with its own store connection and plane; worlds of more
// than `direct_ranks` ranks route over the grid, of as many dimensions as `peer_budget` asks.
void RunRanks(const std::vector<int>& ranks, int world_size, int port, const std::function<void(Rank&)>& body,
              int direct_ranks = kDefaultDirectRanks, int peer_budget = kGridPeerBudget) {
  std::vector<std::thread> threads;
  for (int r : ranks) {
    threads.emplace_back([=, &body] {
      Rank rank = Join(r, world_size, port, direct_ranks, peer_budget);
      if (rank.plane) body(rank);
    });
  }
  for (auto& t : threads) t.join();
}

void RunAllRanks(int world_size, const std::function<void(Rank&)>& body, int direct_ranks = kDefaultDirectRanks,
                 int peer_budget = kGridPeerBudget) {
  std::vector<int> ranks(world_size);
  for (int r = 0; r < world_size; ++r) ranks[r] = r;
  RunRanks(ranks, world_size, PickFreePort(), body, direct_ranks, peer_budget);
}

// Whether every rank `rank` linked to or took a link from is a neighbour of it in the grid.
void ExpectLinksOnlyToNeighbours(const PeerControlPlane& plane) {
  for (int linked : plane.LinkedRanks()) {
    EXPECT_TRUE(plane.grid().Neighbouring(plane.rank(), linked))
        << "rank " << plane.rank() << " linked with rank " << linked << ", not its neighbour in "
        << plane.grid().Shape();
  }
}

bool Contains(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

// The same sparse pattern on every rank: about a third of the pairs have something to say, of varied sizes.
std::string PatternMessage(int from, int to, int round) {
  const uint32_t hash = static_cast<uint32_t>(from * 7919 + to * 104729 + round * 1299709) * 2654435761u;
  if (hash % 3 != 0) return "";
  const std::string tag = std::to_string(from) + ">" + std::to_string(to) + "@" + std::to_string(round);
  return tag + std::string((hash >> 8) % (64 << 10), static_cast<char>('a' + from));
}

TEST(PeerControlPlaneTest, EachRankReceivesExactlyItsOwnMessages) {
  constexpr int kWorld = 8;
  RunAllRanks(kWorld, [](Rank& rank) {
    const int me = rank.plane->rank();
    for (int round = 0; round < 6; ++round) {
      std::vector<std::string> outgoing(kWorld);
      for (int to = 0; to < kWorld; ++to) outgoing[to] = PatternMessage(me, to, round);
      Result<std::vector<std::string>> incoming = rank.plane->AllToAllV(outgoing, milliseconds(10000));
      ASSERT_TRUE(incoming.ok()) << incoming.status().message();
      ASSERT_EQ(incoming->size(), static_cast<size_t>(kWorld));
      for (int from = 0; from < kWorld; ++from) {
        EXPECT_EQ((*incoming)[from], PatternMessage(from, me, round)) << "rank " << me << " from " << from;
      }
    }
  });
}

// Worlds whose last row is full, one short, and holding a single rank, in grids of two dimensions (4 x 4), three
// (3 x 3 x 3, one short by 7) and four (2 x 2 x 2 x 2): every route shape, every hop.
TEST(PeerControlPlaneTest, AGridAllToAllDeliversEveryMessageAndLinksEachRankOnlyToItsNeighbours) {
  struct Grid {
    int world, peer_budget, dimensions;
  };
  for (const Grid grid :
       {Grid{9, 64, 2}, Grid{11, 64, 2}, Grid{13, 64, 2}, Grid{20, 6, 3}, Grid{27, 6, 3}, Grid{13, 0, 4}}) {
    const int world = grid.world;
    RunAllRanks(
        world,
        [world, grid](Rank& rank) {
          const int me = rank.plane->rank();
          ASSERT_EQ(rank.plane->grid().hops(), grid.dimensions) << rank.plane->grid().Shape();
          for (int round = 0; round < 4; ++round) {
            // Round 0: every pair has something to say; then the sparse pattern.
            const auto message = [round](int from, int to) {
              return round == 0 ? std::to_string(from) + ">" + std::to_string(to) : PatternMessage(from, to, round);
            };
            std::vector<std::string> outgoing(world);
            for (int to = 0; to < world; ++to) outgoing[to] = message(me, to);
            Result<std::vector<std::string>> incoming = rank.plane->AllToAllV(outgoing, milliseconds(10000));
            ASSERT_TRUE(incoming.ok()) << incoming.status().message();
            ASSERT_EQ(incoming->size(), static_cast<size_t>(world));
            for (int from = 0; from < world; ++from) {
              EXPECT_EQ((*incoming)[from], message(from, me))
                  << "world " << world << ", rank " << me << " from " << from << ", round " << round;
            }
          }
          EXPECT_EQ(rank.plane->counters().collectives, 4u);
          ExpectLinksOnlyToNeighbours(*rank.plane);
        },
        /*direct_ranks=*/4, grid.peer_budget);
  }
}

TEST(PeerControlPlaneTest, AGridBroadcastReachesEveryRankAlongOneDimensionAfterAnother) {
  for (const auto& [world, peer_budget] : std::vector<std::pair<int, int>>{{10, 64}, {13, 64}, {13, 0}}) {
    RunAllRanks(
        world,
        [](Rank& rank) {
          for (int round = 0; round < 3; ++round) {
            const std::string sent = "round " + std::to_string(round) + " from the root";
            Result<std::string> received =
                rank.plane->Broadcast(rank.plane->rank() == 0 ? sent : "ignored", milliseconds(10000));
            ASSERT_TRUE(received.ok()) << received.status().message();
            EXPECT_EQ(*received, sent);
          }
          ExpectLinksOnlyToNeighbours(*rank.plane);
        },
        /*direct_ranks=*/4, peer_budget);
  }
}

// The last rank of a world never joins an all-to-all the others give 500 ms: each fails within 1.5 s naming it.
void AllToAllWithoutTheLastRankTimesOutNamingIt(int world, int direct_ranks) {
  RunAllRanks(
      world,
      [world](Rank& rank) {
        const int me = rank.plane->rank();
        if (me == world - 1) {
          std::this_thread::sleep_for(milliseconds(2000));
          return;
        }
        std::vector<std::string> outgoing(world, "to " + std::to_string(me));
        const Clock::time_point start = Clock::now();
        Result<std::vector<std::string>> incoming = rank.plane->AllToAllV(outgoing, milliseconds(500));
        EXPECT_EQ(incoming.status().code(), Code::kTimeout) << incoming.status().message();
        EXPECT_TRUE(Contains(incoming.status(), "rank " + std::to_string(world - 1))) << incoming.status().message();
        EXPECT_LT(Clock::now() - start, milliseconds(1500));
      },
      direct_ranks);
}

// A rank that never joins fails the first hop on every rank, which then must not wait for it in the second.
TEST(PeerControlPlaneTest, AGridAllToAllWithARankThatNeverArrivesTimesOutNamingIt) {
  AllToAllWithoutTheLastRankTimesOutNamingIt(5, /*direct_ranks=*/2);
}

TEST(PeerControlPlaneTest, RankZeroMovesOnlyItsOwnBytes) {
  constexpr int kWorld = 4;
  RunAllRanks(kWorld, [](Rank& rank) {
    const int me = rank.plane->rank();
    std::vector<std::string> outgoing(kWorld);
    for (int to = 1; to < kWorld; ++to) {
      if (me != 0 && to != me) outgoing[to] = std::string(2 * kMiB, static_cast<char>('0' + me));
    }
    Result<std::vector<std::string>> incoming = rank.plane->AllToAllV(outgoing, milliseconds(10000));
    ASSERT_TRUE(incoming.ok()) << incoming.status().message();
    const ControlPlaneCounters counters = rank.plane->counters();
    EXPECT_EQ(counters.collectives, 1u);
    if (me == 0) {
      EXPECT_LT(counters.sent + counters.received, 64u << 10) << "rank 0 moved other ranks' bytes";
    } else {
      EXPECT_GE(counters.sent, 4 * kMiB);
      EXPECT_GE(counters.received, 4 * kMiB);
      // The megabytes went over the links: rank 0's store relayed none of them.
      EXPECT_LT(rank.store->counters().sent + rank.store->counters().received, 64u << 10);
    }
  });
}

TEST(PeerControlPlaneTest, AnAllToAllEndsWithAFewStoreBytesPerRankWhateverTheWorld) {
  constexpr int kWorld = 48;
  RunAllRanks(kWorld, [](Rank& rank) {
    const ControlPlaneCounters before = rank.store->counters();
    std::vector<std::string> outgoing(kWorld);
    outgoing[(rank.plane->rank() + 1) % kWorld] = "next";
    Result<std::vector<std::string>> incoming = rank.plane->AllToAllV(outgoing, milliseconds(10000));
    ASSERT_TRUE(incoming.ok()) << incoming.status().message();
    EXPECT_EQ((*incoming)[(rank.plane->rank() + kWorld - 1) % kWorld], "next");
    // Gathering every rank's outcome instead would send every rank a length per rank: 48 of them.
    const ControlPlaneCounters after = rank.store->counters();
    EXPECT_LT(after.sent - before.sent + after.received - before.received, 96u) << "rank " << rank.plane->rank();
  });
}

TEST(PeerControlPlaneTest, BroadcastReachesEveryRankWithRankZeroSendingLog2Copies) {
  for (const int world : {5, 8}) {
    const std::string message(kMiB, 'b');
    const uint64_t copies = 3;  // ceil(log2 world) for both
    RunAllRanks(world, [&](Rank& rank) {
      const int me = rank.plane->rank();
      for (int round = 0; round < 3; ++round) {
        Result<std::string> received = rank.plane->Broadcast(me == 0 ? message : "ignored", milliseconds(10000));
        ASSERT_TRUE(received.ok()) << received.status().message();
        EXPECT_EQ(*received, message) << "rank " << me << " of " << world;
      }
      if (me == 0) {
        EXPECT_GE(rank.plane->counters().sent, 3 * copies * kMiB);
        EXPECT_LT(rank.plane->counters().sent, 3 * copies * kMiB + (64u << 10)) << "world " << world;
      }
    });
  }
}

TEST(PeerControlPlaneTest, BroadcastWaitingForARankThatNeverArrivesTimesOutNamingIt) {
  // In a world of 4, rank 3 receives from rank 1, which never joins the broadcast.
  RunAllRanks(4, [](Rank& rank) {
    const int me = rank.plane->rank();
    if (me == 1) {
      std::this_thread::sleep_for(milliseconds(2000));
      return;
    }
    const Clock::time_point start = Clock::now();
    Result<std::string> received = rank.plane->Broadcast("root", milliseconds(500));
    if (me != 3) {
      EXPECT_TRUE(received.ok()) << received.status().message();
      return;
    }
    EXPECT_EQ(received.status().code(), Code::kTimeout) << received.status().message();
    EXPECT_TRUE(Contains(received.status(), "from rank 1")) << received.status().message();
    EXPECT_LT(Clock::now() - start, milliseconds(1500));
  });
}

TEST(PeerControlPlaneTest, AllToAllWithARankThatNeverArrivesTimesOutNamingIt) {
  AllToAllWithoutTheLastRankTimesOutNamingIt(3, kDefaultDirectRanks);
}

constexpr char kDieKey[] = "die";

// A child process that joins as `rank` with its plane, then exits without a goodbye once kDieKey is set, the way a
// crashed process would. Fork before any thread exists in this process.
pid_t ForkRankThatDiesOnRequest(int rank, int world_size, int port) {
  const pid_t pid = fork();
  if (pid == 0) {
    Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(rank, world_size, port));
    if (!store.ok()) _exit(1);
    std::shared_ptr<TcpStore> shared = std::move(store).value();
    Result<std::unique_ptr<PeerControlPlane>> plane = PeerControlPlane::Open(shared, kDefaultDirectRanks);
    _exit(plane.ok() && shared->Wait(kDieKey).ok() ? 0 : 1);
  }
  return pid;
}

TEST(PeerControlPlaneTest, APeerWhoseStoreConnectionDiesFailsWithPeerFailed) {
  // In a world of 4, rank 3 receives its broadcast from rank 1, which dies before it. No link from rank 1 ever
  // opened: only the store can tell rank 3 that its parent is gone.
  const int port = PickFreePort();
  const pid_t child = ForkRankThatDiesOnRequest(1, 4, port);
  RunRanks({0, 2, 3}, 4, port, [&](Rank& rank) {
    const int me = rank.plane->rank();
    if (me == 0) {
      ASSERT_TRUE(rank.store->Set(kDieKey, "now").ok());
      int status = 0;
      EXPECT_EQ(waitpid(child, &status, 0), child);
    }
    const Clock::time_point start = Clock::now();
    Result<std::string> received = rank.plane->Broadcast("root", milliseconds(15000));
    if (me == 2) return;  // its parent is rank 0, which sends to it before it tries rank 1
    EXPECT_EQ(received.status().code(), Code::kPeerFailed) << "rank " << me << ": " << received.status().message();
    EXPECT_TRUE(Contains(received.status(), "rank 1")) << received.status().message();
    EXPECT_LT(Clock::now() - start, milliseconds(5000));
  });
}

// A raw connection to `rank`'s link listener that says hello as `as_rank` with `secret`; returns the socket and the
// type of the frame the listener answered with.
std::pair<int, uint32_t> HelloAs(TcpStore& store, int rank, int as_rank, int world_size, const std::string& secret) {
  Result<std::string> published = store.Wait(PeerLinkAddressKey(rank));
  EXPECT_TRUE(published.ok()) << published.status().message();
  ByteReader reader(published.value(), "address");
  std::string host;
  int32_t port = 0;
  EXPECT_TRUE(reader.Bytes(&host).ok() && reader.I32(&port).ok());
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &address.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  timeval five_seconds = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &five_seconds, sizeof five_seconds);
  auto read_frame = [fd](std::string* payload) {
    char header[store_wire::kHeaderBytes];
    EXPECT_EQ(recv(fd, header, sizeof header, MSG_WAITALL), static_cast<ssize_t>(sizeof header));
    const store_wire::FrameHeader decoded = store_wire::DecodeHeader(std::string_view(header, sizeof header));
    payload->assign(decoded.length, '\0');
    EXPECT_EQ(recv(fd, payload->data(), payload->size(), MSG_WAITALL), static_cast<ssize_t>(payload->size()));
    return decoded.type;
  };
  std::string challenge;
  EXPECT_EQ(read_frame(&challenge), static_cast<uint32_t>(MessageType::kChallenge));
  Result<std::string> nonce = store_handshake::DecodeChallenge(challenge, "rank " + std::to_string(rank));
  EXPECT_TRUE(nonce.ok());
  store_handshake::Hello hello;
  hello.rank = as_rank;
  hello.world_size = world_size;
  hello.client_nonce = store_auth::RandomBytes(store_auth::kNonceBytes).value();
  const std::string frame =
      store_wire::EncodeFrame(MessageType::kHello, store_handshake::EncodeHello(hello, secret, nonce.value()));
  EXPECT_EQ(send(fd, frame.data(), frame.size(), MSG_NOSIGNAL), static_cast<ssize_t>(frame.size()));
  std::string reply;
  return {fd, read_frame(&reply)};
}

// Whether the listener hung up on `fd`, after whatever it still had to say.
bool HungUp(int fd) {
  char byte;
  ssize_t n;
  while ((n = recv(fd, &byte, 1, 0)) > 0) {
  }
  // A reset is a hang-up too: the listener closed with our unread frame still in its buffer.
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

std::string MessageFrame(uint64_t sequence, int sender, const std::string& message) {
  ByteWriter payload;
  payload.U64(sequence);
  payload.I32(sender);
  return store_wire::EncodeFrame(MessageType::kPeerMessage, payload.data() + message);
}

TEST(PeerControlPlaneTest, AConnectionWithAWrongSecretIsRefusedAndDeliversNothing) {
  RunAllRanks(2, [](Rank& rank) {
    const int me = rank.plane->rank();
    if (me == 1) {
      const auto [fd, reply] = HelloAs(*rank.store, 0, 1, 2, "not-the-secret-of-these-tests");
      EXPECT_EQ(reply, static_cast<uint32_t>(MessageType::kError));
      const std::string forged = MessageFrame(0, 1, "forged");
      (void)send(fd, forged.data(), forged.size(), MSG_NOSIGNAL);
      EXPECT_TRUE(HungUp(fd));
      close(fd);
    }
    Result<std::vector<std::string>> incoming = rank.plane->AllToAllV(std::vector<std::string>(2), milliseconds(5000));
    ASSERT_TRUE(incoming.ok()) << incoming.status().message();
    EXPECT_EQ(*incoming, std::vector<std::string>(2)) << "rank " << me;
  });
}

// After `collectives_first` all-to-alls, rank 1 of a world of 2 opens a link to rank 0 with the right secret and
// sends `frame`; rank 0's next all-to-all must fail with kCorrupt naming rank 1, and the plane must live on.
void ExpectRefusedAsCorrupt(const std::string& frame, int collectives_first = 0) {
  RunAllRanks(2, [&](Rank& rank) {
    const int me = rank.plane->rank();
    for (int i = 0; i < collectives_first; ++i) {
      ASSERT_TRUE(rank.plane->AllToAllV(std::vector<std::string>(2), milliseconds(5000)).ok());
    }
    // Rank 0 has finished those collectives before rank 1 sends: else a message for one of them could still arrive
    // while rank 0 is in it, and be taken as a second message rather than a late one.
    if (collectives_first > 0) ASSERT_TRUE(rank.plane->Barrier().ok());
    if (me == 1) {
      const auto [fd, reply] = HelloAs(*rank.store, 0, 1, 2, kSecret);
      EXPECT_EQ(reply, static_cast<uint32_t>(MessageType::kOk));
      EXPECT_EQ(send(fd, frame.data(), frame.size(), MSG_NOSIGNAL), static_cast<ssize_t>(frame.size()));
      EXPECT_TRUE(HungUp(fd));
      close(fd);
    }
    ASSERT_TRUE(rank.plane->Barrier().ok());
    Result<std::vector<std::string>> incoming = rank.plane->AllToAllV(std::vector<std::string>(2), milliseconds(5000));
    if (me == 0) {
      EXPECT_EQ(incoming.status().code(), Code::kCorrupt) << incoming.status().message();
      EXPECT_TRUE(Contains(incoming.status(), "from rank 1")) << incoming.status().message();
    } else {
      EXPECT_TRUE(incoming.ok()) << incoming.status().message();
    }
    std::vector<std::string> outgoing = {"to 0 from " + std::to_string(me), "to 1 from " + std::to_string(me)};
    Result<std::vector<std::string>> after = rank.plane->AllToAllV(outgoing, milliseconds(5000));
    ASSERT_TRUE(after.ok()) << after.status().message();
    EXPECT_EQ((*after)[1 - me], "to " + std::to_string(me) + " from " + std::to_string(1 - me));
  });
}

TEST(PeerControlPlaneTest, AMalformedFrameIsRefusedWithCorrupt) {
  ExpectRefusedAsCorrupt(store_wire::EncodeFrame(MessageType::kPeerMessage, "abc"));
}

TEST(PeerControlPlaneTest, AnOversizedFrameIsRefusedWithCorrupt) {
  ExpectRefusedAsCorrupt(
      store_wire::EncodeHeader(MessageType::kPeerMessage, kMessagePrefixBytes + kMaxPeerMessageBytes + 1));
}

TEST(PeerControlPlaneTest, AMessageSignedByAnotherRankIsRefusedWithCorrupt) {
  ExpectRefusedAsCorrupt(MessageFrame(0, 0, "claims to come from rank 0"));
}

TEST(PeerControlPlaneTest, AMessageForACollectiveAlreadyOverIsRefusedWithCorrupt) {
  ExpectRefusedAsCorrupt(MessageFrame(0, 1, "late"), 1);
}

TEST(PeerControlPlaneTest, ALinkTurnedAwayByAFloodedInboxTriesAgainAndDelivers) {
  RunAllRanks(2, [](Rank& rank) {
    const int me = rank.plane->rank();
    std::vector<int> flood;
    if (me == 0) {
      // Rank 1's inbox holds its share of strangers from this address, all within their fair chance: the link that
      // rank 0 opens next is turned away until they have had it.
      Result<std::string> published = rank.store->Wait(PeerLinkAddressKey(1));
      ASSERT_TRUE(published.ok()) << published.status().message();
      ByteReader reader(*published, "address");
      std::string host;
      int32_t port = 0;
      ASSERT_TRUE(reader.Bytes(&host).ok() && reader.I32(&port).ok());
      for (size_t i = 0; i < kMaxStrangersPerSource; ++i) {
        flood.push_back(ckpt::testing::ConnectFrom(host.c_str(), port));
      }
    }
    std::vector<std::string> outgoing = {"to 0 from " + std::to_string(me), "to 1 from " + std::to_string(me)};
    Result<std::vector<std::string>> incoming = rank.plane->AllToAllV(outgoing, milliseconds(10000));
    ASSERT_TRUE(incoming.ok()) << incoming.status().message();
    EXPECT_EQ((*incoming)[1 - me], "to " + std::to_string(me) + " from " + std::to_string(1 - me));
    for (const int fd : flood) close(fd);
  });
}

}  // namespace
}  // namespace ckpt::coll

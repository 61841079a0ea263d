// ctest-labels: threaded
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/store/tcp_store.h"
#include "collectives/store/tcp_store_wire.h"
#include "common/bytes.h"
#include "tests/unit/collectives/free_port.h"

namespace ckpt::coll {
namespace {

using ckpt::testing::PickFreePort;

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TcpStoreConfig ConfigFor(int rank, int world_size, int port, milliseconds timeout = milliseconds(5000)) {
  TcpStoreConfig config;
  config.rank = rank;
  config.world_size = world_size;
  config.port = port;
  config.timeout = timeout;
  config.secret = "secret-of-the-store-tests";
  return config;
}

// Connects a raw socket to the store and reads its challenge, as any client must before it may say hello.
int ConnectAndReadChallenge(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  char challenge[store_wire::kHeaderBytes + 8 + 8 + 32];
  EXPECT_EQ(recv(fd, challenge, sizeof challenge, MSG_WAITALL), static_cast<ssize_t>(sizeof challenge));
  return fd;
}

// Runs ranks 0..ranks_here-1 of a world of `world_size`, each on its own thread with its own store connection.
void RunRanks(int ranks_here, int world_size, int port, milliseconds timeout,
              const std::function<void(TcpStore&)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks_here; ++r) {
    threads.emplace_back([=, &body] {
      Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(r, world_size, port, timeout));
      ASSERT_TRUE(store.ok()) << "rank " << r << ": " << store.status().message();
      body(**store);
    });
  }
  for (auto& t : threads) t.join();
}

void RunAllRanks(int world_size, int port, const std::function<void(TcpStore&)>& body) {
  RunRanks(world_size, world_size, port, milliseconds(5000), body);
}

bool Contains(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

constexpr char kDieKey[] = "die";

// Forks a child that joins the store as `rank`, waits until someone sets kDieKey, then exits without a goodbye,
// the way a crashed process would. Fork before any thread exists in this process.
pid_t ForkRankThatDiesOnRequest(int rank, int world_size, int port) {
  const pid_t pid = fork();
  if (pid == 0) {
    Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(rank, world_size, port));
    _exit(store.ok() && (*store)->Wait(kDieKey).ok() ? 0 : 1);
  }
  return pid;
}

int ChildExitCode(pid_t pid) {
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string ContributionOf(int rank, int round) { return std::to_string(rank) + "/" + std::to_string(round); }

TEST(TcpStoreTest, AllGatherReturnsDifferentSizedContributionsByRank) {
  // Rank 2's megabytes cross many socket buffers, on the way in and on the way back.
  const std::vector<std::string> contributions = {"", "rank one", std::string(3 << 20, 'z')};
  RunAllRanks(3, PickFreePort(), [&](TcpStore& store) {
    Result<std::vector<std::string>> gathered = store.AllGather(contributions[store.rank()]);
    ASSERT_TRUE(gathered.ok()) << gathered.status().message();
    EXPECT_EQ(gathered.value(), contributions);
  });
}

TEST(TcpStoreTest, RepeatedAllGathersKeepTheirOrder) {
  RunAllRanks(3, PickFreePort(), [](TcpStore& store) {
    for (int round = 0; round < 50; ++round) {
      Result<std::vector<std::string>> gathered = store.AllGather(ContributionOf(store.rank(), round));
      ASSERT_TRUE(gathered.ok()) << gathered.status().message();
      for (int r = 0; r < 3; ++r) EXPECT_EQ(gathered.value()[r], ContributionOf(r, round));
    }
  });
}

TEST(TcpStoreTest, AllToAllDeliversEachRankOnlyItsOwnMessages) {
  constexpr int kWorld = 4;
  auto message = [](int from, int to) {
    return from == to + 1 ? std::string() : std::to_string(from) + ">" + std::to_string(to);
  };
  std::vector<ControlPlaneCounters> counters(kWorld);
  RunAllRanks(kWorld, PickFreePort(), [&](TcpStore& store) {
    std::vector<std::string> outgoing;
    for (int to = 0; to < kWorld; ++to) outgoing.push_back(message(store.rank(), to));
    outgoing[0] += std::string(store.rank() == 3 ? 2 << 20 : 0, 'm');  // megabytes to rank 0 only
    Result<std::vector<std::string>> incoming = store.AllToAllV(outgoing, milliseconds(5000));
    ASSERT_TRUE(incoming.ok()) << incoming.status().message();
    ASSERT_EQ(incoming->size(), static_cast<size_t>(kWorld));
    for (int from = 0; from < kWorld; ++from) {
      std::string expected = message(from, store.rank());
      if (store.rank() == 0 && from == 3) expected += std::string(2 << 20, 'm');
      EXPECT_EQ((*incoming)[from], expected) << "rank " << store.rank() << " from rank " << from;
    }
    counters[store.rank()] = store.counters();
  });
  // Rank 3's megabytes go up once and down to rank 0 alone: ranks 1 and 2 move a few hundred bytes.
  EXPECT_GT(counters[3].sent, uint64_t{2} << 20);
  EXPECT_GT(counters[0].received, uint64_t{2} << 20);
  for (int r : {1, 2}) EXPECT_LT(counters[r].sent + counters[r].received, 1024u) << "rank " << r;
}

TEST(TcpStoreTest, ABarrierMovesAFewBytesPerRankWhateverTheWorld) {
  constexpr int kWorld = 64;
  std::vector<ControlPlaneCounters> before(kWorld), after(kWorld);
  RunAllRanks(kWorld, PickFreePort(), [&](TcpStore& store) {
    before[store.rank()] = store.counters();
    ASSERT_TRUE(store.Barrier().ok());
    after[store.rank()] = store.counters();
  });
  // An all-gather of nothing would send every rank a length per rank: 64 of them, at least 256 bytes.
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_LT(after[r].received - before[r].received, 64u) << "rank " << r;
    EXPECT_LT(after[r].sent - before[r].sent, 64u) << "rank " << r;
  }
}

TEST(TcpStoreTest, BroadcastGivesEveryRankRankZerosMessage) {
  RunAllRanks(3, PickFreePort(), [](TcpStore& store) {
    for (int round = 0; round < 5; ++round) {
      Result<std::string> got =
          store.Broadcast(store.rank() == 0 ? ContributionOf(0, round) : std::string(), milliseconds(5000));
      ASSERT_TRUE(got.ok()) << got.status().message();
      EXPECT_EQ(*got, ContributionOf(0, round));
    }
  });
}

TEST(TcpStoreTest, RanksInDifferentCollectivesAllFailWithMismatch) {
  RunAllRanks(2, PickFreePort(), [](TcpStore& store) {
    const Status status =
        store.rank() == 0 ? store.AllGather("x").status() : store.AllToAllV({"a", "b"}, milliseconds(5000)).status();
    EXPECT_EQ(status.code(), Code::kMismatch) << status.message();
    EXPECT_TRUE(Contains(status, "allgather 0") && Contains(status, "alltoall 0")) << status.message();
  });
}

TEST(TcpStoreTest, ADeletedKeyIsGone) {
  RunAllRanks(1, PickFreePort(), [](TcpStore& store) {
    ASSERT_TRUE(store.Set("report", "bytes").ok());
    ASSERT_TRUE(store.Delete("report").ok());
    ASSERT_TRUE(store.Delete("never-set").ok()) << "deleting a key that is not set is no error";
    Result<std::optional<std::string>> got = store.Get("report");
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_FALSE(got->has_value());
  });
}

TEST(TcpStoreTest, SetGetAndWait) {
  RunAllRanks(2, PickFreePort(), [](TcpStore& store) {
    if (store.rank() == 0) {
      Result<std::optional<std::string>> missing = store.Get("plan");
      ASSERT_TRUE(missing.ok()) << missing.status().message();
      EXPECT_FALSE(missing->has_value());
      std::this_thread::sleep_for(milliseconds(100));  // let rank 1 block in Wait first
      ASSERT_TRUE(store.Set("plan", std::string("v1\0binary", 9)).ok());
    } else {
      Result<std::string> waited = store.Wait("plan");
      ASSERT_TRUE(waited.ok()) << waited.status().message();
      EXPECT_EQ(waited.value(), std::string("v1\0binary", 9));
    }
    ASSERT_TRUE(store.Barrier().ok());
    Result<std::optional<std::string>> got = store.Get("plan");
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(got->value_or("unset"), std::string("v1\0binary", 9));
  });
}

TEST(TcpStoreTest, BarrierWaitsForTheSlowestRank) {
  std::atomic<bool> slow_rank_arrived{false};
  RunAllRanks(3, PickFreePort(), [&](TcpStore& store) {
    if (store.rank() == 2) {
      std::this_thread::sleep_for(milliseconds(200));
      slow_rank_arrived = true;
    }
    ASSERT_TRUE(store.Barrier().ok());
    EXPECT_TRUE(slow_rank_arrived.load()) << "rank " << store.rank() << " left the barrier early";
  });
}

TEST(TcpStoreTest, WaitTimesOutNamingTheKey) {
  Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(0, 1, PickFreePort(), milliseconds(300)));
  ASSERT_TRUE(store.ok()) << store.status().message();
  Result<std::string> waited = (*store)->Wait("never-set");
  EXPECT_EQ(waited.status().code(), Code::kTimeout);
  EXPECT_TRUE(Contains(waited.status(), "'never-set'")) << waited.status().message();
}

TEST(TcpStoreTest, ConnectTimesOutNamingTheRankThatNeverCame) {
  const int port = PickFreePort();
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([=] {
      Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(r, 3, port, milliseconds(1000)));
      EXPECT_EQ(store.status().code(), Code::kTimeout) << store.status().message();
      EXPECT_TRUE(Contains(store.status(), "waiting for rank 2 to connect")) << store.status().message();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
}

TEST(TcpStoreTest, AllGatherTimesOutNamingTheRankThatNeverJoined) {
  std::atomic<int> finished{0};
  RunRanks(3, 3, PickFreePort(), milliseconds(1000), [&](TcpStore& store) {
    if (store.rank() == 2) {
      // Stays connected but never joins; leaves once the others have given up.
      while (finished.load() < 2) std::this_thread::sleep_for(milliseconds(10));
      return;
    }
    Result<std::vector<std::string>> gathered = store.AllGather("x");
    EXPECT_EQ(gathered.status().code(), Code::kTimeout);
    EXPECT_TRUE(Contains(gathered.status(), "waiting for rank 2")) << gathered.status().message();
    ++finished;
  });
}

TEST(TcpStoreTest, ABoundedAllGatherFailsForEveryRankWhenItsBoundPasses) {
  std::atomic<bool> first_failed{false};
  std::atomic<int> finished{0};
  RunRanks(3, 3, PickFreePort(), milliseconds(5000), [&](TcpStore& store) {
    if (store.rank() == 2) {
      // Stays connected but never joins, as a stopped process would.
      while (finished.load() < 2) std::this_thread::sleep_for(milliseconds(10));
      return;
    }
    const Clock::time_point start = Clock::now();
    if (store.rank() == 0) {
      Result<std::vector<std::string>> gathered = store.AllGatherWithin("x", milliseconds(300));
      EXPECT_EQ(gathered.status().code(), Code::kTimeout);
      EXPECT_TRUE(Contains(gathered.status(), "waiting for ranks 1, 2")) << gathered.status().message();
      EXPECT_LT(Clock::now() - start, milliseconds(2500)) << "the store's 5 s timeout was waited out";
      first_failed = true;
    } else {
      // Rank 1 joins with the full timeout, after rank 0's bound has passed: the allgather has already failed.
      while (!first_failed) std::this_thread::sleep_for(milliseconds(10));
      EXPECT_EQ(store.AllGather("y").status().code(), Code::kTimeout);
      EXPECT_LT(Clock::now() - start, milliseconds(3500));
    }
    ++finished;
  });
}

TEST(PeerCheckIntervalTest, GrowsWithTheWorldSoThatRankZeroAnswersAFixedRateButStaysWithinTheTimeout) {
  const milliseconds timeout(300000);
  EXPECT_EQ(PeerCheckInterval(16, timeout), milliseconds(250));
  EXPECT_EQ(PeerCheckInterval(1024, timeout), milliseconds(256));
  EXPECT_EQ(PeerCheckInterval(16384, timeout), milliseconds(4096));
  EXPECT_EQ(PeerCheckInterval(65536, timeout), milliseconds(16384));
  EXPECT_EQ(PeerCheckInterval(65536, milliseconds(20000)), milliseconds(5000));
}

TEST(TcpStoreTest, CheckPeersAsksTheStoreAtMostOncePerInterval) {
  const int port = PickFreePort();
  RunAllRanks(1, port, [](TcpStore& store) {
    ASSERT_TRUE(store.CheckPeers().ok());
    const uint64_t before = store.counters().sent;
    ASSERT_TRUE(store.CheckPeers().ok());  // may fall in the next interval: one question
    const uint64_t one_question = store.counters().sent - before;
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(store.CheckPeers().ok());
    // Without the limit, 100 questions; a slow machine may cross one more interval boundary.
    EXPECT_LE(store.counters().sent - before, 3 * std::max<uint64_t>(one_question, 1));
  });
}

TEST(TcpStoreTest, DeadRankFailsTheOthersAllGatherWithPeerFailed) {
  const int port = PickFreePort();
  const pid_t child = ForkRankThatDiesOnRequest(2, 3, port);
  ASSERT_GT(child, 0);
  RunRanks(2, 3, port, milliseconds(10000), [](TcpStore& store) {
    ASSERT_TRUE(store.Set(kDieKey, "").ok());
    const Clock::time_point start = Clock::now();
    Result<std::vector<std::string>> gathered = store.AllGather("x");
    EXPECT_EQ(gathered.status().code(), Code::kPeerFailed);
    EXPECT_TRUE(Contains(gathered.status(), "rank 2 disconnected")) << gathered.status().message();
    EXPECT_LT(Clock::now() - start, milliseconds(3000));
  });
  EXPECT_EQ(ChildExitCode(child), 0);
}

TEST(TcpStoreTest, DeadRankFailsLaterWaits) {
  const int port = PickFreePort();
  const pid_t child = ForkRankThatDiesOnRequest(1, 2, port);
  ASSERT_GT(child, 0);
  RunRanks(1, 2, port, milliseconds(10000), [](TcpStore& store) {
    ASSERT_TRUE(store.Set(kDieKey, "").ok());
    const Clock::time_point start = Clock::now();
    Result<std::string> waited = store.Wait("never-set");
    EXPECT_EQ(waited.status().code(), Code::kPeerFailed);
    EXPECT_TRUE(Contains(waited.status(), "rank 1 disconnected")) << waited.status().message();
    EXPECT_LT(Clock::now() - start, milliseconds(3000));
  });
  EXPECT_EQ(ChildExitCode(child), 0);
}

TEST(TcpStoreTest, LostServerFailsTheOthersWithPeerFailed) {
  const int port = PickFreePort();
  const pid_t child = ForkRankThatDiesOnRequest(0, 2, port);
  ASSERT_GT(child, 0);
  Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(1, 2, port, milliseconds(10000)));
  ASSERT_TRUE(store.ok()) << store.status().message();
  ASSERT_TRUE((*store)->Set(kDieKey, "").ok());
  EXPECT_EQ(ChildExitCode(child), 0);
  Result<std::vector<std::string>> gathered = (*store)->AllGather("x");
  EXPECT_EQ(gathered.status().code(), Code::kPeerFailed);
  EXPECT_TRUE(Contains(gathered.status(), "lost connection to the store on rank 0 (127.0.0.1:" + std::to_string(port)))
      << gathered.status().message();
  // The stream is gone for good: later calls say so at once.
  EXPECT_EQ((*store)->Set("k", "v").code(), Code::kPeerFailed);
}

TEST(TcpStoreTest, RankZeroStopsServingWithinGraceWhenOthersLinger) {
  const int port = PickFreePort();
  std::unique_ptr<TcpStore> stores[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(r, 2, port, milliseconds(1000)));
      ASSERT_TRUE(store.ok()) << store.status().message();
      stores[r] = std::move(store.value());
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(stores[0] && stores[1]);
  const Clock::time_point start = Clock::now();
  stores[0].reset();
  EXPECT_LT(Clock::now() - start, milliseconds(2500));
  EXPECT_EQ(stores[1]->AllGather("x").status().code(), Code::kPeerFailed);
}

TEST(TcpStoreTest, OversizeMessageDropsTheSenderAndSparesTheStore) {
  const int port = PickFreePort();
  RunAllRanks(2, port, [&](TcpStore& store) {
    if (store.rank() == 1) {
      const int fd = ConnectAndReadChallenge(port);
      ByteWriter header;
      header.U32(static_cast<uint32_t>(store_wire::MessageType::kHello));
      header.U64(uint64_t{1} << 40);
      ASSERT_EQ(send(fd, header.data().data(), header.data().size(), MSG_NOSIGNAL),
                static_cast<ssize_t>(header.data().size()));
      pollfd pfd = {fd, POLLIN, 0};
      ASSERT_EQ(poll(&pfd, 1, 2000), 1) << "the store kept the hostile connection open";
      char byte = 0;
      EXPECT_LE(recv(fd, &byte, 1, 0), 0);
      close(fd);
    }
    Result<std::vector<std::string>> gathered = store.AllGather(std::to_string(store.rank()));
    ASSERT_TRUE(gathered.ok()) << gathered.status().message();
    EXPECT_EQ(gathered.value(), (std::vector<std::string>{"0", "1"}));
  });
}

TEST(TcpStoreTest, RefusesSecondConnectionForTheSameRank) {
  const int port = PickFreePort();
  RunAllRanks(2, port, [&](TcpStore& store) {
    if (store.rank() == 1) {
      Result<std::unique_ptr<TcpStore>> duplicate = TcpStore::Connect(ConfigFor(1, 2, port, milliseconds(1000)));
      EXPECT_EQ(duplicate.status().code(), Code::kAlreadyExists);
      EXPECT_TRUE(Contains(duplicate.status(), "rank 1 is already connected")) << duplicate.status().message();
    }
    // Rank 0 stops accepting connections once it leaves, so it stays until rank 1 is done.
    EXPECT_TRUE(store.Barrier().ok());
  });
}

TEST(TcpStoreTest, RefusesWorldSizeMismatch) {
  const int port = PickFreePort();
  RunAllRanks(2, port, [&](TcpStore& store) {
    if (store.rank() == 1) {
      Result<std::unique_ptr<TcpStore>> stranger = TcpStore::Connect(ConfigFor(1, 3, port, milliseconds(1000)));
      EXPECT_EQ(stranger.status().code(), Code::kMismatch);
      EXPECT_TRUE(Contains(stranger.status(), "world has 3 ranks")) << stranger.status().message();
    }
    EXPECT_TRUE(store.Barrier().ok());
  });
}

TEST(TcpStoreTest, RejectsRankOutsideTheWorld) {
  Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(3, 3, PickFreePort()));
  EXPECT_EQ(store.status().code(), Code::kInvalidArgument);
}

TEST(TcpStoreTest, PortInUseIsAnIoErrorOnRankZero) {
  const int blocker = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(blocker, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(listen(blocker, 1), 0);
  socklen_t length = sizeof address;
  ASSERT_EQ(getsockname(blocker, reinterpret_cast<sockaddr*>(&address), &length), 0);
  Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(ConfigFor(0, 1, ntohs(address.sin_port)));
  EXPECT_EQ(store.status().code(), Code::kIo);
  EXPECT_TRUE(Contains(store.status(), "cannot listen")) << store.status().message();
  close(blocker);
}

}  // namespace
}  // namespace ckpt::coll

namespace ckpt::coll {
namespace {

TEST(TcpStoreAuxiliaryTest, AuxiliaryConnectionsExchangeKeysWhileThePrimaryRunsCollectives) {
  RunAllRanks(2, PickFreePort(), [](TcpStore& store) {
    Result<std::unique_ptr<TcpStore>> aux = TcpStore::Connect(store.AuxiliaryConfig());
    ASSERT_TRUE(aux.ok()) << aux.status().message();
    const std::string mine = "report/" + std::to_string(store.rank());
    ASSERT_TRUE((*aux)->Set(mine, "from " + std::to_string(store.rank())).ok());
    const std::string theirs = "report/" + std::to_string(1 - store.rank());
    Result<std::string> got = (*aux)->Wait(theirs);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(*got, "from " + std::to_string(1 - store.rank()));
    Result<std::vector<std::string>> gathered = store.AllGather("x");
    ASSERT_TRUE(gathered.ok()) << gathered.status().message();
  });
}

TEST(TcpStoreAuxiliaryTest, ClosingAnAuxiliaryConnectionDoesNotKillItsRank) {
  RunAllRanks(2, PickFreePort(), [](TcpStore& store) {
    {
      Result<std::unique_ptr<TcpStore>> aux = TcpStore::Connect(store.AuxiliaryConfig());
      ASSERT_TRUE(aux.ok()) << aux.status().message();
    }
    EXPECT_TRUE(store.Barrier().ok());
  });
}

TEST(TcpStoreAuxiliaryTest, RendezvousSpreadsAnEphemeralPort) {
  std::atomic<int> bound{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([r, &bound] {
      TcpStoreConfig config = ConfigFor(r, 2, 0);
      config.rendezvous = [r, &bound](int port, const std::string&) -> Result<StoreAddress> {
        if (r == 0) bound = port;
        while (bound == 0) std::this_thread::sleep_for(milliseconds(1));
        return StoreAddress{"127.0.0.1", bound.load(), "secret-of-the-store-tests"};
      };
      Result<std::unique_ptr<TcpStore>> store = TcpStore::Connect(config);
      ASSERT_TRUE(store.ok()) << store.status().message();
      EXPECT_TRUE((*store)->Barrier().ok());
      EXPECT_EQ((*store)->AuxiliaryConfig().port, bound.load());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GT(bound.load(), 0);
}

}  // namespace
}  // namespace ckpt::coll

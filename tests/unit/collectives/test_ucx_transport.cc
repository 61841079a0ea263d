// ctest-labels: threaded
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "collectives/store/tcp_store.h"
#include "collectives/transport/ucx_config.h"
#include "collectives/transport/ucx_library.h"
#include "collectives/transport/ucx_transport.h"
#include "tests/unit/collectives/free_port.h"
#include "tests/unit/support/scoped_env.h"

extern char** environ;

namespace ckpt::coll {
namespace {

using testing::ScopedEnv;

using ckpt::testing::PickFreePort;

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kStoreTimeout{10000};
constexpr milliseconds kExchangeTimeout{10000};

Result<std::unique_ptr<TcpStore>> ConnectStore(int rank, int world_size, int port) {
  TcpStoreConfig config;
  config.rank = rank;
  config.world_size = world_size;
  config.port = port;
  config.timeout = kStoreTimeout;
  return TcpStore::Connect(config);
}

// The options of a job whose store is on this host, as every test's is.
UcxTransportOptions LoopbackJob() {
  UcxTransportOptions options;
  options.close_timeout = kStoreTimeout;
  options.job_host = "127.0.0.1";
  return options;
}

// Set on the threads that play ranks, so that a test can make UCX fail on the transports' own threads only.
thread_local bool on_rank_thread = false;

// Runs every rank of the world on its own thread, each with its own store connection and UCX worker; the body owns
// the transport.
void RunRanksOwningTransports(
    int world_size, const std::function<void(std::unique_ptr<Transport>, TcpStore&)>& body,
    const std::function<UcxTransportOptions(int rank)>& options_of = [](int) { return LoopbackJob(); }) {
  const int port = PickFreePort();
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      on_rank_thread = true;
      Result<std::unique_ptr<TcpStore>> store = ConnectStore(r, world_size, port);
      ASSERT_TRUE(store.ok()) << "rank " << r << ": " << store.status().message();
      Result<std::unique_ptr<Transport>> transport = MakeUcxTransport(**store, options_of(r));
      ASSERT_TRUE(transport.ok()) << "rank " << r << ": " << transport.status().message();
      body(std::move(transport).value(), **store);
    });
  }
  for (std::thread& thread : threads) thread.join();
}

void RunRanks(int world_size, const std::function<void(Transport&, TcpStore&)>& body) {
  RunRanksOwningTransports(world_size,
                           [&](std::unique_ptr<Transport> transport, TcpStore& store) { body(*transport, store); });
}

// Bytes that identify their sender, tag and position, so that a message delivered to the wrong buffer shows.
std::vector<uint8_t> Pattern(int sender, uint64_t tag, uint64_t size) {
  std::vector<uint8_t> bytes(size);
  const uint64_t seed = (static_cast<uint64_t>(sender) << 56) ^ (tag << 32);
  for (uint64_t offset = 0; offset < size; offset += sizeof(uint64_t)) {
    const uint64_t word = seed ^ (offset * 0x9e3779b97f4a7c15ULL);
    std::memcpy(bytes.data() + offset, &word, std::min<uint64_t>(sizeof word, size - offset));
  }
  return bytes;
}

bool Contains(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

// Every rank sends `sizes.size()` messages (tag = index) to every rank in `peers` and receives as many from each.
void ExchangeWithPeers(Transport& transport, int rank, const std::vector<int>& peers,
                       const std::vector<uint64_t>& sizes) {
  std::vector<std::vector<uint8_t>> outgoing(sizes.size());
  for (size_t tag = 0; tag < sizes.size(); ++tag) outgoing[tag] = Pattern(rank, tag, sizes[tag]);
  std::vector<TransferSend> sends;
  std::vector<TransferRecv> recvs;
  std::vector<std::vector<uint8_t>> incoming;
  incoming.reserve(peers.size() * sizes.size());
  for (int peer : peers) {
    for (size_t tag = 0; tag < sizes.size(); ++tag) {
      sends.push_back({peer, outgoing[tag].data(), sizes[tag], tag});
      incoming.emplace_back(sizes[tag]);
      recvs.push_back({peer, incoming.back().data(), sizes[tag], tag});
    }
  }
  const Status status = transport.Exchange(sends, recvs, kExchangeTimeout);
  ASSERT_TRUE(status.ok()) << "rank " << rank << ": " << status.message();
  for (size_t i = 0; i < recvs.size(); ++i) {
    EXPECT_TRUE(incoming[i] == Pattern(recvs[i].peer, recvs[i].tag, recvs[i].size))
        << "rank " << rank << " got wrong bytes from rank " << recvs[i].peer << " tag " << recvs[i].tag;
  }
}

std::vector<int> OtherRanks(int rank, int world_size) {
  std::vector<int> others;
  for (int r = 0; r < world_size; ++r) {
    if (r != rank) others.push_back(r);
  }
  return others;
}

// Runs each test over UCX's shared-memory transports (one node) and over TCP alone (what ranks on different nodes
// use).
class UcxTransportTest : public ::testing::TestWithParam<const char*> {
 private:
  ScopedEnv transports_{"UCX_TLS", GetParam()};
};

INSTANTIATE_TEST_SUITE_P(Transports, UcxTransportTest, ::testing::Values(nullptr, "tcp,self"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return info.param == nullptr ? "Default" : "TcpOnly";
                         });

TEST(UcxTransportValidationTest, NameIsUcx) {
  RunRanks(1, [](Transport& transport, TcpStore&) { EXPECT_STREQ(transport.name(), "ucx"); });
}

TEST_P(UcxTransportTest, TwoRanksExchangeMessagesOfEverySizeBothWays) {
  // 0 bytes, eager sizes, and 64 MiB, which goes by rendezvous.
  const std::vector<uint64_t> sizes = {0, 1, 4096, 100003, 64 << 20};
  RunRanks(2, [&](Transport& transport, TcpStore& store) {
    ExchangeWithPeers(transport, store.rank(), OtherRanks(store.rank(), 2), sizes);
  });
}

TEST_P(UcxTransportTest, ThreeRanksExchangeWithEveryRankIncludingThemselves) {
  const std::vector<uint64_t> sizes = {0, 7, 65536, 3 << 20};
  RunRanks(3, [&](Transport& transport, TcpStore& store) {
    ExchangeWithPeers(transport, store.rank(), {0, 1, 2}, sizes);
  });
}

TEST_P(UcxTransportTest, RepeatedExchangesReuseTheSameTags) {
  RunRanks(2, [](Transport& transport, TcpStore& store) {
    for (int round = 0; round < 20; ++round) {
      ExchangeWithPeers(transport, store.rank(), OtherRanks(store.rank(), 2), {16, 300000});
    }
  });
}

TEST_P(UcxTransportTest, SameTagFromDifferentPeersReachesEachPeersBuffer) {
  constexpr uint64_t kTag = 42;
  constexpr uint64_t kSize = 50000;
  RunRanks(3, [&](Transport& transport, TcpStore& store) {
    if (store.rank() == 0) {
      std::vector<uint8_t> from_one(kSize), from_two(kSize);
      // Posted in the opposite order of the ranks, so that matching by tag alone would swap them.
      const Status status = transport.Exchange(
          {}, {{2, from_two.data(), kSize, kTag}, {1, from_one.data(), kSize, kTag}}, kExchangeTimeout);
      ASSERT_TRUE(status.ok()) << status.message();
      EXPECT_TRUE(from_one == Pattern(1, kTag, kSize));
      EXPECT_TRUE(from_two == Pattern(2, kTag, kSize));
    } else {
      const std::vector<uint8_t> payload = Pattern(store.rank(), kTag, kSize);
      const Status status = transport.Exchange({{0, payload.data(), kSize, kTag}}, {}, kExchangeTimeout);
      EXPECT_TRUE(status.ok()) << status.message();
    }
  });
}

// `size` bytes laid out in runs of `run` bytes (the last shorter) with `gap` bytes of `filler` after each.
struct Scattered {
  std::vector<uint8_t> memory;
  std::vector<MemoryRun> runs;
  Scattered(uint64_t size, uint64_t run, uint64_t gap, uint8_t filler) : memory(size + (size / run + 1) * gap, filler) {
    for (uint64_t at = 0, offset = 0; at < size; at += run, offset += run + gap) {
      runs.push_back({memory.data() + offset, std::min(run, size - at)});
    }
  }
  std::vector<uint8_t> Gathered() const {
    std::vector<uint8_t> bytes;
    for (const MemoryRun& r : runs)
      bytes.insert(bytes.end(), static_cast<uint8_t*>(r.data), static_cast<uint8_t*>(r.data) + r.size);
    return bytes;
  }
  uint64_t Touched(uint8_t filler) const {  // gap bytes that are no longer `filler`
    uint64_t touched = 0;
    for (const MemoryRun& r : runs) {
      const uint8_t* gap = static_cast<uint8_t*>(r.data) + r.size;
      const uint8_t* end = std::min(gap + kGap, memory.data() + memory.size());
      touched += std::count_if(gap, end, [&](uint8_t b) { return b != filler; });
    }
    return touched;
  }
  static constexpr uint64_t kGap = 64;
};

// Each rank sends the other messages scattered over runs of its memory (TransferSend::runs), which the other
// receives scattered over runs of other lengths (TransferRecv::runs): eager, pulled within the host (by default) and
// rendezvous sizes, the largest in thousands of runs. The receiver's runs hold the message's bytes in order, and no
// gap between them is written.
TEST_P(UcxTransportTest, TransfersScatteredOverRunsArriveInOrderAndTouchNothingBetween) {
  // (bytes, the sender's run, the receiver's run)
  const std::vector<std::array<uint64_t, 3>> shapes = {
      {300, 100, 64}, {100 << 10, 4096, 12288}, {24 << 20, 20000, 4096}, {24 << 20, 24 << 20, 256 << 10}};
  RunRanks(2, [&](Transport& transport, TcpStore& store) {
    EXPECT_TRUE(transport.Scatters());
    const int peer = 1 - store.rank();
    std::vector<Scattered> outgoing, incoming;
    std::vector<TransferSend> sends;
    std::vector<TransferRecv> recvs;
    outgoing.reserve(shapes.size());
    incoming.reserve(shapes.size());
    for (uint64_t tag = 0; tag < shapes.size(); ++tag) {
      const auto [size, send_run, receive_run] = shapes[tag];
      Scattered& from = outgoing.emplace_back(size, send_run, Scattered::kGap, 0xdd);
      const std::vector<uint8_t> pattern = Pattern(store.rank(), tag, size);
      for (uint64_t at = 0, r = 0; r < from.runs.size(); at += from.runs[r].size, ++r) {
        std::memcpy(from.runs[r].data, pattern.data() + at, from.runs[r].size);
      }
      sends.push_back({peer, from.runs.front().data, size, tag, from.runs});
      Scattered& into = incoming.emplace_back(size, receive_run, Scattered::kGap, 0xee);
      recvs.push_back({peer, into.runs.front().data, size, tag, into.runs});
    }
    const Status status = transport.Exchange(sends, recvs, kExchangeTimeout);
    ASSERT_TRUE(status.ok()) << "rank " << store.rank() << ": " << status.message();
    for (uint64_t tag = 0; tag < shapes.size(); ++tag) {
      EXPECT_TRUE(incoming[tag].Gathered() == Pattern(peer, tag, shapes[tag][0]))
          << "rank " << store.rank() << ", tag " << tag << ": wrong bytes in the runs";
      EXPECT_EQ(incoming[tag].Touched(0xee), 0u) << "rank " << store.rank() << ", tag " << tag;
    }
  });
}

// A scattered send or receive whose runs do not add up to its size is refused before anything moves.
TEST(UcxTransportValidationTest, ATransferWhoseRunsDoNotAddUpIsInvalidArgument) {
  RunRanks(1, [](Transport& transport, TcpStore&) {
    std::vector<uint8_t> buffer(100);
    const std::vector<MemoryRun> short_runs = {{buffer.data(), 40}, {buffer.data() + 50, 40}};
    Status status = transport.Exchange({}, {{0, buffer.data(), 100, 1, short_runs}}, kExchangeTimeout);
    EXPECT_EQ(status.code(), Code::kInvalidArgument) << status.message();
    EXPECT_TRUE(Contains(status, "receive from rank 0 with tag 1 scatters 80 bytes, not its 100")) << status.message();
    status = transport.Exchange({{0, buffer.data(), 100, 1, short_runs}}, {}, kExchangeTimeout);
    EXPECT_EQ(status.code(), Code::kInvalidArgument) << status.message();
    EXPECT_TRUE(Contains(status, "send to rank 0 with tag 1 scatters 80 bytes, not its 100")) << status.message();
  });
}

// Rank 1 sends `sent` bytes with tag 5; rank 0 expects `expected`. Returns rank 0's status.
Status ExchangeMismatchedSizes(uint64_t sent, uint64_t expected) {
  Status receiver_status;
  RunRanks(2, [&](Transport& transport, TcpStore& store) {
    if (store.rank() == 0) {
      std::vector<uint8_t> buffer(expected);
      receiver_status = transport.Exchange({}, {{1, buffer.data(), expected, 5}}, kExchangeTimeout);
    } else {
      const std::vector<uint8_t> payload(sent, 'x');
      // The sender's own outcome is not specified; it must only come back.
      const Status ignored = transport.Exchange({{0, payload.data(), sent, 5}}, {}, milliseconds(3000));
      (void)ignored;
    }
  });
  return receiver_status;
}

TEST_P(UcxTransportTest, LargerMessageThanExpectedIsMismatchNamingPeerAndTag) {
  const Status status = ExchangeMismatchedSizes(100, 64);
  EXPECT_EQ(status.code(), Code::kMismatch) << status.message();
  EXPECT_TRUE(Contains(status, "rank 1 with tag 5")) << status.message();
}

TEST_P(UcxTransportTest, LargerRendezvousMessageThanExpectedIsMismatch) {
  const Status status = ExchangeMismatchedSizes(4 << 20, 1 << 20);
  EXPECT_EQ(status.code(), Code::kMismatch) << status.message();
  EXPECT_TRUE(Contains(status, "rank 1 with tag 5")) << status.message();
}

TEST_P(UcxTransportTest, SmallerMessageThanExpectedIsMismatchNamingTheSizes) {
  const Status status = ExchangeMismatchedSizes(32, 64);
  EXPECT_EQ(status.code(), Code::kMismatch) << status.message();
  EXPECT_TRUE(Contains(status, "received 32 bytes, expected 64")) << status.message();
}

TEST(UcxTransportValidationTest, UnusableUcxIsUnsupportedOnEveryRank) {
  ScopedEnv transports("UCX_TLS", "no_such_transport");
  const int port = PickFreePort();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([=] {
      Result<std::unique_ptr<TcpStore>> store = ConnectStore(r, 2, port);
      ASSERT_TRUE(store.ok()) << store.status().message();
      Result<std::unique_ptr<Transport>> transport = MakeUcxTransport(**store, LoopbackJob());
      EXPECT_EQ(transport.status().code(), Code::kUnsupported) << transport.status().message();
      EXPECT_TRUE(Contains(transport.status(), "UCX is unavailable")) << transport.status().message();
    });
  }
  for (std::thread& thread : threads) thread.join();
}

TEST(UcxTransportValidationTest, TagWiderThan46BitsIsInvalidArgument) {
  RunRanks(1, [](Transport& transport, TcpStore&) {
    uint8_t byte = 0;
    const Status status = transport.Exchange({{0, &byte, 1, kMaxTransferTag + 1}}, {}, kExchangeTimeout);
    EXPECT_EQ(status.code(), Code::kInvalidArgument) << status.message();
    EXPECT_TRUE(Contains(status, "46 bits")) << status.message();
  });
}

TEST(UcxTransportValidationTest, PeerOutsideTheWorldIsInvalidArgument) {
  RunRanks(1, [](Transport& transport, TcpStore&) {
    uint8_t byte = 0;
    const Status status = transport.Exchange({}, {{3, &byte, 1, 0}}, kExchangeTimeout);
    EXPECT_EQ(status.code(), Code::kInvalidArgument) << status.message();
    EXPECT_TRUE(Contains(status, "rank 3")) << status.message();
  });
}

TEST(UcxTransportValidationTest, MissingBufferIsInvalidArgument) {
  RunRanks(1, [](Transport& transport, TcpStore&) {
    const Status status = transport.Exchange({{0, nullptr, 8, 1}}, {}, kExchangeTimeout);
    EXPECT_EQ(status.code(), Code::kInvalidArgument) << status.message();
  });
}

TEST_P(UcxTransportTest, ReceiveFromPeerThatNeverSendsTimesOutNamingIt) {
  RunRanks(2, [](Transport& transport, TcpStore& store) {
    if (store.rank() == 0) {
      std::vector<uint8_t> buffer(16);
      const Clock::time_point start = Clock::now();
      const Status status = transport.Exchange({}, {{1, buffer.data(), 16, 9}}, milliseconds(300));
      EXPECT_EQ(status.code(), Code::kTimeout) << status.message();
      EXPECT_TRUE(Contains(status, "rank 1 (1 receives, 0 sends)")) << status.message();
      EXPECT_LT(Clock::now() - start, milliseconds(2000));
    }
    ASSERT_TRUE(store.Barrier().ok());
  });
}

TEST_P(UcxTransportTest, StalledRendezvousSendTimesOutAndReleasesTheBuffer) {
  RunRanks(2, [](Transport& transport, TcpStore& store) {
    if (store.rank() == 0) {
      const std::vector<uint8_t> payload(8 << 20, 'p');
      const Clock::time_point start = Clock::now();
      const Status status = transport.Exchange({{1, payload.data(), payload.size(), 3}}, {}, milliseconds(300));
      EXPECT_EQ(status.code(), Code::kTimeout) << status.message();
      EXPECT_TRUE(Contains(status, "rank 1 (0 receives, 1 sends)")) << status.message();
      // Well under the cancellation grace: closing the endpoint gave the send back at once.
      EXPECT_LT(Clock::now() - start, milliseconds(1500));
    }
    ASSERT_TRUE(store.Barrier().ok());
  });
}

// Ranks of one host pull large transfers from the sender's memory. A receive posted only after its sender gave up
// must fail, naming the sender, rather than deliver bytes the sender no longer vouches for.
TEST(UcxTransportPullTest, ReceiveOfAPulledSendTheSenderGaveUpOnFailsNamingIt) {
  ScopedEnv transports("UCX_TLS", nullptr);
  RunRanks(2, [](Transport& transport, TcpStore& store) {
    const std::vector<uint8_t> payload(8 << 20, 'p');
    if (store.rank() == 0) {
      const Status status = transport.Exchange({{1, payload.data(), payload.size(), 3}}, {}, milliseconds(300));
      EXPECT_EQ(status.code(), Code::kTimeout) << status.message();
      EXPECT_TRUE(Contains(status, "rank 1 (0 receives, 1 sends)")) << status.message();
    }
    ASSERT_TRUE(store.Barrier().ok());
    if (store.rank() == 1) {
      std::vector<uint8_t> buffer(payload.size());
      const Status status = transport.Exchange({}, {{0, buffer.data(), buffer.size(), 3}}, milliseconds(2000));
      EXPECT_EQ(status.code(), Code::kPeerFailed) << status.message();
      EXPECT_TRUE(Contains(status, "rank 0 withdrew its 8388608 bytes")) << status.message();
    }
    ASSERT_TRUE(store.Barrier().ok());
  });
}

// The same with a send scattered over runs, whose list the receiver reads from the sender's memory: once the sender
// gave up, the list and the runs are no longer vouched for, and the receive fails naming the sender.
TEST(UcxTransportPullTest, ReceiveOfAScatteredPulledSendTheSenderGaveUpOnFailsNamingIt) {
  ScopedEnv transports("UCX_TLS", nullptr);
  RunRanks(2, [](Transport& transport, TcpStore& store) {
    std::vector<uint8_t> payload(8 << 20, 'p');
    std::vector<MemoryRun> runs;
    for (uint64_t at = 0; at < payload.size(); at += 4096) runs.push_back({payload.data() + at, 4096});
    if (store.rank() == 0) {
      const Status status = transport.Exchange({{1, payload.data(), payload.size(), 3, runs}}, {}, milliseconds(300));
      EXPECT_EQ(status.code(), Code::kTimeout) << status.message();
    }
    ASSERT_TRUE(store.Barrier().ok());
    if (store.rank() == 1) {
      std::vector<uint8_t> buffer(payload.size());
      const Status status = transport.Exchange({}, {{0, buffer.data(), buffer.size(), 3}}, milliseconds(2000));
      EXPECT_EQ(status.code(), Code::kPeerFailed) << status.message();
      EXPECT_TRUE(Contains(status, "rank 0")) << status.message();
    }
    ASSERT_TRUE(store.Barrier().ok());
  });
}

TEST(UcxTransportPullTest, SmallerPulledMessageThanExpectedIsMismatchNamingTheSizes) {
  ScopedEnv transports("UCX_TLS", nullptr);
  const Status status = ExchangeMismatchedSizes(1 << 20, 4 << 20);
  EXPECT_EQ(status.code(), Code::kMismatch) << status.message();
  EXPECT_TRUE(Contains(status, "rank 1 with tag 5: the peer sent 1048576 bytes, expected 4194304")) << status.message();
}

TEST_P(UcxTransportTest, PeerThatTimedOutFailsLaterExchanges) {
  RunRanks(2, [](Transport& transport, TcpStore& store) {
    if (store.rank() == 0) {
      uint8_t byte = 0;
      EXPECT_EQ(transport.Exchange({}, {{1, &byte, 1, 1}}, milliseconds(100)).code(), Code::kTimeout);
      const Status later = transport.Exchange({{1, &byte, 1, 2}}, {}, kExchangeTimeout);
      EXPECT_EQ(later.code(), Code::kPeerFailed) << later.message();
      EXPECT_TRUE(Contains(later, "rank 1 failed in an earlier exchange")) << later.message();
    }
    ASSERT_TRUE(store.Barrier().ok());
  });
}

// Forks a child that joins as rank 1 of 2, waits `linger`, then exits without a goodbye, the way a crashed rank
// would. Fork before this process starts any thread.
pid_t ForkRankThatDies(int port, milliseconds linger) {
  const pid_t child = fork();
  if (child == 0) {
    Result<std::unique_ptr<TcpStore>> store = ConnectStore(1, 2, port);
    const bool joined = store.ok() && MakeUcxTransport(**store, LoopbackJob()).ok();
    std::this_thread::sleep_for(linger);
    _exit(joined ? 0 : 1);
  }
  return child;
}

bool ExitedCleanly(int wait_status) { return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0; }

// Rank 0's receive from the dead rank 1 must fail, naming it, well before the exchange's own timeout.
void ExpectReceiveFromDeadRankFailsQuickly(Transport& transport) {
  std::vector<uint8_t> buffer(1024);
  const Clock::time_point start = Clock::now();
  const Status status = transport.Exchange({}, {{1, buffer.data(), buffer.size(), 1}}, kExchangeTimeout);
  EXPECT_EQ(status.code(), Code::kPeerFailed) << status.message();
  EXPECT_TRUE(Contains(status, "rank 1")) << status.message();
  EXPECT_LT(Clock::now() - start, milliseconds(5000)) << status.message();
}

TEST_P(UcxTransportTest, PeerThatDiedBeforeTheExchangeFailsIt) {
  const int port = PickFreePort();
  const pid_t child = ForkRankThatDies(port, milliseconds(0));
  ASSERT_GE(child, 0);
  Result<std::unique_ptr<TcpStore>> store = ConnectStore(0, 2, port);
  ASSERT_TRUE(store.ok()) << store.status().message();
  Result<std::unique_ptr<Transport>> transport = MakeUcxTransport(**store, LoopbackJob());
  ASSERT_TRUE(transport.ok()) << transport.status().message();
  int child_status = 0;
  ASSERT_EQ(waitpid(child, &child_status, 0), child);
  ASSERT_TRUE(ExitedCleanly(child_status)) << "the child failed to join";
  ExpectReceiveFromDeadRankFailsQuickly(**transport);
}

TEST_P(UcxTransportTest, PeerDyingDuringTheExchangeFailsIt) {
  const int port = PickFreePort();
  const pid_t child = ForkRankThatDies(port, milliseconds(300));
  ASSERT_GE(child, 0);
  // Reaps the child as soon as it dies, as its launcher would: UCX takes a zombie for a live process.
  int child_status = 0;
  std::thread reaper([&] { EXPECT_EQ(waitpid(child, &child_status, 0), child); });
  Result<std::unique_ptr<TcpStore>> store = ConnectStore(0, 2, port);
  Result<std::unique_ptr<Transport>> transport =
      store.ok() ? MakeUcxTransport(**store, LoopbackJob()) : Result<std::unique_ptr<Transport>>(store.status());
  if (transport.ok()) ExpectReceiveFromDeadRankFailsQuickly(**transport);
  reaper.join();
  ASSERT_TRUE(transport.ok()) << transport.status().message();
  EXPECT_TRUE(ExitedCleanly(child_status)) << "the child failed to join";
}

// The sockets this process holds open.
int OpenSockets() {
  int sockets = 0;
  for (const std::filesystem::directory_entry& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::filesystem::path target = std::filesystem::read_symlink(entry.path(), error);
    if (!error && target.string().rfind("socket:", 0) == 0) ++sockets;
  }
  return sockets;
}

// Over TCP an endpoint is a socket: a rank of a large job holds them to the ranks it exchanges with, not to the whole
// world. The ranks here are threads of one process, so the process's sockets are every rank's.
TEST(UcxTransportSetupTest, ARankConnectsToAPeerAtItsFirstExchangeWithItOnly) {
  ScopedEnv tcp("UCX_TLS", "tcp,self");
  constexpr int kWorld = 8;
  std::vector<int> counts;  // the process's sockets at each barrier, counted by rank 0
  RunRanks(kWorld, [&](Transport& transport, TcpStore& store) {
    const int rank = store.rank();
    auto count = [&] {
      ASSERT_TRUE(store.Barrier().ok());
      if (rank == 0) counts.push_back(OpenSockets());
      ASSERT_TRUE(store.Barrier().ok());
    };
    count();
    const std::vector<int> ring = {(rank + 1) % kWorld, (rank + kWorld - 1) % kWorld};
    ExchangeWithPeers(transport, rank, ring, {64});
    count();
    ExchangeWithPeers(transport, rank, ring, {64, 1 << 20});
    count();
    ExchangeWithPeers(transport, rank, OtherRanks(rank, kWorld), {64});
    count();
  });
  ASSERT_EQ(counts.size(), 4u);
  // The ring's 8 pairs: one connection each (UCX joins the two endpoints of a pair), both ends in this process.
  EXPECT_GT(counts[1], counts[0]) << "the ranks were connected before they exchanged";
  EXPECT_LE(counts[1] - counts[0], 2 * kWorld);
  EXPECT_EQ(counts[2], counts[1]) << "a second exchange between the same ranks opened sockets";
  EXPECT_GT(counts[3], counts[2]) << "exchanging with every rank opened no socket to the ranks not yet met";
}

ucs_status_t RefusedEndpoint(ucp_worker_h, const ucp_ep_params_t*, ucp_ep_h*) { return UCS_ERR_UNREACHABLE; }

// An endpoint is made at the first exchange with a peer: UCX refusing it fails that exchange, and every later one with
// that peer, naming the peer and UCX's reason, instead of sending into nothing.
TEST(UcxTransportSetupTest, AnEndpointUcxRefusesAtTheFirstExchangeFailsItNamingThePeer) {
  ScopedEnv tcp("UCX_TLS", "tcp,self");
  Result<const UcxApi*> real = LoadUcx();
  ASSERT_TRUE(real.ok()) << real.status().message();
  UcxApi refusing = *real.value();
  refusing.ep_create = RefusedEndpoint;
  UcxTransportOptions options = LoopbackJob();
  options.ucx = &refusing;
  RunRanksOwningTransports(
      2,
      [](std::unique_ptr<Transport> transport, TcpStore& store) {
        const int peer = 1 - store.rank();
        const std::vector<uint8_t> payload(64, 7);
        for (int attempt = 0; attempt < 2; ++attempt) {
          const Status status = transport->Exchange({{peer, payload.data(), payload.size(), 0}}, {}, kExchangeTimeout);
          EXPECT_EQ(status.code(), Code::kPeerFailed) << status.message();
          EXPECT_TRUE(Contains(status, "rank " + std::to_string(peer))) << status.message();
          EXPECT_TRUE(Contains(status, "creating a UCX endpoint to it failed")) << status.message();
        }
        ASSERT_TRUE(store.Barrier().ok());
      },
      [&](int) { return options; });
}

TEST_P(UcxTransportTest, MessagesFromAPeerThatAlreadyLeftAreReceived) {
  constexpr uint64_t kSize = 100;
  RunRanksOwningTransports(2, [&](std::unique_ptr<Transport> transport, TcpStore& store) {
    if (store.rank() == 1) {
      const std::vector<uint8_t> payload = Pattern(1, 4, kSize);
      ASSERT_TRUE(transport->Exchange({{0, payload.data(), kSize, 4}}, {}, kExchangeTimeout).ok());
      transport.reset();
      ASSERT_TRUE(store.Barrier().ok());  // rank 1 has sent and left
      return;
    }
    ASSERT_TRUE(store.Barrier().ok());
    // Gives rank 0's background progress time to take in the message and, over TCP, the disconnection.
    std::this_thread::sleep_for(milliseconds(200));
    std::vector<uint8_t> buffer(kSize);
    const Status status = transport->Exchange({}, {{1, buffer.data(), kSize, 4}}, kExchangeTimeout);
    EXPECT_TRUE(status.ok()) << status.message();
    EXPECT_TRUE(buffer == Pattern(1, 4, kSize));
  });
}

}  // namespace
}  // namespace ckpt::coll

namespace ckpt::coll {
namespace {

std::vector<std::string> SortedEnvironment() {
  std::vector<std::string> variables;
  for (char** variable = environ; *variable != nullptr; ++variable) variables.emplace_back(*variable);
  std::sort(variables.begin(), variables.end());
  return variables;
}

TEST(UcxTransportSetupTest, UcxTlsDecidesWhetherRanksOfAHostReadEachOthersMemory) {
  const std::vector<std::pair<const char*, bool>> cases = {
      {nullptr, true},     {"cma,tcp,self", true}, {"sm,self", true}, {"all", true},      {"^tcp", true},
      {"tcp,self", false}, {"posix,self", false},  {"^cma", false},   {"^tcp,cma", false}};
  for (const auto& [tls, allowed] : cases) {
    ScopedEnv transports("UCX_TLS", tls);
    EXPECT_EQ(CrossMemoryAllowed(), allowed) << (tls == nullptr ? "unset" : tls);
  }
}

// The environment is the user's program's, shared with its other libraries and threads: UCX's settings go into
// UCX's own configuration objects instead.
TEST(UcxTransportSetupTest, CreatingTransportsLeavesTheEnvironmentUnchanged) {
  const std::vector<std::string> before = SortedEnvironment();
  RunRanks(2, [](Transport& transport, TcpStore& store) {
    ExchangeWithPeers(transport, store.rank(), OtherRanks(store.rank(), 2), {64});
    ASSERT_TRUE(store.Barrier().ok());
  });
  const std::vector<std::string> after = SortedEnvironment();
  std::vector<std::string> changed;
  std::set_symmetric_difference(before.begin(), before.end(), after.begin(), after.end(), std::back_inserter(changed));
  std::string listed;
  for (const std::string& variable : changed) listed += " " + variable;
  EXPECT_TRUE(changed.empty()) << "set or unset:" << listed;
}

// Peer error handling turns shared memory off unless the configuration turns its error handling on: with no other
// transport allowed, ranks reach each other only if that setting reached UCX.
TEST(UcxTransportSetupTest, SharedMemoryAloneCarriesExchangesUnderPeerErrorHandling) {
  for (const char* transports : {"posix,self", "sysv,self"}) {
    SCOPED_TRACE(transports);
    ScopedEnv only("UCX_TLS", transports);
    RunRanks(2, [](Transport& transport, TcpStore& store) {
      ExchangeWithPeers(transport, store.rank(), OtherRanks(store.rank(), 2), {1, 65536, 4 << 20});
      ASSERT_TRUE(store.Barrier().ok());
    });
  }
}

// "0100007F:1F90" (/proc/net/tcp) or 32 hex digits and a port (/proc/net/tcp6): the kernel prints each 32-bit word
// of the address in host order.
bool IsLoopback(const std::string& address_and_port) {
  const std::string hex = address_and_port.substr(0, address_and_port.find(':'));
  if (hex.size() == 8) {
    in_addr address = {static_cast<in_addr_t>(std::stoul(hex, nullptr, 16))};
    return (ntohl(address.s_addr) >> 24) == 127;
  }
  in6_addr address = {};
  for (int word = 0; word < 4; ++word) {
    const uint32_t value = static_cast<uint32_t>(std::stoul(hex.substr(8 * word, 8), nullptr, 16));
    std::memcpy(address.s6_addr + 4 * word, &value, sizeof value);
  }
  if (IN6_IS_ADDR_V4MAPPED(&address)) return address.s6_addr[12] == 127;
  return IN6_IS_ADDR_LOOPBACK(&address);
}

// This process's listening TCP sockets: their local addresses (as /proc/net/tcp* prints them) by socket inode.
std::map<std::string, std::string> ListeningSockets() {
  std::set<std::string> inodes;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(fd.path(), error).string();
    if (!error && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::map<std::string, std::string> listening;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream rows(table);
    std::string row;
    std::getline(rows, row);  // the header
    while (std::getline(rows, row)) {
      std::istringstream fields(row);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeouts, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeouts >> inode;
      if (state == "0A" && inodes.count(inode) > 0) listening[inode] = local;
    }
  }
  return listening;
}

// An IPv4 address of this host's first interface besides loopback; empty if it has none.
std::string NonLoopbackAddress() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (const ifaddrs* entry = list; entry != nullptr && found.empty(); entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET || (entry->ifa_flags & IFF_LOOPBACK)) {
      continue;
    }
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(entry->ifa_addr)->sin_addr, text, sizeof text);
    found = text;
  }
  freeifaddrs(list);
  return found;
}

// A job whose store is 127.0.0.1 runs on one host: UCX must not open a port to the network.
TEST(UcxTransportSetupTest, JobOnLoopbackListensOnLoopbackOnly) {
  if (NonLoopbackAddress().empty()) GTEST_SKIP() << "this host has no network interface besides loopback to avoid";
  ScopedEnv tcp("UCX_TLS", "tcp,self");
  const std::map<std::string, std::string> before = ListeningSockets();
  RunRanks(2, [&](Transport& transport, TcpStore& store) {
    ExchangeWithPeers(transport, store.rank(), OtherRanks(store.rank(), 2), {64});
    ASSERT_TRUE(store.Barrier().ok());
    if (store.rank() == 0) {
      int opened = 0;
      for (const auto& [inode, address] : ListeningSockets()) {
        if (before.count(inode) > 0) continue;
        ++opened;
        EXPECT_TRUE(IsLoopback(address)) << "a transport listens on " << address << " (/proc/net/tcp notation)";
      }
      EXPECT_GT(opened, 0) << "UCX's TCP transport opened no listening socket to check";
    }
    ASSERT_TRUE(store.Barrier().ok());
  });
}

// As across hosts: the store's host reaches the store over loopback, the others over the network. The store's host
// must then keep the interfaces the others reach it through.
TEST(UcxTransportSetupTest, RanksReachingTheStoreOverLoopbackAndNetworkStillConnect) {
  const std::string network_address = NonLoopbackAddress();
  if (network_address.empty()) GTEST_SKIP() << "this host has no network interface besides loopback";
  ScopedEnv tcp("UCX_TLS", "tcp,self");
  RunRanksOwningTransports(
      2,
      [](std::unique_ptr<Transport> transport, TcpStore& store) {
        ExchangeWithPeers(*transport, store.rank(), OtherRanks(store.rank(), 2), {64, 1 << 20});
        ASSERT_TRUE(store.Barrier().ok());
      },
      [&](int rank) {
        UcxTransportOptions options = LoopbackJob();
        if (rank == 1) options.job_host = network_address;
        return options;
      });
}

TEST(UcxTransportSetupTest, InterfaceReachingLoopbackIsLo) {
  Result<NetworkInterface> interface = InterfaceReaching("127.0.0.1");
  ASSERT_TRUE(interface.ok()) << interface.status().message();
  EXPECT_EQ(interface.value().name, "lo");
  EXPECT_TRUE(interface.value().loopback);
}

TEST(UcxTransportSetupTest, InterfaceReachingAnUnknownHostIsNotFound) {
  EXPECT_EQ(InterfaceReaching("no-such-host.invalid").status().code(), Code::kNotFound);
}

unsigned (*real_progress)(ucp_worker_h) = nullptr;

unsigned ProgressThatFailsOffRankThreads(ucp_worker_h worker) {
  if (!on_rank_thread) throw std::runtime_error("injected progress failure");
  return real_progress(worker);
}

// An exception leaving the background progress thread would end the process (std::terminate).
TEST(UcxTransportSetupTest, FailingBackgroundProgressFailsLaterExchangesNotTheProcess) {
  Result<const UcxApi*> real = LoadUcx();
  ASSERT_TRUE(real.ok()) << real.status().message();
  UcxApi failing = *real.value();
  real_progress = failing.worker_progress;
  failing.worker_progress = ProgressThatFailsOffRankThreads;
  UcxTransportOptions options = LoopbackJob();
  options.ucx = &failing;
  RunRanksOwningTransports(
      2,
      [](std::unique_ptr<Transport> transport, TcpStore& store) {
        // The thread fails at its first progress call, which an exchange may precede.
        const Clock::time_point deadline = Clock::now() + kExchangeTimeout;
        Status status;
        while ((status = transport->Exchange({}, {}, kExchangeTimeout)).ok() && Clock::now() < deadline) {
          std::this_thread::sleep_for(milliseconds(10));
        }
        EXPECT_EQ(status.code(), Code::kInternal) << status.message();
        EXPECT_TRUE(Contains(status, "injected progress failure")) << status.message();
        ASSERT_TRUE(store.Barrier().ok());
      },
      [&](int) { return options; });
}

void CancelThatDoesNothing(ucp_worker_h, void*) {}

// UCX may keep a request it was asked to cancel (here: it ignores every cancel). The exchange gives the request's
// buffer back to its caller when it fails, so the transport must then never progress the worker again: a message
// that arrives later would land in memory the caller has reused. Later exchanges fail, saying why.
TEST(UcxTransportSetupTest, ARequestUcxKeepsAfterCancellingItStopsTheTransportBeforeAnythingLandsInItsBuffer) {
  Result<const UcxApi*> real = LoadUcx();
  ASSERT_TRUE(real.ok()) << real.status().message();
  UcxApi keeping = *real.value();
  keeping.request_cancel = CancelThatDoesNothing;
  UcxTransportOptions options = LoopbackJob();
  options.ucx = &keeping;
  constexpr uint64_t kSize = 100;
  RunRanksOwningTransports(
      2,
      [&](std::unique_ptr<Transport> transport, TcpStore& store) {
        std::vector<uint8_t> buffer(kSize, 0xee);
        if (store.rank() == 0) {
          const Status status = transport->Exchange({}, {{1, buffer.data(), kSize, 6}}, milliseconds(100));
          EXPECT_EQ(status.code(), Code::kTimeout) << status.message();
          EXPECT_TRUE(Contains(status, "UCX kept 1 request to or from rank 1 after cancelling it")) << status.message();
        }
        ASSERT_TRUE(store.Barrier().ok());
        if (store.rank() == 1) {
          const std::vector<uint8_t> payload = Pattern(1, 6, kSize);
          EXPECT_TRUE(transport->Exchange({{0, payload.data(), kSize, 6}}, {}, kExchangeTimeout).ok());
        }
        ASSERT_TRUE(store.Barrier().ok());
        if (store.rank() == 0) {
          // Long enough for background progress to have taken in the message, had the transport kept progressing.
          std::this_thread::sleep_for(milliseconds(500));
          EXPECT_TRUE(buffer == std::vector<uint8_t>(kSize, 0xee)) << "the late message landed in the buffer";
          const Status later = transport->Exchange({}, {}, kExchangeTimeout);
          EXPECT_EQ(later.code(), Code::kPeerFailed) << later.message();
          EXPECT_TRUE(Contains(later, "the UCX transport stopped")) << later.message();
        }
        ASSERT_TRUE(store.Barrier().ok());
      },
      [&](int) { return options; });
}

}  // namespace
}  // namespace ckpt::coll

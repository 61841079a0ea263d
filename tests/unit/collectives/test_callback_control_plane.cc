// ctest-labels: threaded
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/control/control_plane.h"

namespace ckpt::coll {
namespace {

// An in-process allgather of equal-sized blocks among `world` threads, standing in for MPI_Allgather.
class FakeAllGather {
 public:
  explicit FakeAllGather(int world) : world_(world), blocks_(world) {}

  int32_t Call(int rank, const void* send, uint64_t size, void* recv) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !draining_; });
    const uint64_t generation = generation_;
    blocks_[rank].assign(static_cast<const char*>(send), size);
    if (rank == 0) sizes_seen_.push_back(size);
    if (++arrived_ == world_) {
      draining_ = true;
      cv_.notify_all();
    }
    cv_.wait(lock, [&] { return draining_ && generation_ == generation; });
    int32_t rc = 0;
    for (int r = 0; r < world_; ++r) {
      if (blocks_[r].size() != size) rc = -1;  // a real allgather would corrupt memory here
      if (rc == 0) std::memcpy(static_cast<char*>(recv) + r * size, blocks_[r].data(), size);
    }
    if (++departed_ == world_) {
      arrived_ = departed_ = 0;
      draining_ = false;
      ++generation_;
      cv_.notify_all();
    }
    return rc;
  }

  AllGatherCallback For(int rank) {
    return [this, rank](const void* send, uint64_t size, void* recv) { return Call(rank, send, size, recv); };
  }

  std::vector<uint64_t> sizes_seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return sizes_seen_;
  }

 private:
  const int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> blocks_;
  int arrived_ = 0;
  int departed_ = 0;
  bool draining_ = false;
  uint64_t generation_ = 0;
  std::vector<uint64_t> sizes_seen_;
};

constexpr int kWorld = 3;

// Runs `body` on kWorld threads, each with a callback control plane over one shared fake allgather.
void RunRanks(FakeAllGather* fake, const std::function<void(ControlPlane&)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([fake, r, &body] {
      std::unique_ptr<ControlPlane> plane = MakeCallbackControlPlane(r, kWorld, fake->For(r));
      body(*plane);
    });
  }
  for (auto& t : threads) t.join();
}

std::string ContributionOf(int rank, int round) {
  return std::string(static_cast<size_t>(rank) * 7, static_cast<char>('a' + rank)) + "#" + std::to_string(round);
}

TEST(CallbackControlPlaneTest, GathersDifferentSizedContributionsByRank) {
  FakeAllGather fake(kWorld);
  RunRanks(&fake, [](ControlPlane& plane) {
    const std::string mine(static_cast<size_t>(plane.rank()) * 100, static_cast<char>('x' + plane.rank()));
    Result<std::vector<std::string>> gathered = plane.AllGather(mine);
    ASSERT_TRUE(gathered.ok()) << gathered.status().message();
    ASSERT_EQ(gathered->size(), static_cast<size_t>(kWorld));
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_EQ((*gathered)[r], std::string(static_cast<size_t>(r) * 100, static_cast<char>('x' + r)));
    }
  });
}

TEST(CallbackControlPlaneTest, GathersSizesFirstThenBlocksPaddedToTheLargest) {
  FakeAllGather fake(kWorld);
  RunRanks(&fake, [](ControlPlane& plane) {
    ASSERT_TRUE(plane.AllGather(std::string(plane.rank() == 1 ? 50 : 3, 'z')).ok());
  });
  EXPECT_EQ(fake.sizes_seen(), (std::vector<uint64_t>{sizeof(uint64_t), 50}));
}

TEST(CallbackControlPlaneTest, AllEmptyContributionsNeedOnlyTheSizeExchange) {
  FakeAllGather fake(kWorld);
  RunRanks(&fake, [](ControlPlane& plane) { ASSERT_TRUE(plane.Barrier().ok()); });
  EXPECT_EQ(fake.sizes_seen(), (std::vector<uint64_t>{sizeof(uint64_t)}));
}

TEST(CallbackControlPlaneTest, RepeatedAllGathersKeepTheirOrder) {
  FakeAllGather fake(kWorld);
  RunRanks(&fake, [](ControlPlane& plane) {
    for (int round = 0; round < 20; ++round) {
      Result<std::vector<std::string>> gathered = plane.AllGather(ContributionOf(plane.rank(), round));
      ASSERT_TRUE(gathered.ok()) << gathered.status().message();
      for (int r = 0; r < kWorld; ++r) EXPECT_EQ((*gathered)[r], ContributionOf(r, round));
    }
  });
}

TEST(CallbackControlPlaneTest, CallbackFailureIsPeerFailedWithItsCode) {
  auto plane = MakeCallbackControlPlane(0, 1, [](const void*, uint64_t, void*) { return 7; });
  Result<std::vector<std::string>> gathered = plane->AllGather("x");
  EXPECT_EQ(gathered.status().code(), Code::kPeerFailed);
  EXPECT_EQ(gathered.status().message(), "user allgather callback failed with 7");
}

TEST(CallbackControlPlaneTest, CallbackThatMisreportsOwnSizeIsCorrupt) {
  auto plane = MakeCallbackControlPlane(0, 1, [](const void*, uint64_t size, void* recv) {
    std::memset(recv, 0xff, size);
    return 0;
  });
  EXPECT_EQ(plane->AllGather("x").status().code(), Code::kCorrupt);
}

TEST(CallbackControlPlaneTest, MissingCallbackIsInvalidArgument) {
  auto plane = MakeCallbackControlPlane(0, 1, nullptr);
  EXPECT_EQ(plane->AllGather("x").status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace ckpt::coll

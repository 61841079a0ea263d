// ctest-labels: threaded
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "io/staging_arena.h"

namespace ckpt::io {
namespace {

using std::chrono::milliseconds;

constexpr uint64_t kMiB = 1ull << 20;

std::unique_ptr<StagingArena> MakeArena(uint64_t capacity = kMinArenaBytes) {
  Result<std::unique_ptr<StagingArena>> arena = StagingArena::Create(capacity);
  EXPECT_TRUE(arena.ok()) << arena.status().message();
  return arena.ok() ? std::move(arena).value() : nullptr;
}

ArenaRegion MustAllocate(StagingArena& arena, uint64_t size) {
  Result<ArenaRegion> region = arena.Allocate(size, milliseconds(0));
  EXPECT_TRUE(region.ok()) << region.status().message();
  return region.ok() ? region.value() : ArenaRegion{};
}

TEST(StagingArenaTest, CapacityIsRoundedUpToTwoMiB) {
  auto arena = MakeArena(kMinArenaBytes + 1);
  ASSERT_NE(arena, nullptr);
  EXPECT_EQ(arena->capacity(), kMinArenaBytes + 2 * kMiB);
}

TEST(StagingArenaTest, CapacityBelowMinimumIsRefused) {
  Result<std::unique_ptr<StagingArena>> arena = StagingArena::Create(kMinArenaBytes - 1);
  ASSERT_FALSE(arena.ok());
  EXPECT_EQ(arena.status().code(), Code::kInvalidArgument);
}

TEST(StagingArenaTest, RegionsAreAlignedAndRoundedUp) {
  auto arena = MakeArena();
  ASSERT_NE(arena, nullptr);
  const ArenaRegion first = MustAllocate(*arena, 1);
  const ArenaRegion second = MustAllocate(*arena, 5000);
  EXPECT_EQ(first.offset % kArenaAlignment, 0u);
  EXPECT_EQ(second.offset % kArenaAlignment, 0u);
  EXPECT_EQ(first.size, kArenaAlignment);
  EXPECT_EQ(second.size, 2 * kArenaAlignment);
  EXPECT_GE(second.offset, first.offset + first.size);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(arena->data()) % kArenaAlignment, 0u);
  EXPECT_EQ(arena->bytes_in_use(), 3 * kArenaAlignment);
}

TEST(StagingArenaTest, ReleasedRegionIsReused) {
  auto arena = MakeArena();
  ASSERT_NE(arena, nullptr);
  const ArenaRegion first = MustAllocate(*arena, kMiB);
  arena->Release(first);
  EXPECT_EQ(arena->bytes_in_use(), 0u);
  const ArenaRegion again = MustAllocate(*arena, kMiB);
  EXPECT_EQ(again.offset, first.offset);
}

TEST(StagingArenaTest, ReleaseCoalescesNeighboursIntoOneRange) {
  auto arena = MakeArena();
  ASSERT_NE(arena, nullptr);
  const uint64_t quarter = arena->capacity() / 4;
  ArenaRegion parts[4];
  for (ArenaRegion& part : parts) part = MustAllocate(*arena, quarter);
  // Release out of order so that a range is joined to a free neighbour on each side.
  arena->Release(parts[1]);
  arena->Release(parts[3]);
  arena->Release(parts[0]);
  arena->Release(parts[2]);
  const ArenaRegion whole = MustAllocate(*arena, arena->capacity());
  EXPECT_EQ(whole.offset, 0u);
  EXPECT_EQ(whole.size, arena->capacity());
}

TEST(StagingArenaTest, AllocationWaitsForReleaseFromAnotherThread) {
  auto arena = MakeArena();
  ASSERT_NE(arena, nullptr);
  const ArenaRegion everything = MustAllocate(*arena, arena->capacity());
  std::thread releaser([&] {
    std::this_thread::sleep_for(milliseconds(50));
    arena->Release(everything);
  });
  const auto start = std::chrono::steady_clock::now();
  Result<ArenaRegion> waited = arena->Allocate(kMiB, milliseconds(10000));
  const auto waited_for = std::chrono::steady_clock::now() - start;
  releaser.join();
  ASSERT_TRUE(waited.ok()) << waited.status().message();
  EXPECT_GE(waited_for, milliseconds(40));
  EXPECT_EQ(arena->bytes_in_use(), kMiB);
}

TEST(StagingArenaTest, AllocationTimesOutWhenNothingIsReleased) {
  auto arena = MakeArena();
  ASSERT_NE(arena, nullptr);
  MustAllocate(*arena, arena->capacity());
  Result<ArenaRegion> region = arena->Allocate(kArenaAlignment, milliseconds(20));
  ASSERT_FALSE(region.ok());
  EXPECT_EQ(region.status().code(), Code::kTimeout);
}

TEST(StagingArenaTest, AllocateOrFinishFinishesTheCallersOldestWorkWhenFull) {
  auto arena = MakeArena();
  ASSERT_NE(arena, nullptr);
  const uint64_t half = arena->capacity() / 2;
  std::vector<ArenaRegion> in_flight = {MustAllocate(*arena, half), MustAllocate(*arena, half)};
  int finished = 0;
  Result<ArenaRegion> region = arena->AllocateOrFinish(half, milliseconds(0), [&] {
    if (in_flight.empty()) return false;
    arena->Release(in_flight.front());
    in_flight.erase(in_flight.begin());
    ++finished;
    return true;
  });
  ASSERT_TRUE(region.ok()) << region.status().message();
  EXPECT_EQ(finished, 1) << "only as much of the caller's work as needed is finished";
}

TEST(StagingArenaTest, AllocateOrFinishWaitsForOthersOnceTheCallerHasNothingInFlight) {
  auto arena = MakeArena();
  ASSERT_NE(arena, nullptr);
  const ArenaRegion held_by_someone_else = MustAllocate(*arena, arena->capacity());
  int asked = 0;
  Result<ArenaRegion> region = arena->AllocateOrFinish(kArenaAlignment, milliseconds(50), [&] {
    ++asked;
    return false;
  });
  EXPECT_EQ(region.status().code(), Code::kTimeout);
  EXPECT_EQ(asked, 1);
  arena->Release(held_by_someone_else);
}

TEST(StagingArenaTest, RequestLargerThanCapacityIsRefusedAtOnce) {
  auto arena = MakeArena();
  ASSERT_NE(arena, nullptr);
  const auto start = std::chrono::steady_clock::now();
  Result<ArenaRegion> region = arena->Allocate(arena->capacity() + 1, milliseconds(10000));
  ASSERT_FALSE(region.ok());
  EXPECT_EQ(region.status().code(), Code::kInvalidArgument);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1000));
}

TEST(StagingArenaTest, SecondMappingOfTheFdSharesTheBytes) {
  auto arena = MakeArena();
  ASSERT_NE(arena, nullptr);
  const ArenaRegion region = MustAllocate(*arena, 3 * kArenaAlignment);
  char* first = arena->data() + region.offset;
  for (uint64_t i = 0; i < region.size; ++i) first[i] = static_cast<char>(i * 7 + 3);

  void* mapped = mmap(nullptr, arena->capacity(), PROT_READ | PROT_WRITE, MAP_SHARED, arena->fd(), 0);
  ASSERT_NE(mapped, MAP_FAILED) << std::strerror(errno);
  char* second = static_cast<char*>(mapped) + region.offset;
  EXPECT_EQ(std::memcmp(first, second, region.size), 0);
  second[17] = 'x';
  EXPECT_EQ(first[17], 'x');
  munmap(mapped, arena->capacity());
}

TEST(StagingArenaTest, DefaultCapacityIsWithinItsBounds) {
  const uint64_t capacity = DefaultArenaCapacity();
  EXPECT_GE(capacity, 256 * kMiB);
  EXPECT_LE(capacity, 8192 * kMiB);
}

}  // namespace
}  // namespace ckpt::io

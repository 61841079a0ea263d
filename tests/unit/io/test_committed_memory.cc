// CommittedMemory: page-aligned anonymous memory whose pages are present from the start.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "io/committed_memory.h"

namespace ckpt::io {
namespace {

// Pages of [data, data + size) that are resident, as mincore reports them.
size_t ResidentPages(const char* data, size_t size) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((size + page - 1) / page);
  if (mincore(const_cast<char*>(data), size, resident.data()) != 0) return 0;
  size_t count = 0;
  for (unsigned char r : resident) count += r & 1;
  return count;
}

TEST(CommittedMemoryTest, EveryPageIsPresentZeroedAndAligned) {
  constexpr uint64_t kSize = 8ull << 20;
  Result<CommittedMemory> memory = CommittedMemory::Allocate(kSize);
  ASSERT_TRUE(memory.ok()) << memory.status().message();
  const char* data = memory->data();
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % static_cast<uintptr_t>(sysconf(_SC_PAGESIZE)), 0u);
  EXPECT_EQ(memory->size(), kSize);
  EXPECT_EQ(ResidentPages(data, kSize), kSize / static_cast<uint64_t>(sysconf(_SC_PAGESIZE)));
  for (uint64_t at = 0; at < kSize; at += 4096) ASSERT_EQ(data[at], 0) << at;
}

TEST(CommittedMemoryTest, MovingTransfersOwnershipAndEmptyIsNothing) {
  Result<CommittedMemory> memory = CommittedMemory::Allocate(1 << 20);
  ASSERT_TRUE(memory.ok());
  char* data = memory->data();
  data[100] = 7;
  CommittedMemory moved = std::move(memory).value();
  EXPECT_EQ(moved.data(), data);
  EXPECT_EQ(moved.data()[100], 7);
  moved = CommittedMemory();
  EXPECT_EQ(moved.data(), nullptr);
  EXPECT_EQ(moved.size(), 0u);
  Result<CommittedMemory> empty = CommittedMemory::Allocate(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->data(), nullptr);
}

}  // namespace
}  // namespace ckpt::io

// ChecksumUnit (runtime/save/save_units.h): a replica's block checksums, hashed where its bytes lie, equal those of
// the same bytes staged in row-major order, as the writer's copy is.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "io/checksum.h"
#include "runtime/save/save_units.h"

namespace ckpt::runtime::staging {
namespace {

TEST(ReplicaChecksumsTest, AColumnSlabIsHashedInRowMajorOrderWithoutACopy) {
  std::vector<float> buffer(8 * 6);
  std::iota(buffer.begin(), buffer.end(), 0.5f);
  Source source;
  source.base = reinterpret_cast<const char*>(buffer.data());
  source.src_box = Box{{0, 0}, {8, 6}};
  source.box = Box{{2, 1}, {5, 3}};
  source.element_size = sizeof(float);
  source.contiguous = false;
  std::vector<float> row_major;
  for (uint64_t row = 2; row < 7; ++row) {
    for (uint64_t column = 1; column < 4; ++column) row_major.push_back(buffer[row * 6 + column]);
  }
  const uint64_t bytes = row_major.size() * sizeof(float);
  Result<std::vector<uint64_t>> sums = ChecksumUnit(source, bytes, 16);
  ASSERT_TRUE(sums.ok()) << sums.status().message();
  EXPECT_EQ(*sums, io::BlockChecksums(row_major.data(), bytes, 16));
  EXPECT_EQ(sums->size(), io::BlockCount(bytes, 16));
}

TEST(ReplicaChecksumsTest, AContiguousSourceIsHashedWhole) {
  std::vector<char> bytes(3 * 4096 + 17, 'x');
  bytes[5000] = 'y';
  Source source;
  source.base = bytes.data();
  Result<std::vector<uint64_t>> sums = ChecksumUnit(source, bytes.size(), 4096);
  ASSERT_TRUE(sums.ok()) << sums.status().message();
  EXPECT_EQ(*sums, io::BlockChecksums(bytes.data(), bytes.size(), 4096));
}

}  // namespace
}  // namespace ckpt::runtime::staging

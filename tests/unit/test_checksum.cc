#include <gtest/gtest.h>
#include <xxhash.h>

#include <string>

#include "io/checksum.h"

namespace ckpt::io {
namespace {

const std::string kSample = "ckpt block checksum known-answer input";

TEST(Checksum, IsUnseededXxh3OfTheBytes) {
  EXPECT_EQ(Checksum(kSample.data(), kSample.size()), XXH3_64bits(kSample.data(), kSample.size()));
}

TEST(Checksum, ChangesWhenOneByteChanges) {
  std::string changed = kSample;
  changed[5] ^= 1;
  EXPECT_NE(Checksum(kSample.data(), kSample.size()), Checksum(changed.data(), changed.size()));
}

TEST(BlockChecksums, OneValuePerBlockWithAShorterLastBlock) {
  const std::vector<uint64_t> sums = BlockChecksums(kSample.data(), kSample.size(), 16);
  ASSERT_EQ(sums.size(), 3u);  // 38 bytes: 16 + 16 + 6
  EXPECT_EQ(sums[0], Checksum(kSample.data(), 16));
  EXPECT_EQ(sums[1], Checksum(kSample.data() + 16, 16));
  EXPECT_EQ(sums[2], Checksum(kSample.data() + 32, kSample.size() - 32));
}

TEST(BlockChecksums, ExactMultipleHasNoExtraBlock) {
  const std::vector<uint64_t> sums = BlockChecksums(kSample.data(), 32, 16);
  ASSERT_EQ(sums.size(), 2u);
  EXPECT_EQ(sums[1], Checksum(kSample.data() + 16, 16));
}

TEST(BlockChecksums, BlockLargerThanDataGivesOneChecksumOfAll) {
  const std::vector<uint64_t> sums = BlockChecksums(kSample.data(), kSample.size(), 1 << 20);
  ASSERT_EQ(sums.size(), 1u);
  EXPECT_EQ(sums[0], Checksum(kSample.data(), kSample.size()));
}

TEST(BlockChecksums, EmptyDataHasNoBlocks) { EXPECT_TRUE(BlockChecksums(kSample.data(), 0, 16).empty()); }

TEST(BlockChecksums, CountMatchesBlockCount) {
  for (size_t size : {0u, 1u, 15u, 16u, 17u, 38u}) {
    EXPECT_EQ(BlockChecksums(kSample.data(), size, 16).size(), BlockCount(size, 16)) << "size " << size;
  }
}

}  // namespace
}  // namespace ckpt::io

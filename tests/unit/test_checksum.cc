#include <gtest/gtest.h>
#include <xxhash.h>

#include <random>
#include <string>
#include <vector>

#include "io/checksum.h"
#include "io/checksum_avx2.h"

namespace ckpt::io {
namespace {

const std::string kSample = "ckpt block checksum known-answer input";

TEST(Checksum, IsUnseededXxh3OfTheBytes) {
  EXPECT_EQ(Checksum(kSample.data(), kSample.size()), XXH3_64bits(kSample.data(), kSample.size()));
}

// XXH3 takes a different path for each class of length (0, 1-3, 4-8, 9-16, 17-128, 129-240, longer, then each
// stripe and 1 KiB block, and the tail): the AVX2 build must give the library's value for every one of them, from an
// unaligned start too, since stored checksums are compared across machines.
TEST(Checksum, Avx2BuildGivesTheLibrarysValueForEveryClassOfLength) {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "this CPU has no AVX2";
  std::vector<unsigned char> data((1 << 20) + 8192);
  std::mt19937_64 random(7);
  for (unsigned char& byte : data) byte = static_cast<unsigned char>(random());
  for (size_t length = 0; length <= 4096; ++length) {
    ASSERT_EQ(ChecksumAvx2(data.data() + 3, length), XXH3_64bits(data.data() + 3, length)) << "length " << length;
  }
  for (size_t length : {(1u << 20) - 1, 1u << 20, (1u << 20) + 1, (1u << 20) + 4097}) {
    EXPECT_EQ(ChecksumAvx2(data.data(), length), XXH3_64bits(data.data(), length)) << "length " << length;
    EXPECT_EQ(Checksum(data.data() + 5, length), XXH3_64bits(data.data() + 5, length)) << "length " << length;
  }
#else
  GTEST_SKIP() << "AVX2 is x86-64's";
#endif
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

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "io/checksum.h"
#include "io/xxh3_builds.h"

namespace ckpt::io {
namespace {

const std::string kSample = "ckpt block checksum known-answer input";

TEST(Checksum, IsUnseededXxh3OfTheBytes) {
  EXPECT_EQ(Checksum(kSample.data(), kSample.size()), XXH3_64bits(kSample.data(), kSample.size()));
}

// The builds of XXH3 this CPU runs, by name.
std::vector<std::pair<std::string, const Xxh3Build*>> RunnableBuilds() {
  std::vector<std::pair<std::string, const Xxh3Build*>> builds{{"library", &Xxh3Library()}};
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) builds.emplace_back("avx2", &Xxh3Avx2());
  if (CpuRunsXxh3Avx512()) builds.emplace_back("avx512", &Xxh3Avx512());
#endif
  return builds;
}

std::vector<unsigned char> RandomBytes(size_t size) {
  std::vector<unsigned char> data(size);
  std::mt19937_64 random(7);
  for (unsigned char& byte : data) byte = static_cast<unsigned char>(random());
  return data;
}

// XXH3 takes a different path for each class of length (0, 1-3, 4-8, 9-16, 17-128, 129-240, longer, then each
// stripe and 1 KiB block, and the tail): every build must give the library's value for every one of them, from an
// unaligned start too, since stored checksums are compared across machines.
TEST(Checksum, EveryBuildGivesTheLibrarysValueForEveryClassOfLength) {
  const std::vector<unsigned char> data = RandomBytes((1 << 20) + 8192);
  for (const auto& [name, build] : RunnableBuilds()) {
    for (size_t length = 0; length <= 4096; ++length) {
      ASSERT_EQ(build->checksum(data.data() + 3, length), XXH3_64bits(data.data() + 3, length))
          << name << ", length " << length;
    }
    for (size_t length : {(1u << 20) - 1, 1u << 20, (1u << 20) + 1, (1u << 20) + 4097}) {
      EXPECT_EQ(build->checksum(data.data(), length), XXH3_64bits(data.data(), length))
          << name << ", length " << length;
    }
  }
  for (size_t length : {(1u << 20) - 1, 1u << 20, (1u << 20) + 4097}) {
    EXPECT_EQ(Checksum(data.data() + 5, length), XXH3_64bits(data.data() + 5, length)) << "length " << length;
  }
}

// A streaming state fed in pieces of every size must end where the one-shot hash of the whole does, in every build:
// the pieces cross XXH3's 256-byte internal buffer and its 1 KiB blocks at every offset.
TEST(Checksum, EveryBuildStreamsToTheOneShotValue) {
  const std::vector<unsigned char> data = RandomBytes(70000);
  for (const auto& [name, build] : RunnableBuilds()) {
    for (size_t piece : {1u, 7u, 64u, 255u, 256u, 1000u, 1024u, 4099u, 65536u}) {
      alignas(64) unsigned char state[BlockChecksummer::kStateBytes] = {};
      build->reset(state);
      for (size_t at = 0; at < data.size(); at += piece) {
        build->update(state, data.data() + at, std::min(piece, data.size() - at));
      }
      EXPECT_EQ(build->digest(state), XXH3_64bits(data.data(), data.size())) << name << ", pieces of " << piece;
    }
  }
}

// Every build's one-pass copy must give XXH3's value and an exact copy for every length class: short inputs, one
// stripe past XXH3's short-input bound, lengths ending on and off a stripe and a 1 KiB block, from an unaligned
// source.
TEST(Checksum, EveryBuildsCopyAndChecksumGivesTheLibrarysValueAndAnExactCopy) {
  const std::vector<unsigned char> data = RandomBytes((1 << 20) + 8192);
  std::vector<size_t> lengths;
  for (size_t length = 0; length <= 2200; ++length) lengths.push_back(length);
  for (size_t length : {4095u, 4096u, 4097u, (1u << 20) - 1, 1u << 20, (1u << 20) + 1, (1u << 20) + 4097}) {
    lengths.push_back(length);
  }
  alignas(64) static unsigned char copy[(1 << 20) + 8192 + 64];
  int copying_builds = 0;
  for (const auto& [name, build] : RunnableBuilds()) {
    if (build->copy_and_checksum == nullptr) continue;
    ++copying_builds;
    for (size_t length : lengths) {
      std::memset(copy, 0, length);
      copy[length] = 0xee;
      ASSERT_EQ(build->copy_and_checksum(copy, data.data() + 1, length), XXH3_64bits(data.data() + 1, length))
          << name << ", length " << length;
      ASSERT_EQ(std::memcmp(copy, data.data() + 1, length), 0) << name << ", length " << length;
      ASSERT_EQ(copy[length], 0xee) << name << ", length " << length << ": a byte past the copy was written";
    }
  }
#if defined(__x86_64__)
  if (copying_builds == 0) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
#else
  GTEST_SKIP() << "the one-pass copies are x86-64's";
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

// Fed in pieces that cut blocks anywhere, a BlockChecksummer gives BlockChecksums of the whole: one value per
// block, the last block shorter.
TEST(BlockChecksummer, PiecesOfAnySizeGiveTheBlockChecksumsOfTheWhole) {
  const std::vector<unsigned char> data = RandomBytes(10 * 4096 + 123);
  for (size_t piece : {1u, 100u, 4095u, 4096u, 4097u, 12288u, 50000u}) {
    BlockChecksummer checksummer(4096);
    for (size_t at = 0; at < data.size(); at += piece) {
      checksummer.Update(data.data() + at, std::min(piece, data.size() - at));
    }
    EXPECT_EQ(checksummer.Finish(), BlockChecksums(data.data(), data.size(), 4096)) << "pieces of " << piece;
  }
}

TEST(BlockChecksummer, AWholeNumberOfBlocksHasNoExtraBlockAndNothingHasNoBlocks) {
  const std::vector<unsigned char> data = RandomBytes(3 * 4096);
  BlockChecksummer whole(4096);
  whole.Update(data.data(), data.size());
  EXPECT_EQ(whole.Finish(), BlockChecksums(data.data(), data.size(), 4096));
  BlockChecksummer nothing(4096);
  nothing.Update(data.data(), 0);
  EXPECT_TRUE(nothing.Finish().empty());
}

}  // namespace
}  // namespace ckpt::io

// The block codec of stored bytes (io/block_codec.h): a block compresses to fewer bytes where its elements' bytes
// repeat, comes back exactly, is stored raw where coding would not shrink it, and a stored form that is not a coding
// of exactly the block is refused as corrupt, naming the block.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "io/block_codec.h"
#include "tests/unit/support/test_pattern.h"
#include "tests/unit/support/test_weights.h"

namespace ckpt::io {
namespace {

using testing::Weights;

constexpr uint64_t kBlock = 64 * 1024;
const std::string kWhat = "'data/0-0.bin': segment 2, block 5";

struct Stored {
  std::string bytes;  // the stored form
  uint64_t size = 0;
};

Stored Compress(const std::string& block, uint32_t byte_groups) {
  BlockCompressor compressor;
  std::string out(block.size(), '\0');
  const uint64_t size = compressor.Compress(block.data(), block.size(), byte_groups, out.data());
  out.resize(size);
  return Stored{out, size};
}

Status Decompress(const std::string& stored, uint32_t byte_groups, uint64_t length, std::string* out) {
  BlockDecompressor decompressor;
  out->assign(length, '\xee');
  return decompressor.Decompress(stored.data(), stored.size(), byte_groups, out->data(), length, kWhat);
}

// Decompressing `stored` as a block of `length` is kCorrupt, names the block and says `fragment`.
void ExpectCorrupt(const std::string& stored, uint32_t byte_groups, uint64_t length, const std::string& fragment) {
  std::string out;
  const Status status = Decompress(stored, byte_groups, length, &out);
  ASSERT_FALSE(status.ok()) << "accepted; expected an error containing: " << fragment;
  EXPECT_EQ(status.code(), Code::kCorrupt) << status.message();
  EXPECT_EQ(status.message().rfind(kWhat, 0), 0u) << status.message();
  EXPECT_NE(status.message().find(fragment), std::string::npos) << status.message();
}

class BlockCodecGroupingTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(BlockCodecGroupingTest, SmallWeightsCompressBelowTheBlockAndRoundTrip) {
  const std::string block = Weights(kBlock, GetParam());
  const Stored stored = Compress(block, GetParam());
  EXPECT_LT(stored.size, block.size());
  std::string out;
  const Status status = Decompress(stored.bytes, GetParam(), block.size(), &out);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(out, block);
}

// A short last block of a chunk (its length still a whole number of elements) codes on its own.
TEST_P(BlockCodecGroupingTest, AShortBlockOfWholeElementsRoundTrips) {
  const std::string block = Weights(1000 * 8 + 8, GetParam());
  const Stored stored = Compress(block, GetParam());
  std::string out;
  const Status status = Decompress(stored.bytes, GetParam(), block.size(), &out);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(out, block);
}

TEST_P(BlockCodecGroupingTest, RandomBytesAreStoredRawAndRoundTrip) {
  const std::string block = testing::Pattern(kBlock, 7);
  const Stored stored = Compress(block, GetParam());
  EXPECT_EQ(stored.size, block.size());
  EXPECT_EQ(stored.bytes, block);
  std::string out;
  const Status status = Decompress(stored.bytes, GetParam(), block.size(), &out);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(out, block);
}

TEST_P(BlockCodecGroupingTest, AnEmptyBlockIsStoredInNoBytes) {
  BlockCompressor compressor;
  char out = 'x';
  EXPECT_EQ(compressor.Compress("", 0, GetParam(), &out), 0u);
  BlockDecompressor decompressor;
  const Status status = decompressor.Decompress("", 0, GetParam(), &out, 0, kWhat);
  EXPECT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(out, 'x');
}

TEST_P(BlockCodecGroupingTest, AStoredFormOneByteShortIsCorrupt) {
  const std::string block = Weights(kBlock, GetParam());
  const Stored stored = Compress(block, GetParam());
  ASSERT_LT(stored.size, block.size());
  ExpectCorrupt(stored.bytes.substr(0, stored.size - 1), GetParam(), block.size(), "not a zstd frame");
}

TEST_P(BlockCodecGroupingTest, BytesAfterTheFramesAreCorrupt) {
  const std::string block = Weights(kBlock, GetParam());
  const Stored stored = Compress(block, GetParam());
  ASSERT_LT(stored.size + 3, block.size());
  ExpectCorrupt(stored.bytes + "abc", GetParam(), block.size(), "3 bytes follow its zstd frames");
}

// The frames of a block of another length (another block of the chunk, or a chunk of another size): one element
// shorter.
TEST_P(BlockCodecGroupingTest, AFrameForAnotherLengthIsCorrupt) {
  const std::string block = Weights(kBlock, GetParam());
  const Stored stored = Compress(block, GetParam());
  ASSERT_LT(stored.size, block.size() - 8);
  ExpectCorrupt(stored.bytes, GetParam(), block.size() - 8, "does not hold the");
}

TEST_P(BlockCodecGroupingTest, GarbageIsNotAZstdFrame) {
  ExpectCorrupt(testing::Pattern(1000, 3), GetParam(), kBlock, "not a zstd frame");
}

INSTANTIATE_TEST_SUITE_P(Groupings, BlockCodecGroupingTest, ::testing::Values(1u, 2u, 4u, 8u),
                         [](const ::testing::TestParamInfo<uint32_t>& info) {
                           return "Bytes" + std::to_string(info.param);
                         });

// Compress accepts a block that is not a whole number of elements (it codes it ungrouped): what it stores must come
// back through Decompress with the same grouping.
TEST(BlockCodec, ALengthNotAMultipleOfTheGroupingRoundTrips) {
  const std::string block = Weights(4 * 1000, 4).substr(0, 4 * 1000 - 1);
  const Stored stored = Compress(block, 4);
  EXPECT_LE(stored.size, block.size());
  std::string out;
  const Status status = Decompress(stored.bytes, 4, block.size(), &out);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(out, block);
}

TEST(BlockCodec, AStoredSizeLargerThanTheBlockIsCorrupt) {
  ExpectCorrupt(std::string(101, 'x'), 4, 100, "stored in 101 bytes, more than its 100");
}

TEST(BlockCodec, AStoredSizeEqualToTheBlockIsTheRawBlock) {
  std::string out;
  const std::string raw = testing::Pattern(100, 2);
  ASSERT_TRUE(Decompress(raw, 8, raw.size(), &out).ok());
  EXPECT_EQ(out, raw);
}

// Grouped frames cut between two groups: the first groups decode, the next is missing.
TEST(BlockCodec, AStoredFormMissingItsLastGroupsIsCorrupt) {
  const std::string block = Weights(kBlock, 4);
  const Stored whole = Compress(block, 4);
  ASSERT_LT(whole.size, block.size());
  ExpectCorrupt(whole.bytes.substr(0, whole.size / 2), 4, block.size(), "(byte group");
}

TEST(BlockCodec, AnInvalidGroupingIsCorrupt) {
  const std::string block = Weights(kBlock, 4);
  const Stored stored = Compress(block, 4);
  ASSERT_LT(stored.size, block.size());
  ExpectCorrupt(stored.bytes, 3, block.size(), "cannot be grouped in 3-byte elements");
  ExpectCorrupt(stored.bytes, 0, block.size(), "cannot be grouped in 0-byte elements");
}

TEST(BlockCodec, ValidByteGroupsAreOneTwoFourAndEight) {
  for (uint32_t g = 0; g <= 16; ++g) {
    EXPECT_EQ(ValidByteGroups(g), g == 1 || g == 2 || g == 4 || g == 8) << g;
  }
  EXPECT_FALSE(ValidByteGroups(UINT32_MAX));
}

}  // namespace
}  // namespace ckpt::io

// io::StreamingCopy: byte for byte memcpy's result, whatever the alignment of either side and the length, and no
// byte outside the destination touched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "io/checksum.h"
#include "io/streaming_copy.h"

namespace ckpt::io {
namespace {

std::vector<uint8_t> Pattern(size_t size) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(i * 131 + i / 251);
  return bytes;
}

// Copies `size` bytes from source offset `from` to destination offset `to`, with guard bytes around the destination.
void ExpectExactCopy(size_t from, size_t to, size_t size) {
  const std::vector<uint8_t> source = Pattern(from + size);
  constexpr size_t kGuard = 64;
  std::vector<uint8_t> destination(to + size + kGuard, 0xee);
  StreamingCopy(destination.data() + to, source.data() + from, size);
  for (size_t i = 0; i < to; ++i) ASSERT_EQ(destination[i], 0xee) << "byte " << i << " before the destination";
  for (size_t i = 0; i < size; ++i) {
    ASSERT_EQ(destination[to + i], source[from + i])
        << "byte " << i << " of " << size << " (from " << from << ", to " << to << ")";
  }
  for (size_t i = 0; i < kGuard; ++i) ASSERT_EQ(destination[to + size + i], 0xee) << "byte " << i << " after it";
}

TEST(StreamingCopyTest, CopiesEveryByteWhateverTheAlignmentAndLength) {
  for (size_t from : {0, 1, 7, 16, 33}) {
    for (size_t to : {0, 1, 9, 15, 16, 48}) {
      for (size_t size :
           {kStreamingCopyMinBytes - 1, kStreamingCopyMinBytes, kStreamingCopyMinBytes + 63, (size_t{1} << 20) + 17}) {
        ExpectExactCopy(from, to, size);
      }
    }
  }
}

TEST(StreamingCopyTest, ShortAndEmptyCopiesAreExact) {
  for (size_t size : {0, 1, 15, 64, 1000}) ExpectExactCopy(3, 5, size);
}

// StreamingCopyChecksummed: memcpy's result, and the block checksums of the bytes, whether they come in one call or
// in pieces that cut blocks anywhere, from aligned and unaligned memory (the one-pass copy of whole blocks and the
// copy-then-hash of pieces both).
TEST(StreamingCopyTest, ChecksummedCopyGivesTheBytesAndTheirBlockChecksums) {
  constexpr uint64_t kBlock = 1 << 17;
  const std::vector<uint8_t> source = Pattern(5 * kBlock + 1000 + 64);
  for (size_t to : {0, 64, 9}) {
    for (size_t piece : {size_t{5 * kBlock + 1000}, size_t{3 * kBlock}, size_t{70000}, size_t{999}}) {
      const size_t size = 5 * kBlock + 1000;
      std::vector<uint8_t> buffer(size + to + 128, 0xee);
      // A 64-byte aligned destination: `to` bytes past the first such address in the buffer.
      uint8_t* const aligned = buffer.data() + (64 - reinterpret_cast<uintptr_t>(buffer.data()) % 64) % 64;
      uint8_t* const destination = aligned + to;
      BlockChecksummer checksummer(kBlock);
      for (size_t at = 0; at < size; at += piece) {
        StreamingCopyChecksummed(destination + at, source.data() + 3 + at, std::min(piece, size - at), checksummer);
      }
      ASSERT_EQ(std::memcmp(destination, source.data() + 3, size), 0) << "to " << to << ", pieces of " << piece;
      ASSERT_EQ(destination[size], 0xee) << "to " << to << ", pieces of " << piece;
      EXPECT_EQ(checksummer.Finish(), BlockChecksums(source.data() + 3, size, kBlock))
          << "to " << to << ", pieces of " << piece;
    }
  }
}

}  // namespace
}  // namespace ckpt::io

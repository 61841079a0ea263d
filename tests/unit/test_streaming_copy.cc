// io::StreamingCopy: byte for byte memcpy's result, whatever the alignment of either side and the length, and no
// byte outside the destination touched.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

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

}  // namespace
}  // namespace ckpt::io

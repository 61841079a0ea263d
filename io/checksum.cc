#include "io/checksum.h"

#include <xxhash.h>

#include <algorithm>

#include "io/checksum_avx2.h"

namespace ckpt::io {
namespace {

using ChecksumFunction = uint64_t (*)(const void* data, size_t size);

uint64_t LibraryChecksum(const void* data, size_t size) { return XXH3_64bits(data, size); }

ChecksumFunction ChooseChecksum() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) return ChecksumAvx2;
#endif
  return LibraryChecksum;
}

}  // namespace

uint64_t Checksum(const void* data, size_t size) {
  static const ChecksumFunction checksum = ChooseChecksum();
  return checksum(data, size);
}

std::vector<uint64_t> BlockChecksums(const void* data, size_t size, uint64_t block_size) {
  std::vector<uint64_t> sums;
  if (block_size == 0) return sums;  // no block can be formed; BlockCount would divide by zero
  sums.reserve(BlockCount(size, block_size));
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (uint64_t offset = 0; offset < size; offset += block_size) {
    const uint64_t length = std::min<uint64_t>(block_size, size - offset);
    sums.push_back(Checksum(bytes + offset, length));
  }
  return sums;
}

}  // namespace ckpt::io

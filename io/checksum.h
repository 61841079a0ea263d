// Block checksums of stored data: XXH3-64, fast enough (tens of GB/s on data in cache) that hashing never bounds a
// save or load; compiled for AVX2 where the CPU has it (io/checksum_avx2.h), the same values either way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ckpt::io {

uint64_t Checksum(const void* data, size_t size);

// Checksums of consecutive `block_size` blocks of data (the last may be shorter); ceil(size/block_size) values.
std::vector<uint64_t> BlockChecksums(const void* data, size_t size, uint64_t block_size);

// Number of blocks `size` bytes form.
inline uint64_t BlockCount(uint64_t size, uint64_t block_size) {
  return size / block_size + (size % block_size != 0 ? 1 : 0);
}

}  // namespace ckpt::io

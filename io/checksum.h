// Block checksums of stored data: XXH3-64, fast enough (tens of GB/s on data in cache) that hashing never bounds a
// save or load; compiled for AVX2 or AVX-512 where the CPU has them (io/xxh3_builds.h), the same values
// either way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ckpt::io {

uint64_t Checksum(const void* data, size_t size);

// Checksums of consecutive `block_size` blocks of data (the last may be shorter); ceil(size/block_size) values.
std::vector<uint64_t> BlockChecksums(const void* data, size_t size, uint64_t block_size);

// The block checksums of bytes that arrive in pieces of any size, equal to BlockChecksums of their concatenation:
// a save stager hashes each piece of its source right after copying it, while the piece is still in the cache,
// instead of an I/O worker reading the whole copy back from memory.
class BlockChecksummer {
 public:
  explicit BlockChecksummer(uint64_t block_size);  // block_size > 0
  BlockChecksummer(const BlockChecksummer&) = delete;
  BlockChecksummer& operator=(const BlockChecksummer&) = delete;

  // The next `size` bytes.
  void Update(const void* data, size_t size);
  // Where the CPU can copy and hash in one pass (io/xxh3_builds.h), `dst` is 64-byte aligned and the checksummer is
  // at the start of a block: copies the whole blocks at the front of `src` to `dst` through non-temporal stores and
  // takes them as the next bytes. Returns the bytes copied, a multiple of the block size (0 where it cannot).
  size_t CopyWholeBlocks(void* dst, const void* src, size_t size);
  // Every block's checksum, the last block ending with the last byte given; the checksummer is spent.
  std::vector<uint64_t> Finish();

  // Room for XXH3's streaming state (576 bytes in xxHash 0.8), 64-byte aligned as it requires.
  static constexpr size_t kStateBytes = 640;

 private:
  alignas(64) unsigned char state_[kStateBytes];
  uint64_t block_size_;
  uint64_t in_block_ = 0;  // bytes of the current block hashed so far
  std::vector<uint64_t> sums_;
};

// Number of blocks `size` bytes form.
inline uint64_t BlockCount(uint64_t size, uint64_t block_size) {
  return size / block_size + (size % block_size != 0 ? 1 : 0);
}

}  // namespace ckpt::io

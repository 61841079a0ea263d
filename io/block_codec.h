// The lossless codec of stored blocks (CKPT_SAVE_COMPRESS): each checksum block is compressed on its own, so that a
// ranged or resharded read decodes only the blocks it needs.
//
// A block of elements `byte_groups` bytes wide (2, 4 or 8: floating-point dtypes) is first rotated left by one bit
// per element, which puts the sign bit at the bottom and a whole exponent byte (all of it in BF16, F32 and F64) at
// the top, and its bytes are then grouped by significance: the elements' most significant bytes, then the next,
// down to the least significant. Each group is one zstd frame, at zstd's fastest level with its literals still
// Huffman-coded: the exponent bytes take a few values and shrink to about 2.6 bits each, the mantissa bytes are
// close to random and are stored as zstd's raw blocks quickly. On all-MiniLM-L6-v2's weights cast to BF16 that gave
// 1.5036x at 1.4 GiB/s per core, where zstd's level 1 on the same grouping gave 1.467x at 0.55 GiB/s: finding
// matches costs time and gains nothing on such bytes. Other bytes (`byte_groups` 1: integers, float8, objects)
// are one zstd frame at level 1, whose matches do find repeats.
//
// A block whose coding is not shorter than the block is stored raw: a stored size equal to the block's length
// means raw bytes, anything shorter the coding above.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace ckpt::io {

// The codec field of stored bytes (the manifest's StoredBytes.codec).
enum class Codec : uint8_t {
  kNone = 0,  // the bytes as they are
  kZstd = 1,  // each block as above
};

// Whether `byte_groups` is a grouping the codec knows: 1 (none), 2, 4 or 8.
bool ValidByteGroups(uint32_t byte_groups);

class BlockCompressor {
 public:
  BlockCompressor();
  ~BlockCompressor();
  BlockCompressor(const BlockCompressor&) = delete;
  BlockCompressor& operator=(const BlockCompressor&) = delete;

  // Writes the stored form of `length` bytes at `block` to `out`, which has room for `length` bytes, and returns
  // its size: `length` where the block is stored raw. A `length` that is not a multiple of `byte_groups` is stored raw.
  uint64_t Compress(const char* block, uint64_t length, uint32_t byte_groups, char* out);

 private:
  struct Contexts;
  std::unique_ptr<Contexts> contexts_;
};

class BlockDecompressor {
 public:
  BlockDecompressor();
  ~BlockDecompressor();
  BlockDecompressor(const BlockDecompressor&) = delete;
  BlockDecompressor& operator=(const BlockDecompressor&) = delete;

  // Decodes the `stored` bytes at `in` into the `length` bytes of the block at `out`. kCorrupt, saying what is
  // wrong, where the stored bytes are not a coding of exactly `length` bytes; `what` names the block.
  Status Decompress(const char* in, uint64_t stored, uint32_t byte_groups, char* out, uint64_t length,
                    const std::string& what);

 private:
  struct Contexts;
  std::unique_ptr<Contexts> contexts_;
};

}  // namespace ckpt::io

#include "io/block_codec.h"

// ZSTD_c_literalCompressionMode is one of zstd's experimental parameters, stable since 1.5.0.
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include <cstring>
#include <vector>

namespace ckpt::io {
namespace {

// zstd's fastest level: hardly any match search, literals Huffman-coded (forced below), as grouped floats want.
constexpr int kGroupedLevel = -100000;
// Bytes not grouped keep zstd's usual fast level, whose matches find repeats in integers and objects.
constexpr int kPlainLevel = 1;

template <typename Word>
Word RotateLeft(Word v) {
  return static_cast<Word>((v << 1) | (v >> (sizeof(Word) * 8 - 1)));
}
template <typename Word>
Word RotateRight(Word v) {
  return static_cast<Word>((v >> 1) | (v << (sizeof(Word) * 8 - 1)));
}

// Rotates each element of `count` and writes its bytes, most significant first, to the groups at `out`.
template <typename Word>
void Group(const char* in, uint64_t count, char* out) {
  constexpr int kBytes = sizeof(Word);
  for (uint64_t i = 0; i < count; ++i) {
    Word v;
    std::memcpy(&v, in + i * kBytes, kBytes);
    v = RotateLeft(v);
    for (int b = 0; b < kBytes; ++b)
      out[static_cast<uint64_t>(b) * count + i] = static_cast<char>(v >> (8 * (kBytes - 1 - b)));
  }
}

template <typename Word>
void Ungroup(const char* in, uint64_t count, char* out) {
  constexpr int kBytes = sizeof(Word);
  for (uint64_t i = 0; i < count; ++i) {
    Word v = 0;
    for (int b = 0; b < kBytes; ++b) {
      v = static_cast<Word>((v << 8) | static_cast<unsigned char>(in[static_cast<uint64_t>(b) * count + i]));
    }
    v = RotateRight(v);
    std::memcpy(out + i * kBytes, &v, kBytes);
  }
}

void GroupBytes(const char* in, uint64_t length, uint32_t byte_groups, char* out) {
  const uint64_t count = length / byte_groups;
  if (byte_groups == 2) Group<uint16_t>(in, count, out);
  if (byte_groups == 4) Group<uint32_t>(in, count, out);
  if (byte_groups == 8) Group<uint64_t>(in, count, out);
}

void UngroupBytes(const char* in, uint64_t length, uint32_t byte_groups, char* out) {
  const uint64_t count = length / byte_groups;
  if (byte_groups == 2) Ungroup<uint16_t>(in, count, out);
  if (byte_groups == 4) Ungroup<uint32_t>(in, count, out);
  if (byte_groups == 8) Ungroup<uint64_t>(in, count, out);
}

}  // namespace

bool ValidByteGroups(uint32_t byte_groups) {
  return byte_groups == 1 || byte_groups == 2 || byte_groups == 4 || byte_groups == 8;
}

struct BlockCompressor::Contexts {
  ZSTD_CCtx* grouped = ZSTD_createCCtx();
  ZSTD_CCtx* plain = ZSTD_createCCtx();
  std::vector<char> groups;
  Contexts() {
    ZSTD_CCtx_setParameter(grouped, ZSTD_c_compressionLevel, kGroupedLevel);
    ZSTD_CCtx_setParameter(grouped, ZSTD_c_literalCompressionMode, ZSTD_ps_enable);
    ZSTD_CCtx_setParameter(plain, ZSTD_c_compressionLevel, kPlainLevel);
  }
  ~Contexts() {
    ZSTD_freeCCtx(grouped);
    ZSTD_freeCCtx(plain);
  }
};

BlockCompressor::BlockCompressor() : contexts_(std::make_unique<Contexts>()) {}
BlockCompressor::~BlockCompressor() = default;

uint64_t BlockCompressor::Compress(const char* block, uint64_t length, uint32_t byte_groups, char* out) {
  auto raw = [&] {
    std::memcpy(out, block, length);
    return length;
  };
  // Bytes that are not whole elements cannot be grouped, and Decompress would refuse them grouped: stored raw.
  if (contexts_->grouped == nullptr || contexts_->plain == nullptr || length == 0 || length % byte_groups != 0) {
    return raw();
  }
  if (byte_groups <= 1) {
    const size_t size = ZSTD_compress2(contexts_->plain, out, length, block, length);
    return ZSTD_isError(size) || size >= length ? raw() : size;
  }
  std::vector<char>& groups = contexts_->groups;
  if (groups.size() < length) groups.resize(length);
  GroupBytes(block, length, byte_groups, groups.data());
  const uint64_t group_length = length / byte_groups;
  uint64_t stored = 0;
  for (uint32_t g = 0; g < byte_groups; ++g) {
    // An output that would not fit fails with dstSize_tooSmall: the block is then stored raw.
    const size_t size = ZSTD_compress2(contexts_->grouped, out + stored, length - stored,
                                       groups.data() + g * group_length, group_length);
    if (ZSTD_isError(size)) return raw();
    stored += size;
  }
  return stored >= length ? raw() : stored;
}

struct BlockDecompressor::Contexts {
  ZSTD_DCtx* context = ZSTD_createDCtx();
  std::vector<char> groups;
  ~Contexts() { ZSTD_freeDCtx(context); }
};

BlockDecompressor::BlockDecompressor() : contexts_(std::make_unique<Contexts>()) {}
BlockDecompressor::~BlockDecompressor() = default;

Status BlockDecompressor::Decompress(const char* in, uint64_t stored, uint32_t byte_groups, char* out, uint64_t length,
                                     const std::string& what) {
  if (stored == length) {
    std::memcpy(out, in, length);
    return Status::Ok();
  }
  if (stored > length) {
    return Corrupt(what + ": stored in " + std::to_string(stored) + " bytes, more than its " + std::to_string(length));
  }
  if (!ValidByteGroups(byte_groups) || length % byte_groups != 0) {
    return Corrupt(what + ": " + std::to_string(length) + " bytes cannot be grouped in " + std::to_string(byte_groups) +
                   "-byte elements");
  }
  if (contexts_->context == nullptr) return Internal("cannot create a zstd decompression context");
  const bool grouped = byte_groups > 1;
  std::vector<char>& groups = contexts_->groups;
  if (grouped && groups.size() < length) groups.resize(length);
  char* target = grouped ? groups.data() : out;
  const uint64_t group_length = length / byte_groups;
  uint64_t consumed = 0;
  for (uint32_t g = 0; g < byte_groups; ++g) {
    const std::string group = grouped ? " (byte group " + std::to_string(g) + ")" : "";
    const size_t frame = ZSTD_findFrameCompressedSize(in + consumed, stored - consumed);
    if (ZSTD_isError(frame)) {
      return Corrupt(what + group + ": not a zstd frame (" + ZSTD_getErrorName(frame) + ")");
    }
    if (ZSTD_getFrameContentSize(in + consumed, frame) != group_length) {
      return Corrupt(what + group + ": its zstd frame does not hold the " + std::to_string(group_length) +
                     " bytes expected");
    }
    const size_t size =
        ZSTD_decompressDCtx(contexts_->context, target + g * group_length, group_length, in + consumed, frame);
    if (ZSTD_isError(size) || size != group_length) {
      return Corrupt(what + group + ": cannot be decompressed (" +
                     (ZSTD_isError(size) ? ZSTD_getErrorName(size) : "short frame") + ")");
    }
    consumed += frame;
  }
  if (consumed != stored) {
    return Corrupt(what + ": " + std::to_string(stored - consumed) + " bytes follow its zstd frames");
  }
  if (grouped) UngroupBytes(groups.data(), length, byte_groups, out);
  return Status::Ok();
}

}  // namespace ckpt::io

#include "io/checksum.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t's definition, for BlockChecksummer's storage
#include <xxhash.h>

#include <algorithm>
#include <cassert>
#include <cstring>

#include "io/xxh3_builds.h"

namespace ckpt::io {
namespace {

static_assert(sizeof(XXH3_state_t) <= BlockChecksummer::kStateBytes && alignof(XXH3_state_t) <= 64);

uint64_t LibraryChecksum(const void* data, size_t size) { return XXH3_64bits(data, size); }
void LibraryReset(void* state) { XXH3_64bits_reset(static_cast<XXH3_state_t*>(state)); }
void LibraryUpdate(void* state, const void* data, size_t size) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state), data, size);
}
uint64_t LibraryDigest(const void* state) { return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state)); }

const Xxh3Build& ChooseXxh3() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (CpuRunsXxh3Avx512()) return Xxh3Avx512();
  if (__builtin_cpu_supports("avx2")) return Xxh3Avx2();
#endif
  return Xxh3Library();
}

// One build for the whole process, so that a streaming state is only ever touched by the build that reset it.
const Xxh3Build& TheXxh3() {
  static const Xxh3Build& xxh3 = ChooseXxh3();
  return xxh3;
}

}  // namespace

const Xxh3Build& Xxh3Library() {
  static const Xxh3Build build{LibraryChecksum, LibraryReset, LibraryUpdate, LibraryDigest, nullptr};
  return build;
}

#if defined(__x86_64__)
bool CpuRunsXxh3Avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("bmi2");
}
#endif

uint64_t Checksum(const void* data, size_t size) { return TheXxh3().checksum(data, size); }

BlockChecksummer::BlockChecksummer(uint64_t block_size) : block_size_(block_size) {
  assert(block_size > 0);
  std::memset(state_, 0, sizeof(state_));  // XXH3_INITSTATE's job: the reset reads the seed field
  TheXxh3().reset(state_);
}

void BlockChecksummer::Update(const void* data, size_t size) {
  const Xxh3Build& xxh3 = TheXxh3();
  const auto* bytes = static_cast<const unsigned char*>(data);
  while (size > 0) {
    const uint64_t take = std::min<uint64_t>(size, block_size_ - in_block_);
    xxh3.update(state_, bytes, take);
    bytes += take;
    size -= take;
    in_block_ += take;
    if (in_block_ == block_size_) {
      sums_.push_back(xxh3.digest(state_));
      xxh3.reset(state_);
      in_block_ = 0;
    }
  }
}

size_t BlockChecksummer::CopyWholeBlocks(void* dst, const void* src, size_t size) {
  const auto copy_and_checksum = TheXxh3().copy_and_checksum;
  if (copy_and_checksum == nullptr || in_block_ != 0 || reinterpret_cast<uintptr_t>(dst) % 64 != 0) return 0;
  const size_t whole = size / block_size_ * block_size_;
  for (size_t done = 0; done < whole; done += block_size_) {
    sums_.push_back(
        copy_and_checksum(static_cast<char*>(dst) + done, static_cast<const char*>(src) + done, block_size_));
  }
  return whole;
}

std::vector<uint64_t> BlockChecksummer::Finish() {
  if (in_block_ > 0) sums_.push_back(TheXxh3().digest(state_));
  in_block_ = 0;
  return std::move(sums_);
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

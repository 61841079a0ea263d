// Compiled with -mavx2 (cmake/library.cmake).
#if defined(__x86_64__)
#define CKPT_XXH3_BUILD Xxh3Avx2
#include "io/xxh3_build.inc"

namespace ckpt::io {
namespace {

void StreamStripe(void* dst, const void* src) {
  const auto* s = static_cast<const __m256i*>(src);
  auto* d = static_cast<__m256i*>(dst);
  const __m256i low = _mm256_loadu_si256(s), high = _mm256_loadu_si256(s + 1);
  _mm256_stream_si256(d, low);
  _mm256_stream_si256(d + 1, high);
}

void Accumulate(void* acc, const void* input, const void* secret) { XXH3_accumulate_512_avx2(acc, input, secret); }
void Scramble(void* acc, const void* secret) { XXH3_scrambleAcc_avx2(acc, secret); }

// 2 KiB ahead: on an AMD EPYC (Zen 3) a 1 GiB copy and hash by one thread took 82-89 ms so, 97-106 without the
// prefetch and 91-125 copying and hashing 16 KiB pieces one after the other; a plain memcpy took 67-86.
uint64_t CopyAndChecksum(void* dst, const void* src, size_t size) {
  return CopyAndChecksumStripes<StreamStripe, Accumulate, Scramble, 2048>(dst, src, size);
}

}  // namespace
}  // namespace ckpt::io
#endif

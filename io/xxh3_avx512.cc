// Compiled with x86-64-v4's AVX-512 and BMI2 flags (runtime/CMakeLists.txt).
#if defined(__x86_64__)
#define CKPT_XXH3_BUILD Xxh3Avx512
#include <immintrin.h>

#include <cstring>

#include "io/xxh3_build.inc"

namespace ckpt::io {

// XXH3's long-input loop (xxhash.h's XXH3_hashLong_internal_loop with the default secret) run over each stripe as it
// is copied: 64 bytes read from memory once, stored past the cache and accumulated (from the first-level cache)
// while the next ones are on their way.
uint64_t CopyAndChecksumAvx512(void* dst, const void* src, size_t size) {
  if (size <= XXH3_MIDSIZE_MAX) {  // XXH3 hashes short inputs another way
    std::memcpy(dst, src, size);
    return XXH3_64bits(src, size);
  }
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const xxh_u8*>(src);
  constexpr size_t kStripesPerBlock = (XXH_SECRET_DEFAULT_SIZE - XXH_STRIPE_LEN) / XXH_SECRET_CONSUME_RATE;
  XXH_ALIGN(64) xxh_u64 acc[XXH_ACC_NB] = XXH3_INIT_ACC;
  // Every whole stripe but one ending at the last byte, which XXH3 accumulates with a secret of its own.
  const size_t stripes = (size - 1) / XXH_STRIPE_LEN;
  for (size_t k = 0; k < stripes; ++k) {
    const size_t at = k * XXH_STRIPE_LEN;
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + at), _mm512_loadu_si512(s + at));
    const size_t in_block = k % kStripesPerBlock;
    XXH3_accumulate_512_avx512(acc, s + at, XXH3_kSecret + in_block * XXH_SECRET_CONSUME_RATE);
    if (in_block + 1 == kStripesPerBlock) {
      XXH3_scrambleAcc_avx512(acc, XXH3_kSecret + XXH_SECRET_DEFAULT_SIZE - XXH_STRIPE_LEN);
    }
  }
  const size_t copied = stripes * XXH_STRIPE_LEN;
  std::memcpy(d + copied, s + copied, size - copied);
  XXH3_accumulate_512_avx512(acc, s + size - XXH_STRIPE_LEN,
                             XXH3_kSecret + XXH_SECRET_DEFAULT_SIZE - XXH_STRIPE_LEN - XXH_SECRET_LASTACC_START);
  _mm_sfence();
  return XXH3_mergeAccs(acc, XXH3_kSecret + XXH_SECRET_MERGEACCS_START, static_cast<xxh_u64>(size) * XXH_PRIME64_1);
}

}  // namespace ckpt::io
#endif

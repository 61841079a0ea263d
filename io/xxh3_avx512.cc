// Compiled with x86-64-v4's AVX-512 and BMI2 flags (cmake/library.cmake).
#if defined(__x86_64__)
#define CKPT_XXH3_BUILD Xxh3Avx512
#include "io/xxh3_build.inc"

namespace ckpt::io {
namespace {

void StreamStripe(void* dst, const void* src) {
  _mm512_stream_si512(static_cast<__m512i*>(dst), _mm512_loadu_si512(src));
}

void Accumulate(void* acc, const void* input, const void* secret) { XXH3_accumulate_512_avx512(acc, input, secret); }
void Scramble(void* acc, const void* secret) { XXH3_scrambleAcc_avx512(acc, secret); }

// No prefetch: this form was measured without one (on an Intel Xeon, a 1 GiB ckpt_save blocked 73-88 ms, less than a
// memcpy of the state), and never with one.
uint64_t CopyAndChecksum(void* dst, const void* src, size_t size) {
  return CopyAndChecksumStripes<StreamStripe, Accumulate, Scramble, 0>(dst, src, size);
}

}  // namespace
}  // namespace ckpt::io
#endif

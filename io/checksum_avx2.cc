// Compiled with -mavx2 (runtime/CMakeLists.txt). It holds XXH3 and nothing else: XXH_INLINE_ALL makes every xxHash
// function static to this file, whereas an inline function of a shared header (the standard library's) instantiated
// here would be compiled for AVX2 and could be the copy the linker keeps for every other caller.
#include "io/checksum_avx2.h"

#if defined(__x86_64__)
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ckpt::io {

uint64_t ChecksumAvx2(const void* data, size_t size) { return XXH3_64bits(data, size); }

}  // namespace ckpt::io
#endif

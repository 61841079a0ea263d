// Compiled with -mavx2 (runtime/CMakeLists.txt).
#if defined(__x86_64__)
#define CKPT_XXH3_BUILD Xxh3Avx2
#include "io/xxh3_build.inc"
#endif

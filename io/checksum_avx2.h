// XXH3-64 compiled for AVX2, which Debian's libxxhash (built for baseline x86-64, SSE2) never uses: on this project's
// machines it hashes data already in cache 4-5x faster (35 GB/s instead of 7-8) and data from memory at the speed
// of memory. io/checksum.cc calls it only where the CPU has AVX2.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ckpt::io {

#if defined(__x86_64__)
uint64_t ChecksumAvx2(const void* data, size_t size);
#endif

}  // namespace ckpt::io

// XXH3-64 compiled for wider vectors than Debian's libxxhash (built for baseline x86-64, SSE2) ever uses: on this
// project's machines it hashes data already in cache at 25-33 GB/s with AVX2 and 50-58 GB/s with AVX-512, instead
// of 7-8, and data from memory at the speed of memory. io/checksum.cc picks the widest build the CPU runs; every
// build gives the library's values, since stored checksums are compared across machines.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ckpt::io {

// One build's XXH3 calls; the streaming ones on a state of BlockChecksummer::kStateBytes (io/checksum.h) that only
// this build touches from its reset on.
struct Xxh3Build {
  uint64_t (*checksum)(const void* data, size_t size);
  void (*reset)(void* state);
  void (*update)(void* state, const void* data, size_t size);
  uint64_t (*digest)(const void* state);
  // Copies `size` bytes through non-temporal stores and returns their XXH3-64, in one pass: each 64-byte stripe is
  // read from memory once, then stored and hashed. `dst` is 64-byte aligned. Null where a build has no such copy.
  uint64_t (*copy_and_checksum)(void* dst, const void* src, size_t size);
};

const Xxh3Build& Xxh3Library();  // Debian's libxxhash: any CPU

#if defined(__x86_64__)
bool CpuRunsXxh3Avx512();       // what Xxh3Avx512 needs of the CPU
const Xxh3Build& Xxh3Avx2();    // io/xxh3_avx2.cc: for CPUs with AVX2
const Xxh3Build& Xxh3Avx512();  // io/xxh3_avx512.cc: for CPUs with AVX512F, VL, BW, DQ and BMI2 (x86-64-v4)
#endif

}  // namespace ckpt::io

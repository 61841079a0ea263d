// ckpt_bench_checksum --mib S: the CPU time of verifying S MiB once, as bench/run's CPU baselines add it to fio's.
// A load checks every block it reads against its XXH3-64 and a save hashes every block it writes; fio does neither,
// so beside fio's read and write bench/run prints this pass too: the library's own checksum (the widest build the
// CPU runs, io/xxh3_builds.h) over S MiB of memory in 1 MiB blocks, in order, after every byte was written, so that
// all but the last few blocks have left the cache, as a loaded or saved block has by the time it is hashed.
// Prints `checksum_seconds` and `checksum_cpu_seconds` (this thread's CPU time over the pass).
#include <sys/mman.h>
#include <time.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "io/checksum.h"

namespace {

constexpr uint64_t kBlockBytes = 1ull << 20;  // the library's checksum block

double Seconds(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "ckpt_bench_checksum: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || std::strcmp(argv[1], "--mib") != 0) return Fail("usage: ckpt_bench_checksum --mib S");
  char* end = nullptr;
  const unsigned long long mib = std::strtoull(argv[2], &end, 10);
  if (*end != '\0' || mib == 0 || mib > (1ull << 24)) return Fail("--mib takes a size in MiB, 1 to 16777216");
  const uint64_t bytes = mib << 20;
  void* mapping = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) return Fail("cannot map " + std::to_string(bytes) + " bytes: " + std::strerror(errno));
  auto* data = static_cast<uint64_t*>(mapping);
  for (uint64_t i = 0; i < bytes / sizeof(uint64_t); ++i) data[i] = i * 0x9e3779b97f4a7c15ull;
  const char* bytes_at = static_cast<const char*>(mapping);
  const double wall = Seconds(CLOCK_MONOTONIC), cpu = Seconds(CLOCK_THREAD_CPUTIME_ID);
  // Kept in a volatile, so that no compiler drops the pass; its value says nothing.
  volatile uint64_t mixed = 0;
  for (uint64_t at = 0; at < bytes; at += kBlockBytes) mixed = mixed ^ ckpt::io::Checksum(bytes_at + at, kBlockBytes);
  const double cpu_s = Seconds(CLOCK_THREAD_CPUTIME_ID) - cpu, wall_s = Seconds(CLOCK_MONOTONIC) - wall;
  munmap(mapping, bytes);
  std::printf("checksum_seconds %.6f\nchecksum_cpu_seconds %.6f\n", wall_s, cpu_s);
  return 0;
}

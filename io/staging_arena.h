// The staging arena: one shared-memory region (a memfd) per rank that the rank's I/O worker processes map: saves
// are copied into it and written from it, loads are read into it and copied out. Reused across saves and bounded: a
// save larger than the arena waits for space that earlier writes release, so memory stays bounded by the arena,
// never by the state.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "common/status.h"

namespace ckpt::io {

// Offsets and sizes handed out are multiples of this (O_DIRECT and page alignment).
inline constexpr uint64_t kArenaAlignment = 4096;
// The smallest arena accepted: enough for a few large requests in flight.
inline constexpr uint64_t kMinArenaBytes = 64ull << 20;

struct ArenaRegion {
  uint64_t offset = 0;
  uint64_t size = 0;
};

class StagingArena {
 public:
  // A memfd of `capacity` bytes (rounded up to 2 MiB), mapped shared; pages are committed when first touched.
  // kInvalidArgument below kMinArenaBytes.
  static Result<std::unique_ptr<StagingArena>> Create(uint64_t capacity);
  ~StagingArena();
  StagingArena(const StagingArena&) = delete;
  StagingArena& operator=(const StagingArena&) = delete;

  int fd() const { return fd_; }
  uint64_t capacity() const { return capacity_; }
  char* data() const { return data_; }

  // Reserves `size` bytes (rounded up to kArenaAlignment), waiting until that much contiguous space is free.
  // kInvalidArgument if size exceeds the capacity; kTimeout after `timeout`.
  Result<ArenaRegion> Allocate(uint64_t size, std::chrono::milliseconds timeout);
  // Allocate for a caller that has regions of its own in flight: while the arena is full, `finish_oldest` is called
  // (it completes the caller's oldest use of the arena and releases its region, returning false when the caller
  // has nothing in flight); only then does it wait up to `timeout` for other users' releases.
  Result<ArenaRegion> AllocateOrFinish(uint64_t size, std::chrono::milliseconds timeout,
                                       const std::function<bool()>& finish_oldest);
  // Returns a region from Allocate; wakes waiting allocations.
  void Release(const ArenaRegion& region);
  uint64_t bytes_in_use() const;

 private:
  StagingArena(int fd, char* data, uint64_t capacity);
  bool TryAllocateLocked(uint64_t size, ArenaRegion* out);

  int fd_;
  char* data_;
  uint64_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable released_;
  std::map<uint64_t, uint64_t> free_;  // offset -> size, coalesced
  uint64_t in_use_ = 0;
};

// clamp(physical memory / 8, 256 MiB, 8 GiB): a rank's default arena.
uint64_t DefaultArenaCapacity();

}  // namespace ckpt::io

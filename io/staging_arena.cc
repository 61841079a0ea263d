#include "io/staging_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <iterator>
#include <string>

#include "common/os_error.h"
#include "io/committed_memory.h"

namespace ckpt::io {
namespace {

// Capacities are whole huge pages, so the kernel may back the arena with transparent huge pages.
constexpr uint64_t kCapacityGranule = 2ull << 20;
constexpr uint64_t kDefaultMinBytes = 256ull << 20;
constexpr uint64_t kDefaultMaxBytes = 8ull << 30;
constexpr char kMemfdName[] = "ckpt-staging-arena";

uint64_t RoundUp(uint64_t value, uint64_t granule) { return (value + granule - 1) / granule * granule; }

}  // namespace

Result<std::unique_ptr<StagingArena>> StagingArena::Create(uint64_t capacity) {
  if (capacity < kMinArenaBytes) {
    return InvalidArgument("staging arena of " + std::to_string(capacity) + " bytes is below the minimum of " +
                           std::to_string(kMinArenaBytes));
  }
  if (capacity > UINT64_MAX - kCapacityGranule) {
    return InvalidArgument("staging arena of " + std::to_string(capacity) + " bytes is too large");
  }
  const uint64_t rounded = RoundUp(capacity, kCapacityGranule);
  // CLOEXEC: the worker pool hands the fd to its helpers explicitly (dup2), so no other child inherits it.
  const int fd = memfd_create(kMemfdName, MFD_CLOEXEC);
  if (fd < 0) return OsError("cannot create the staging arena's memfd", errno);
  if (ftruncate(fd, static_cast<off_t>(rounded)) != 0) {
    const int err = errno;
    close(fd);
    return OsError("cannot size the staging arena to " + std::to_string(rounded) + " bytes", err);
  }
  void* data = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    const int err = errno;
    close(fd);
    return OsError("cannot map the staging arena of " + std::to_string(rounded) + " bytes", err);
  }
  CommitPages(static_cast<char*>(data), rounded);  // no save pays first-touch faults: they cost more than the copy
  return std::unique_ptr<StagingArena>(new StagingArena(fd, static_cast<char*>(data), rounded));
}

StagingArena::StagingArena(int fd, char* data, uint64_t capacity) : fd_(fd), data_(data), capacity_(capacity) {
  free_.emplace(0, capacity);
}

StagingArena::~StagingArena() {
  munmap(data_, capacity_);
  close(fd_);
}

Result<ArenaRegion> StagingArena::Allocate(uint64_t size, std::chrono::milliseconds timeout) {
  if (size == 0) return InvalidArgument("cannot allocate 0 bytes of the staging arena");
  if (size > capacity_) {
    return InvalidArgument("request for " + std::to_string(size) + " bytes exceeds the staging arena of " +
                           std::to_string(capacity_) + " bytes");
  }
  const uint64_t rounded = RoundUp(size, kArenaAlignment);
  ArenaRegion region;
  std::unique_lock<std::mutex> lock(mutex_);
  const bool allocated = released_.wait_for(lock, timeout, [&] { return TryAllocateLocked(rounded, &region); });
  if (!allocated) {
    return Timeout("no " + std::to_string(rounded) + " contiguous bytes of the staging arena came free within " +
                   std::to_string(timeout.count()) + " ms (" + std::to_string(in_use_) + " of " +
                   std::to_string(capacity_) + " bytes in use)");
  }
  return region;
}

// First fit: the lowest free range that is large enough, so long-lived regions gather at the start.
bool StagingArena::TryAllocateLocked(uint64_t size, ArenaRegion* out) {
  const auto fit = std::find_if(free_.begin(), free_.end(), [&](const auto& range) { return range.second >= size; });
  if (fit == free_.end()) return false;
  const uint64_t offset = fit->first;
  const uint64_t remaining = fit->second - size;
  free_.erase(fit);
  if (remaining > 0) free_.emplace(offset + size, remaining);
  in_use_ += size;
  *out = ArenaRegion{offset, size};
  return true;
}

Result<ArenaRegion> StagingArena::AllocateOrFinish(uint64_t size, std::chrono::milliseconds timeout,
                                                   const std::function<bool()>& finish_oldest) {
  while (true) {
    Result<ArenaRegion> region = Allocate(size, std::chrono::milliseconds(0));
    if (region.ok() || region.status().code() != Code::kTimeout) return region;
    if (!finish_oldest()) return Allocate(size, timeout);
  }
}

void StagingArena::Release(const ArenaRegion& region) {
  if (region.size == 0) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const bool in_bounds = region.offset % kArenaAlignment == 0 && region.size % kArenaAlignment == 0 &&
                           region.offset <= capacity_ && region.size <= capacity_ - region.offset;
    auto next = free_.lower_bound(region.offset);
    const bool overlaps_next = next != free_.end() && next->first < region.offset + region.size;
    const bool overlaps_previous =
        next != free_.begin() && std::prev(next)->first + std::prev(next)->second > region.offset;
    // A region not from Allocate, or released twice: keeping the map consistent matters more than the caller's bug.
    assert(in_bounds && !overlaps_next && !overlaps_previous);
    if (!in_bounds || overlaps_next || overlaps_previous) return;

    uint64_t offset = region.offset;
    uint64_t size = region.size;
    if (next != free_.end() && next->first == offset + size) {
      size += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto previous = std::prev(next);
      if (previous->first + previous->second == offset) {
        offset = previous->first;
        size += previous->second;
        free_.erase(previous);
      }
    }
    free_.emplace(offset, size);
    in_use_ -= region.size;
  }
  // Waiters want different sizes: each rechecks whether the coalesced space now fits it.
  released_.notify_all();
}

uint64_t StagingArena::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}

uint64_t DefaultArenaCapacity() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return kDefaultMinBytes;
  const uint64_t physical = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
  return std::clamp(physical / 8, kDefaultMinBytes, kDefaultMaxBytes);
}

}  // namespace ckpt::io

// Simulated device memory and pinned host ranges. A device allocation is a memfd mapped twice: PROT_NONE at the
// address handed to the caller, so host code that touches device memory faults as it would on a GPU, and
// read-write at a shadow address that only the simulator uses to move bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace simgpu {

struct Allocation {
  uintptr_t base = 0;
  size_t size = 0;    // as requested: a device range must end within it
  size_t mapped = 0;  // rounded up to pages: the address space the allocation occupies
  int device = 0;
  char* shadow = nullptr;
};

class MemoryRegistry {
 public:
  // The process's registry, never destroyed: stream threads may still use it while the process exits.
  static MemoryRegistry& Get();

  // CUDA error numbers: kCudaErrorMemoryAllocation beyond the device's capacity or when mapping fails.
  int Allocate(int device, size_t size, void** ptr);
  // kCudaErrorInvalidValue unless `ptr` is the base of a live allocation.
  int Free(void* ptr);

  // The allocation whose address space holds `ptr`, if any.
  bool Find(const void* ptr, Allocation* found) const;
  // The shadow of [ptr, ptr + size), or kCudaErrorInvalidValue unless the range lies inside one allocation.
  int Translate(const void* ptr, size_t size, char** shadow) const;
  // True when [ptr, ptr + size) touches the address space of any allocation.
  bool OverlapsDevice(const void* ptr, size_t size) const;

  // kCudaErrorHostMemoryAlreadyRegistered when the range overlaps a registered one; kCudaErrorInvalidValue for
  // an empty, unmapped or device range.
  int RegisterHost(void* ptr, size_t size);
  // kCudaErrorHostMemoryNotRegistered unless `ptr` is the start of a registered range.
  int UnregisterHost(void* ptr);
  // True when [ptr, ptr + size) lies inside one registered range (pinned: copies to and from it are asynchronous).
  bool IsPinned(const void* ptr, size_t size) const;

 private:
  MemoryRegistry();
  // The entry of `map` whose range [key, key + extent) holds `address`, or map.end().
  template <typename Map, typename Extent>
  static typename Map::const_iterator Containing(const Map& map, uintptr_t address, Extent extent);

  mutable std::mutex mutex_;
  std::map<uintptr_t, Allocation> allocations_;
  std::map<uintptr_t, size_t> pinned_;  // base -> size
  std::vector<size_t> used_bytes_;      // per device
  size_t device_capacity_;
  size_t page_size_;
};

}  // namespace simgpu

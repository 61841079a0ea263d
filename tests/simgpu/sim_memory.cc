#include "tests/simgpu/sim_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "tests/simgpu/sim_config.h"
#include "tests/simgpu/sim_cuda_api.h"

namespace simgpu {
namespace {

// Maps `bytes` of `fd` with `protection`, or returns nullptr.
char* MapShared(int fd, size_t bytes, int protection) {
  void* address = mmap(nullptr, bytes, protection, MAP_SHARED, fd, 0);
  return address == MAP_FAILED ? nullptr : static_cast<char*>(address);
}

// True when every page of [ptr, ptr + size) is mapped in this process (mincore fails on a hole).
bool IsMapped(const void* ptr, size_t size, size_t page_size) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(ptr) / page_size * page_size;
  const uintptr_t end = reinterpret_cast<uintptr_t>(ptr) + size;
  std::vector<unsigned char> residency((end - first + page_size - 1) / page_size);
  return mincore(reinterpret_cast<void*>(first), end - first, residency.data()) == 0;
}

}  // namespace

MemoryRegistry& MemoryRegistry::Get() {
  static MemoryRegistry* registry = new MemoryRegistry();
  return *registry;
}

MemoryRegistry::MemoryRegistry()
    : used_bytes_(static_cast<size_t>(DeviceCount()), 0),
      device_capacity_(DeviceCapacityBytes()),
      page_size_(static_cast<size_t>(sysconf(_SC_PAGESIZE))) {}

template <typename Map, typename Extent>
typename Map::const_iterator MemoryRegistry::Containing(const Map& map, uintptr_t address, Extent extent) {
  auto it = map.upper_bound(address);
  if (it == map.begin()) return map.end();
  --it;
  return address < it->first + extent(it->second) ? it : map.end();
}

int MemoryRegistry::Allocate(int device, size_t size, void** ptr) {
  const size_t mapped = (size + page_size_ - 1) / page_size_ * page_size_;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (mapped < size || device_capacity_ - used_bytes_[device] < mapped) return kCudaErrorMemoryAllocation;
    used_bytes_[device] += mapped;
  }
  const std::string name = "simgpu-device-" + std::to_string(device);
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  char* device_view = nullptr;
  char* shadow = nullptr;
  if (fd >= 0 && ftruncate(fd, static_cast<off_t>(mapped)) == 0) {
    device_view = MapShared(fd, mapped, PROT_NONE);
    shadow = MapShared(fd, mapped, PROT_READ | PROT_WRITE);
  }
  if (fd >= 0) close(fd);
  std::lock_guard<std::mutex> lock(mutex_);
  if (device_view == nullptr || shadow == nullptr) {
    if (device_view != nullptr) munmap(device_view, mapped);
    if (shadow != nullptr) munmap(shadow, mapped);
    used_bytes_[device] -= mapped;
    return kCudaErrorMemoryAllocation;
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(device_view);
  allocations_[base] = Allocation{base, size, mapped, device, shadow};
  *ptr = device_view;
  return kCudaSuccess;
}

int MemoryRegistry::Free(void* ptr) {
  Allocation allocation;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = allocations_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == allocations_.end()) return kCudaErrorInvalidValue;
    allocation = it->second;
    allocations_.erase(it);
    used_bytes_[allocation.device] -= allocation.mapped;
  }
  munmap(reinterpret_cast<void*>(allocation.base), allocation.mapped);
  munmap(allocation.shadow, allocation.mapped);
  return kCudaSuccess;
}

bool MemoryRegistry::Find(const void* ptr, Allocation* found) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = Containing(allocations_, reinterpret_cast<uintptr_t>(ptr), [](const Allocation& a) { return a.mapped; });
  if (it == allocations_.end()) return false;
  *found = it->second;
  return true;
}

int MemoryRegistry::Translate(const void* ptr, size_t size, char** shadow) const {
  Allocation allocation;
  if (!Find(ptr, &allocation)) return kCudaErrorInvalidValue;
  const size_t offset = reinterpret_cast<uintptr_t>(ptr) - allocation.base;
  if (offset > allocation.size || size > allocation.size - offset) return kCudaErrorInvalidValue;
  *shadow = allocation.shadow + offset;
  return kCudaSuccess;
}

bool MemoryRegistry::OverlapsDevice(const void* ptr, size_t size) const {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(ptr);
  const uintptr_t end = begin + size;
  std::lock_guard<std::mutex> lock(mutex_);
  // Allocations are disjoint: only the last one starting before `end` can reach into the range.
  auto it = allocations_.lower_bound(end);
  if (it == allocations_.begin()) return false;
  --it;
  return it->first + it->second.mapped > begin;
}

int MemoryRegistry::RegisterHost(void* ptr, size_t size) {
  if (ptr == nullptr || size == 0 || reinterpret_cast<uintptr_t>(ptr) + size < reinterpret_cast<uintptr_t>(ptr)) {
    return kCudaErrorInvalidValue;
  }
  if (OverlapsDevice(ptr, size) || !IsMapped(ptr, size, page_size_)) return kCudaErrorInvalidValue;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  auto next = pinned_.lower_bound(begin);
  if (next != pinned_.end() && next->first < begin + size) return kCudaErrorHostMemoryAlreadyRegistered;
  if (next != pinned_.begin() && std::prev(next)->first + std::prev(next)->second > begin) {
    return kCudaErrorHostMemoryAlreadyRegistered;
  }
  pinned_[begin] = size;
  return kCudaSuccess;
}

int MemoryRegistry::UnregisterHost(void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  return pinned_.erase(reinterpret_cast<uintptr_t>(ptr)) == 1 ? kCudaSuccess : kCudaErrorHostMemoryNotRegistered;
}

bool MemoryRegistry::IsPinned(const void* ptr, size_t size) const {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = Containing(pinned_, begin, [](size_t extent) { return extent; });
  return it != pinned_.end() && begin + size <= it->first + it->second;
}

}  // namespace simgpu

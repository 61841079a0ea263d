// Anonymous host memory whose pages are all present from the start: one madvise(MADV_POPULATE_WRITE) commits them
// several times faster than the page faults a first write would take (on virtual machines especially), and keeps
// those faults out of the copies that then fill the memory.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace ckpt::io {

// Commits every page of [data, data + size) now; falls back to touching them one by one where the kernel lacks
// MADV_POPULATE_WRITE (Linux < 5.14).
void CommitPages(char* data, uint64_t size);

class CommittedMemory {
 public:
  CommittedMemory() = default;
  // Page-aligned, committed memory of at least `size` bytes; kNoMemory if the kernel refuses the mapping.
  static Result<CommittedMemory> Allocate(uint64_t size);
  ~CommittedMemory();
  CommittedMemory(CommittedMemory&& other) noexcept;
  CommittedMemory& operator=(CommittedMemory&& other) noexcept;
  CommittedMemory(const CommittedMemory&) = delete;
  CommittedMemory& operator=(const CommittedMemory&) = delete;

  char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  CommittedMemory(char* data, uint64_t size) : data_(data), size_(size) {}
  void Release();

  char* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace ckpt::io

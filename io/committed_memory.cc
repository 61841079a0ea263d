#include "io/committed_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "common/os_error.h"

namespace ckpt::io {
namespace {

// MADV_POPULATE_WRITE (Linux 5.14), not yet in every libc's headers.
constexpr int kMadvisePopulateWrite = 23;

}  // namespace

void CommitPages(char* data, uint64_t size) {
  if (size == 0 || madvise(data, size, kMadvisePopulateWrite) == 0) return;
  const long page = sysconf(_SC_PAGESIZE);
  for (uint64_t at = 0; at < size; at += static_cast<uint64_t>(page)) data[at] = 0;
}

Result<CommittedMemory> CommittedMemory::Allocate(uint64_t size) {
  if (size == 0) return CommittedMemory();
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) {
    return Status(Code::kNoMemory, "cannot map " + std::to_string(size) + " bytes: " + OsErrorText(errno));
  }
  CommitPages(static_cast<char*>(data), size);
  return CommittedMemory(static_cast<char*>(data), size);
}

CommittedMemory::~CommittedMemory() { Release(); }

CommittedMemory::CommittedMemory(CommittedMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

CommittedMemory& CommittedMemory::operator=(CommittedMemory&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void CommittedMemory::Release() {
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace ckpt::io

#include "io/file_mapping.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "common/os_error.h"
#include "io/file_io.h"

namespace ckpt::io {

Result<FileMapping> FileMapping::Map(int fd, const std::string& path, uint64_t offset, uint64_t length) {
  FileMapping mapping;
  if (length == 0) return mapping;  // mmap refuses an empty length
  const uint64_t lead = offset % static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  void* base = mmap(nullptr, lead + length, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(offset - lead));
  if (base == MAP_FAILED) return OsError("cannot map " + Quoted(path), errno);
  mapping.base_ = base;
  mapping.mapped_ = lead + length;
  mapping.data_ = static_cast<char*>(base) + lead;
  mapping.size_ = length;
  return mapping;
}

Result<FileMapping> FileMapping::MapForFilling(int fd, const std::string& path, uint64_t length) {
  FileMapping mapping;
  if (length == 0) return mapping;
  void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) return OsError("cannot map " + Quoted(path) + " for writing", errno);
  mapping.base_ = base;
  mapping.mapped_ = length;
  mapping.data_ = static_cast<char*>(base);
  mapping.size_ = length;
  mapping.writable_ = true;
  return mapping;
}

FileMapping::~FileMapping() { Unmap(); }

FileMapping::FileMapping(FileMapping&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      mapped_(std::exchange(other.mapped_, 0)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      writable_(std::exchange(other.writable_, false)) {}

FileMapping& FileMapping::operator=(FileMapping&& other) noexcept {
  if (this != &other) {
    Unmap();
    base_ = std::exchange(other.base_, nullptr);
    mapped_ = std::exchange(other.mapped_, 0);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    writable_ = std::exchange(other.writable_, false);
  }
  return *this;
}

void FileMapping::Unmap() {
  if (base_ != nullptr) munmap(base_, mapped_);
  base_ = nullptr;
}

}  // namespace ckpt::io

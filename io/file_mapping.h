// A read-only shared mapping of a range of a file, for handing a file's bytes where they lie in the page cache to
// something that reads them in its own time (the memory tier's replication sends from its files' mappings).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace ckpt::io {

class FileMapping {
 public:
  FileMapping() = default;
  // Bytes [offset, offset + length) of the open file `fd` (`path` names it in errors), mapped from the page that
  // holds the first, its pages mapped as they are touched; an empty range maps nothing.
  static Result<FileMapping> Map(int fd, const std::string& path, uint64_t offset, uint64_t length);
  ~FileMapping();
  FileMapping(FileMapping&& other) noexcept;
  FileMapping& operator=(FileMapping&& other) noexcept;
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;

  const char* data() const { return data_; }  // the range's first byte
  uint64_t size() const { return size_; }

 private:
  void Unmap();

  void* base_ = nullptr;  // the mapping, from a page boundary
  size_t mapped_ = 0;
  const char* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace ckpt::io

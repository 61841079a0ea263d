// A shared mapping of a range of a file, for handing a file's bytes where they lie in the page cache to something
// that reads or fills them in its own time (the memory tier's replication sends from its files' mappings, and
// receives into the mappings of files whose pages exist already).
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
  // The first `length` bytes of `fd`, open for reading and writing, mapped for writing with every page mapped at
  // once: filling the file then costs no fault per page, where its pages exist already (a file of tmpfs written
  // before); an empty range maps nothing.
  static Result<FileMapping> MapForFilling(int fd, const std::string& path, uint64_t length);
  ~FileMapping();
  FileMapping(FileMapping&& other) noexcept;
  FileMapping& operator=(FileMapping&& other) noexcept;
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;

  const char* data() const { return data_; }                           // the range's first byte
  char* writable_data() const { return writable_ ? data_ : nullptr; }  // the same, where mapped for filling
  uint64_t size() const { return size_; }

 private:
  void Unmap();

  void* base_ = nullptr;  // the mapping, from a page boundary
  size_t mapped_ = 0;
  char* data_ = nullptr;
  uint64_t size_ = 0;
  bool writable_ = false;
};

}  // namespace ckpt::io

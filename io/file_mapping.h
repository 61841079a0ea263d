// A read-only shared mapping of a range of a file, for reading a file's bytes where they lie in the page cache (a
// checkpoint in shared memory, above all) instead of copying them out with read calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace ckpt::io {

class FileMapping {
 public:
  // kPopulated fills the mapping's page tables at once (MAP_POPULATE): far cheaper than a fault every few pages
  // when every byte is read next; kOnDemand maps pages as they are touched.
  enum class Pages { kOnDemand, kPopulated };

  FileMapping() = default;
  // Bytes [offset, offset + length) of the open file `fd` (`path` names it in errors), mapped from the page that
  // holds the first; an empty range maps nothing.
  static Result<FileMapping> Map(int fd, const std::string& path, uint64_t offset, uint64_t length, Pages pages);
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

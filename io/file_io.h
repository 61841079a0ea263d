// Plain POSIX file operations with complete-transfer loops and errors that name the file; errno picks the code as
// OsError (common/os_error.h) does. A read past the end of a file is kCorrupt ("truncated"), since stored data
// shorter than its manifest says is damage, not an I/O fault.
//
// Paths may also be object storage URLs ("s3://bucket/prefix", io/object_storage.h): File::OpenBeneath opens an object
// for reading (ReadAt and Size; nothing else), MakeDirectories and SyncDirectory have nothing to do, PathExists and
// IsDirectory ask whether an object or a prefix is there, RemoveTree removes every object under the URL (and aborts
// its uploads), ListDirectory names what lies under it, and WriteFileDurably creates an object only if absent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace ckpt::io {

class File {
 public:
  File() = default;
  ~File();
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // A new file (fails with kAlreadyExists if one is there), opened for writing.
  static Result<File> CreateNew(const std::string& path);
  // For reading: `name` beneath the directory `root`, as a checkpoint names it: a regular file reached without
  // following links, opened without blocking (OpenBeneath in io/confined_open.h says what is refused). Beneath an
  // object storage URL: the object root + "/" + name, whose name must be made of plain components.
  static Result<File> OpenBeneath(const std::string& root, const std::string& name);

  // Writes all `size` bytes at `offset`, retrying short writes and EINTR.
  Status WriteAt(const void* data, size_t size, uint64_t offset);
  // Reads exactly `size` bytes at `offset`; kCorrupt naming the file and offset if the file ends first.
  Status ReadAt(void* data, size_t size, uint64_t offset) const;
  Status Sync();  // fdatasync
  Result<uint64_t> Size() const;
  Status Close();  // reports close() errors, which NFS defers to here

  int fd() const { return fd_; }  // -1 for an object
  const std::string& path() const { return path_; }

 private:
  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
  std::optional<uint64_t> object_size_;  // set for an object of object storage, which path_ names
};

Status MakeDirectories(const std::string& path);  // mkdir -p
// fsync of the directory itself, so that entries made or renamed in it survive a power loss; the test build's
// CKPT_FAULT_DIRECTORY_SYNC_EIO can fail it for one path (common/fault_injection.h).
Status SyncDirectory(const std::string& path);
// Renames `from` to `to`, failing with kAlreadyExists instead of replacing an existing `to`.
Status RenameNoReplace(const std::string& from, const std::string& to);
// Removes a file or a whole directory tree; a missing path is not an error.
Status RemoveTree(const std::string& path);
bool PathExists(const std::string& path);
bool IsDirectory(const std::string& path);
// The directory holding `path` ("." for a bare name), whose entry for `path` must be synced to make a creation or
// rename there durable. Trailing slashes of `path` are ignored.
std::string ParentDirectory(std::string path);
// The entry names of `dir` but "." and "..", sorted.
Result<std::vector<std::string>> ListDirectory(const std::string& dir);
// Writes `data` to a new file at `path`, fdatasyncs and closes it.
Status WriteFileDurably(const std::string& path, const void* data, size_t size);
// Reads the whole file `name` beneath `dir` (File::OpenBeneath); kCorrupt if it is larger than max_size (a hostile
// file must not exhaust memory).
Result<std::string> ReadWholeFile(const std::string& dir, const std::string& name, uint64_t max_size);
// "a/b" + "c" -> "a/b/c"
std::string JoinPath(const std::string& a, const std::string& b);

}  // namespace ckpt::io

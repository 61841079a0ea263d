#include "io/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/fault_injection.h"
#include "common/os_error.h"
#include "io/confined_open.h"
#include "io/object_storage.h"

namespace ckpt::io {
namespace {

// Not every libc declares RENAME_NOREPLACE; its value is part of the kernel ABI.
#ifndef RENAME_NOREPLACE
constexpr unsigned kRenameNoReplace = 1u << 0;
#else
constexpr unsigned kRenameNoReplace = RENAME_NOREPLACE;
#endif

Status CloseFd(int fd, const std::string& path) {
  // Linux releases the descriptor even when close() fails, so retrying on EINTR could close another thread's file.
  if (close(fd) != 0 && errno != EINTR) return OsError("cannot close " + Quoted(path), errno);
  return Status::Ok();
}

Status RemoveDirectoryContents(int dir_fd, const std::string& dir_path);

// Removes one entry of an open directory without following it if it is a symbolic link.
Status RemoveEntryAt(int dir_fd, const char* name, const std::string& path) {
  struct stat st;
  if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return OsError("cannot inspect " + Quoted(path), errno);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (unlinkat(dir_fd, name, 0) != 0 && errno != ENOENT) return OsError("cannot remove " + Quoted(path), errno);
    return Status::Ok();
  }
  // O_NOFOLLOW: if the directory was swapped for a link since fstatat, refuse rather than walk out of the tree.
  const int child_fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (child_fd < 0) return OsError("cannot open directory " + Quoted(path), errno);
  RETURN_IF_ERROR(RemoveDirectoryContents(child_fd, path));
  if (unlinkat(dir_fd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return OsError("cannot remove directory " + Quoted(path), errno);
  }
  return Status::Ok();
}

// Empties the directory open as `dir_fd` and closes it.
Status RemoveDirectoryContents(int dir_fd, const std::string& dir_path) {
  DIR* dir = fdopendir(dir_fd);
  if (dir == nullptr) {
    const int err = errno;
    close(dir_fd);
    return OsError("cannot list " + Quoted(dir_path), err);
  }
  Status status;
  while (status.ok()) {
    errno = 0;
    const dirent* entry = readdir(dir);
    if (entry == nullptr) {
      if (errno != 0) status = OsError("cannot list " + Quoted(dir_path), errno);
      break;
    }
    if (std::strcmp(entry->d_name, ".") == 0 || std::strcmp(entry->d_name, "..") == 0) continue;
    status = RemoveEntryAt(dirfd(dir), entry->d_name, JoinPath(dir_path, entry->d_name));
  }
  closedir(dir);
  return status;
}

}  // namespace

File::~File() {
  if (fd_ >= 0) close(fd_);
}

File::File(File&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)), object_size_(other.object_size_) {
  other.fd_ = -1;
}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    object_size_ = other.object_size_;
    other.fd_ = -1;
  }
  return *this;
}

Result<File> File::CreateNew(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return OsError("cannot create " + Quoted(path), errno);
  return File(fd, path);
}

Result<File> File::OpenBeneath(const std::string& root, const std::string& name) {
  if (IsObjectStorePath(root)) {
    const std::vector<std::string> components = PathComponents(name);
    if (const std::string* c = FirstNonPlainComponent(components); c != nullptr || components.empty()) {
      return InvalidArgument("refusing to open " + Quoted(name) + " beneath " + Quoted(root) +
                             ": only plain names are allowed");
    }
    File object(-1, JoinPath(root, name));
    ASSIGN_OR_RETURN(object.object_size_, ObjectSize(object.path_));
    return object;
  }
  ASSIGN_OR_RETURN(const int fd, io::OpenBeneath(root, name, O_RDONLY));
  return File(fd, JoinPath(root, name));
}

Status File::WriteAt(const void* data, size_t size, uint64_t offset) {
  if (object_size_) return Unsupported(Quoted(path_) + " is an object, opened for reading");
  const auto* bytes = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd_, bytes + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return OsError("cannot write " + std::to_string(size - done) + " bytes to " + Quoted(path_) + " at offset " +
                         std::to_string(offset + done),
                     errno);
    }
    if (n == 0) {
      return IoError("writing " + Quoted(path_) + " at offset " + std::to_string(offset + done) +
                     ": the system accepted no bytes");
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status File::ReadAt(void* data, size_t size, uint64_t offset) const {
  if (object_size_) {
    if (offset > *object_size_ || size > *object_size_ - offset) {
      return Corrupt(Quoted(path_) + " is truncated: it ends at offset " + std::to_string(*object_size_) + ", but " +
                     std::to_string(size) + " bytes were expected from offset " + std::to_string(offset));
    }
    return ReadObjectRange(path_, offset, size, static_cast<char*>(data));
  }
  auto* bytes = static_cast<char*>(data);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pread(fd_, bytes + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return OsError("cannot read " + std::to_string(size - done) + " bytes from " + Quoted(path_) + " at offset " +
                         std::to_string(offset + done),
                     errno);
    }
    if (n == 0) {
      return Corrupt(Quoted(path_) + " is truncated: it ends at offset " + std::to_string(offset + done) + ", but " +
                     std::to_string(size) + " bytes were expected from offset " + std::to_string(offset));
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status File::Sync() {
  if (object_size_) return Status::Ok();  // an object is durable once its PUT returns
  if (fdatasync(fd_) != 0) return OsError("cannot sync " + Quoted(path_), errno);
  return Status::Ok();
}

Result<uint64_t> File::Size() const {
  if (object_size_) return *object_size_;
  struct stat st;
  if (fstat(fd_, &st) != 0) return OsError("cannot stat " + Quoted(path_), errno);
  return static_cast<uint64_t>(st.st_size);
}

Status File::Close() {
  if (fd_ < 0) return Status::Ok();
  const int fd = fd_;
  fd_ = -1;
  return CloseFd(fd, path_);
}

Status MakeDirectories(const std::string& path) {
  if (path.empty()) return InvalidArgument("cannot create a directory with an empty path");
  if (IsObjectStorePath(path)) return Status::Ok();  // prefixes exist as soon as an object is under them
  size_t end = 0;
  while (end != std::string::npos) {
    end = path.find('/', end + 1);
    const std::string prefix = path.substr(0, end);
    if (mkdir(prefix.c_str(), 0755) == 0) continue;
    const int err = errno;
    if (IsDirectory(prefix)) continue;
    if (err == EEXIST) return AlreadyExists("cannot create directory " + Quoted(prefix) + ": a file is there");
    return OsError("cannot create directory " + Quoted(prefix), err);
  }
  return Status::Ok();
}

Status SyncDirectory(const std::string& path) {
  if (IsObjectStorePath(path)) return Status::Ok();
  if (const int err = fault::InjectedDirectorySyncError(path); err != 0) {
    return OsError("cannot sync directory " + Quoted(path), err);
  }
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return OsError("cannot open directory " + Quoted(path), errno);
  const int rc = fsync(fd);
  const int err = errno;
  RETURN_IF_ERROR(CloseFd(fd, path));
  if (rc != 0) return OsError("cannot sync directory " + Quoted(path), err);
  return Status::Ok();
}

Status RenameNoReplace(const std::string& from, const std::string& to) {
  const std::string action = "cannot rename " + Quoted(from) + " to " + Quoted(to);
  if (syscall(SYS_renameat2, AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), kRenameNoReplace) == 0) {
    return Status::Ok();
  }
  if (errno != EINVAL && errno != ENOSYS) return OsError(action, errno);
  // The kernel or file system (some network and FUSE file systems) lacks RENAME_NOREPLACE. Checking first leaves a
  // small race: a `to` created between the check and rename() may be replaced. Only a concurrent writer of the same
  // name can lose, and checkpoint directory names are unique per save.
  if (PathExists(to)) return AlreadyExists(action + ": the target exists");
  if (rename(from.c_str(), to.c_str()) != 0) return OsError(action, errno);
  return Status::Ok();
}

Status RemoveTree(const std::string& path) {
  if (IsObjectStorePath(path)) {
    RETURN_IF_ERROR(RemoveObject(path));
    return RemoveObjectsUnder(path);
  }
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return OsError("cannot inspect " + Quoted(path), errno);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (unlink(path.c_str()) != 0 && errno != ENOENT) return OsError("cannot remove " + Quoted(path), errno);
    return Status::Ok();
  }
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return OsError("cannot open directory " + Quoted(path), errno);
  RETURN_IF_ERROR(RemoveDirectoryContents(fd, path));
  if (rmdir(path.c_str()) != 0 && errno != ENOENT) return OsError("cannot remove directory " + Quoted(path), errno);
  return Status::Ok();
}

bool PathExists(const std::string& path) {
  if (IsObjectStorePath(path)) {
    Result<bool> there = ObjectOrPrefixExists(path);
    return there.ok() && *there;
  }
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  if (IsObjectStorePath(path)) return PathExists(path);
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Status WriteFileDurably(const std::string& path, const void* data, size_t size) {
  if (IsObjectStorePath(path)) {
    return CreateObjectExclusive(path, std::string_view(static_cast<const char*>(data), size));
  }
  ASSIGN_OR_RETURN(File file, File::CreateNew(path));
  Status status = file.WriteAt(data, size, 0);
  if (status.ok()) status = file.Sync();
  if (status.ok()) status = file.Close();
  // A partial file must not be mistaken for a complete one by a later reader.
  if (!status.ok()) unlink(path.c_str());
  return status;
}

Result<std::string> ReadWholeFile(const std::string& dir, const std::string& name, uint64_t max_size) {
  ASSIGN_OR_RETURN(File file, File::OpenBeneath(dir, name));
  ASSIGN_OR_RETURN(uint64_t size, file.Size());
  if (size > max_size) {
    return Corrupt(Quoted(file.path()) + " is " + std::to_string(size) + " bytes, more than the limit of " +
                   std::to_string(max_size));
  }
  std::string contents(size, '\0');
  RETURN_IF_ERROR(file.ReadAt(contents.data(), contents.size(), 0));
  return contents;
}

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

std::string ParentDirectory(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Result<std::vector<std::string>> ListDirectory(const std::string& dir) {
  if (IsObjectStorePath(dir)) {
    ASSIGN_OR_RETURN(const std::vector<StoredObject> objects, ListObjects(dir));
    std::vector<std::string> names;
    for (const StoredObject& o : objects) names.push_back(o.name.substr(0, o.name.find('/')));
    names.erase(std::unique(names.begin(), names.end()), names.end());  // listed in key order: duplicates adjoin
    return names;
  }
  DIR* handle = opendir(dir.c_str());
  if (handle == nullptr) return OsError("cannot list " + Quoted(dir), errno);
  std::vector<std::string> names;
  int err = 0;
  while (true) {
    errno = 0;
    const dirent* entry = readdir(handle);
    if (entry == nullptr) {
      err = errno;
      break;
    }
    const std::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  closedir(handle);
  if (err != 0) return OsError("cannot list " + Quoted(dir), err);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace ckpt::io

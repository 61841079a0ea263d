#include "agent/replication_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/os_error.h"
#include "io/file_io.h"

namespace ckpt::agent {

Result<UniqueFd> OpenForSending(const std::string& path, uint64_t* size) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return OsError("cannot open " + Quoted(path) + " to replicate it", errno);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return OsError("cannot stat " + Quoted(path), errno);
  if (!S_ISREG(st.st_mode)) return InvalidArgument(Quoted(path) + " is no regular file; it is not replicated");
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

Result<UniqueFd> CreatePartFile(const std::string& path, uint64_t size, bool recycled) {
  if (!recycled && unlink(path.c_str()) != 0 && errno != ENOENT) {
    return OsError("cannot remove the earlier " + Quoted(path), errno);
  }
  UniqueFd fd(open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC | (recycled ? 0 : O_CREAT | O_EXCL), 0600));
  if (!fd.valid()) return OsError("cannot create " + Quoted(path), errno);
  if (ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    return OsError("cannot size " + Quoted(path) + " to " + std::to_string(size) + " bytes", errno);
  }
  return fd;
}

Result<io::FileMapping> MapIfAllocated(int fd, const std::string& path, uint64_t size) {
  if (!HoldsAllPages(fd, size)) return io::FileMapping();
  return io::FileMapping::MapForFilling(fd, path, size);
}

bool HoldsAllPages(int fd, uint64_t size) {
  struct stat st;
  return fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_blocks) * 512 >= size;  // st_blocks: the pages it holds
}

Status WriteFully(int fd, const char* data, uint64_t size, uint64_t offset, const std::string& path) {
  while (size > 0) {
    const ssize_t wrote = pwrite(fd, data, size, static_cast<off_t>(offset));
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) return OsError("cannot write " + Quoted(path), errno);
    if (wrote == 0) return NoSpace("cannot write " + Quoted(path) + ": no room left");
    data += wrote;
    offset += static_cast<uint64_t>(wrote);
    size -= static_cast<uint64_t>(wrote);
  }
  return Status::Ok();
}

std::string ReplicatedFilePath(const std::string& dir, const std::string& file) {
  return file == "MANIFEST" ? io::JoinPath(dir, file) : io::JoinPath(io::JoinPath(dir, "data"), file);
}

std::string PartialFilePath(const std::string& dir, const std::string& file) {
  const std::string hidden = "." + file + ".part";
  return file == "MANIFEST" ? io::JoinPath(dir, hidden) : io::JoinPath(io::JoinPath(dir, "data"), hidden);
}

std::vector<FileInfo> HeldFiles(const std::string& dir) {
  std::vector<std::string> names = {"MANIFEST"};
  Result<std::vector<std::string>> data = io::ListDirectory(io::JoinPath(dir, "data"));
  if (data.ok()) names.insert(names.end(), data->begin(), data->end());
  std::vector<FileInfo> held;
  for (const std::string& name : names) {
    struct stat st;
    if (!ValidateReplicatedFileName(name).ok() || lstat(ReplicatedFilePath(dir, name).c_str(), &st) != 0 ||
        !S_ISREG(st.st_mode)) {
      continue;
    }
    held.push_back(FileInfo{name, static_cast<uint64_t>(st.st_size)});
  }
  return held;
}

}  // namespace ckpt::agent

#include "collectives/store/private_directory.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "common/os_error.h"

namespace ckpt::coll {
namespace {

std::string Octal(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// A path as the checks compare it: absolute, without "." or ".." steps nor a trailing slash.
std::string Normalized(const std::string& path) {
  std::error_code ignored;
  std::string normal = std::filesystem::absolute(path, ignored).lexically_normal().string();
  while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  return normal;
}

// Opens `name` relative to `at` (AT_FDCWD: a path) and checks what it is, who owns it and who may enter.
Result<UniqueFd> OpenPrivate(int at, const std::string& name, const std::string& shown, const std::string& what) {
  const std::string described = what + " " + Quoted(shown);
  UniqueFd fd(openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    const int err = errno;
    if (err == ENOENT) return NotFound(described + " does not exist");
    if (err == ELOOP || err == ENOTDIR) {
      return InvalidArgument(described +
                             " is a link or no directory: it is refused, as another user may have put "
                             "it there; remove it");
    }
    return OsError("cannot open " + described, err);
  }
  struct stat st = {};
  if (fstat(fd.get(), &st) != 0) return OsError("cannot stat " + described, errno);
  if (st.st_uid != geteuid()) {
    return InvalidArgument(described + " belongs to uid " + std::to_string(st.st_uid) + ", not to this uid " +
                           std::to_string(geteuid()) + ": another user may be posing as this job's; remove it");
  }
  if ((st.st_mode & 077) != 0) {
    return InvalidArgument(described + " has mode " + Octal(st.st_mode) +
                           ", open to other users; it must be 0700: remove it (or chmod 700 it)");
  }
  return fd;
}

}  // namespace

Result<UniqueFd> OpenPrivateDirectory(const std::string& path, const std::string& what) {
  return OpenPrivate(AT_FDCWD, path, path, what);
}

std::string UserPrivateDirectory() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime != nullptr && runtime[0] == '/' && OpenPrivateDirectory(runtime, "XDG_RUNTIME_DIR").ok()) {
    return std::string(runtime) + "/ckpt";
  }
  return "/tmp/ckpt-" + std::to_string(geteuid());
}

Result<UniqueFd> MakePrivateDirectory(const std::string& path, const std::string& what) {
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return OsError("cannot create " + what + " " + Quoted(path), errno);
  }
  return OpenPrivateDirectory(path, what);
}

Result<UniqueFd> OpenPrivateDirectoryBeneath(const std::string& root, const std::string& path,
                                             const std::string& what) {
  const std::string normal_root = Normalized(root), normal_path = Normalized(path);
  const std::filesystem::path entry(normal_path);
  if (normal_path.find('\0') != std::string::npos || entry.parent_path().string() != normal_root ||
      normal_path == normal_root) {
    return InvalidArgument(what + " " + Quoted(path) + " is not directly beneath " + Quoted(normal_root) +
                           ", where it must be");
  }
  UniqueFd root_fd(open(normal_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd.valid()) return OsError("cannot open " + Quoted(normal_root), errno);
  return OpenPrivate(root_fd.get(), entry.filename().string(), path, what);
}

}  // namespace ckpt::coll

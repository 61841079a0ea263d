#include "io/confined_open.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "common/os_error.h"
#include "common/unique_fd.h"

namespace ckpt::io {
namespace {

Status OpenFailure(int err, const std::string& root, const std::string& name) {
  const std::string path = Quoted(root + "/" + name);
  switch (err) {
    case ENOENT:
      return NotFound("no file " + path);
    case ELOOP:
    case ENOTDIR:
      return Corrupt(path +
                     " goes through a symbolic link (or a non-directory): checkpoint files are opened only "
                     "as regular files beneath the checkpoint directory, without following links");
    case EXDEV:
      return Corrupt(path + " leads outside the checkpoint directory " + Quoted(root));
    case EINVAL:
      return InvalidArgument("cannot open " + path + " with these flags (O_DIRECT refused?): " + OsErrorText(err));
    default:
      return OsError("cannot open " + path, err);
  }
}

// openat2 with every component checked by the kernel; -1 with errno ENOSYS where the kernel (or a seccomp profile)
// lacks it.
int OpenResolvedBeneath(int root_fd, const std::string& name, int flags) {
#ifdef SYS_openat2
  struct open_how how;
  std::memset(&how, 0, sizeof how);
  how.flags = static_cast<uint64_t>(flags);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const long fd = syscall(SYS_openat2, root_fd, name.c_str(), &how, sizeof how);
  if (fd < 0 && errno == EPERM) errno = ENOSYS;  // seccomp profiles that predate openat2 answer EPERM
  return static_cast<int>(fd);
#else
  errno = ENOSYS;
  return -1;
#endif
}

// The same, one component at a time: every directory opened with O_NOFOLLOW, then the file itself.
int OpenWalkingBeneath(int root_fd, const std::string& name, int flags) {
  const std::vector<std::string> components = PathComponents(name);
  if (FirstNonPlainComponent(components) != nullptr) {
    errno = EXDEV;
    return -1;
  }
  UniqueFd directory;
  for (size_t i = 0; i + 1 < components.size(); ++i) {
    const int parent = directory.valid() ? directory.get() : root_fd;
    UniqueFd next(openat(parent, components[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) return -1;
    directory = std::move(next);
  }
  return openat(directory.valid() ? directory.get() : root_fd, components.back().c_str(), flags);
}

// Both strategies: the kernel's resolution where `kernel_first` and the kernel has it, else the walk.
Result<int> Open(const std::string& root, const std::string& name, int flags, bool kernel_first) {
  if (name.empty() || name.front() == '/') return Corrupt("file name " + Quoted(name) + " is not relative");
  flags |= O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  UniqueFd root_fd(open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd.valid()) {
    const int err = errno;
    if (err == ENOENT) return NotFound("no checkpoint directory " + Quoted(root));
    return OsError("cannot open the checkpoint directory " + Quoted(root), err);
  }
  int fd = -1;
  errno = ENOSYS;
  if (kernel_first) fd = OpenResolvedBeneath(root_fd.get(), name, flags);
  if (fd < 0 && errno == ENOSYS) fd = OpenWalkingBeneath(root_fd.get(), name, flags);
  if (fd < 0) return OpenFailure(errno, root, name);
  UniqueFd file(fd);
  const std::string path = Quoted(root + "/" + name);
  struct stat st;
  if (fstat(file.get(), &st) != 0) return OsError("cannot stat " + path, errno);
  if (!S_ISREG(st.st_mode)) {
    return Corrupt(path +
                   " is not a regular file (a FIFO, a device or a directory): checkpoint files are read only "
                   "from regular files");
  }
  // Regular files ignore O_NONBLOCK; it is cleared so that nothing downstream sees an unusual descriptor.
  if (fcntl(file.get(), F_SETFL, fcntl(file.get(), F_GETFL) & ~O_NONBLOCK) != 0) {
    return OsError("cannot clear O_NONBLOCK on " + path, errno);
  }
  return file.Release();
}

}  // namespace

std::vector<std::string> PathComponents(const std::string& name) {
  std::vector<std::string> components;
  for (size_t start = 0;;) {
    const size_t slash = name.find('/', start);
    components.push_back(name.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
    if (slash == std::string::npos) return components;
    start = slash + 1;
  }
}

const std::string* FirstNonPlainComponent(const std::vector<std::string>& components) {
  for (const std::string& c : components) {
    if (c.empty() || c == "." || c == "..") return &c;
  }
  return nullptr;
}

Result<int> OpenBeneath(const std::string& root, const std::string& name, int flags) {
  return Open(root, name, flags, true);
}

Result<int> OpenBeneathByWalking(const std::string& root, const std::string& name, int flags) {
  return Open(root, name, flags, false);
}

}  // namespace ckpt::io

#include "io/claimed_directory.h"

#include <fcntl.h>
#include <sys/file.h>

#include <cerrno>

#include "common/os_error.h"
#include "io/file_io.h"

namespace ckpt::io {
namespace {

UniqueFd OpenDirectory(const std::string& path) {
  return UniqueFd(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
}

int TryLock(int fd) {
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

}  // namespace

Result<Claim> ClaimDirectory(const std::string& path) {
  RETURN_IF_ERROR(MakeDirectories(path));
  UniqueFd fd = OpenDirectory(path);
  if (!fd.valid()) return OsError("cannot open " + Quoted(path) + " to claim it", errno);
  const int err = TryLock(fd.get());
  if (err == 0) return Claim(std::move(fd));
  if (err == EWOULDBLOCK) return AlreadyExists(Quoted(path) + " is claimed by another live process");
  return Claim();
}

bool IsClaimed(const std::string& path) {
  UniqueFd fd = OpenDirectory(path);
  if (!fd.valid()) return false;
  // Taking the lock ourselves is the test; it is released with the descriptor, before anything is removed.
  return TryLock(fd.get()) != 0;
}

}  // namespace ckpt::io

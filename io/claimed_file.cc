#include "io/claimed_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/os_error.h"
#include "io/file_io.h"

namespace ckpt::io {
namespace {

// A note is one short line; a longer file is cut, so that a damaged or hostile one cannot flood the message.
constexpr size_t kMaxNoteBytes = 256;

// 0 or the errno of a failed non-blocking exclusive flock.
int TryLock(int fd) {
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

// What the holder wrote about itself, printable characters only; empty in the instant between its lock and its note.
std::string HolderNote(int fd) {
  char buffer[kMaxNoteBytes];
  ssize_t got = -1;
  do {
    got = pread(fd, buffer, sizeof buffer, 0);
  } while (got < 0 && errno == EINTR);
  std::string note;
  for (ssize_t i = 0; i < got && buffer[i] != '\n'; ++i) note += buffer[i] >= ' ' && buffer[i] <= '~' ? buffer[i] : '?';
  return note;
}

Status WriteNote(int fd, const std::string& path, std::string_view note) {
  const std::string line = std::string(note) + "\n";
  if (ftruncate(fd, 0) != 0) return OsError("cannot truncate " + Quoted(path), errno);
  size_t written = 0;
  while (written < line.size()) {
    const ssize_t n = pwrite(fd, line.data() + written, line.size() - written, static_cast<off_t>(written));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return OsError("cannot write the holder's note into " + Quoted(path), n < 0 ? errno : EIO);
    written += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

Result<Claim> ClaimFile(const std::string& path, std::string_view note) {
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644));
  // A read-only file system cannot be written by any job, so there is nothing for a claim to protect.
  if (!fd.valid() && errno == EROFS) return Claim();
  if (!fd.valid()) return OsError("cannot open " + Quoted(path) + " to claim it", errno);
  struct stat st = {};
  if (fstat(fd.get(), &st) != 0) return OsError("cannot stat " + Quoted(path), errno);
  if (!S_ISREG(st.st_mode)) return InvalidArgument(Quoted(path) + " is not a regular file: remove it");
  const int err = TryLock(fd.get());
  if (err == EWOULDBLOCK) {
    const std::string holder = HolderNote(fd.get());
    return AlreadyExists(Quoted(path) + " is claimed by another live process (" +
                         (holder.empty() ? std::string("which has not yet written who it is") : holder) + ")");
  }
  if (err != 0) return Claim();
  RETURN_IF_ERROR(WriteNote(fd.get(), path, note));
  return Claim(std::move(fd));
}

}  // namespace ckpt::io

#include "collectives/store/job_secret.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "collectives/store/private_directory.h"
#include "collectives/store/store_auth.h"
#include "common/os_error.h"
#include "common/unique_fd.h"

namespace ckpt::coll {
namespace {

constexpr size_t kMaxSecretFileBytes = 1024;

std::string SecretFileName(int port) { return "store-" + std::to_string(port) + ".secret"; }

// The user's private directory, created if missing (private_directory.h).
Result<UniqueFd> OpenSecretDirectory(bool create) {
  constexpr char kWhat[] = "the job secret directory";
  return create ? MakePrivateDirectory(UserPrivateDirectory(), kWhat)
                : OpenPrivateDirectory(UserPrivateDirectory(), kWhat);
}

Status WriteAll(int fd, const std::string& data) {
  size_t written = 0;
  while (written < data.size()) {
    const ssize_t n = write(fd, data.data() + written, data.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return OsError("cannot write the job secret", errno);
    }
    written += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

Result<PublishedSecret> PublishedSecret::Publish(int port) {
  ASSIGN_OR_RETURN(UniqueFd dir, OpenSecretDirectory(/*create=*/true));
  ASSIGN_OR_RETURN(std::string secret, store_auth::NewSecret());
  const std::string name = SecretFileName(port);
  const std::string temporary = name + ".tmp-" + std::to_string(getpid());
  (void)unlinkat(dir.get(), temporary.c_str(), 0);  // left by a crashed process that had this pid
  UniqueFd file(openat(dir.get(), temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!file.valid()) return OsError("cannot create the job secret file " + Quoted(temporary), errno);
  Status written = WriteAll(file.get(), secret);
  file.Reset();
  // Renamed into place whole, so that a reader never sees a partial secret.
  if (written.ok() && renameat(dir.get(), temporary.c_str(), dir.get(), name.c_str()) != 0) {
    written = OsError("cannot publish the job secret file " + Quoted(name), errno);
  }
  if (!written.ok()) {
    (void)unlinkat(dir.get(), temporary.c_str(), 0);
    return written;
  }
  return PublishedSecret(UserPrivateDirectory() + "/" + name, std::move(secret));
}

PublishedSecret::PublishedSecret(PublishedSecret&& other) noexcept
    : path_(std::exchange(other.path_, std::string())), secret_(std::move(other.secret_)) {}

PublishedSecret& PublishedSecret::operator=(PublishedSecret&& other) noexcept {
  if (this != &other) {
    if (!path_.empty()) (void)unlink(path_.c_str());
    path_ = std::exchange(other.path_, std::string());
    secret_ = std::move(other.secret_);
  }
  return *this;
}

PublishedSecret::~PublishedSecret() {
  if (!path_.empty()) (void)unlink(path_.c_str());
}

Result<std::string> ReadPublishedSecret(int port) {
  const std::string how =
      "; ranks on other nodes than rank 0's need CKPT_JOB_SECRET set to the same value on every rank (ckpt-launch "
      "sets it; for example: export CKPT_JOB_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'))";
  Result<UniqueFd> dir = OpenSecretDirectory(/*create=*/false);
  if (!dir.ok()) return Status(dir.status().code(), dir.status().message() + how);
  const std::string name = SecretFileName(port);
  UniqueFd file(openat(dir->get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!file.valid()) {
    const int err = errno;
    const std::string what = "the job secret file " + Quoted(UserPrivateDirectory() + "/" + name);
    if (err == ENOENT) return NotFound(what + " that rank 0 writes does not exist on this node" + how);
    return OsError("cannot open " + what, err);
  }
  struct stat st = {};
  if (fstat(file.get(), &st) != 0) return OsError("cannot stat the job secret file", errno);
  if (!S_ISREG(st.st_mode) || st.st_uid != getuid() || st.st_size > static_cast<off_t>(kMaxSecretFileBytes)) {
    return InvalidArgument("the job secret file " + Quoted(name) + " is not a small regular file of this user");
  }
  std::string secret(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < secret.size()) {
    const ssize_t n = read(file.get(), secret.data() + got, secret.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return IoError("cannot read the job secret file " + Quoted(name));
    got += static_cast<size_t>(n);
  }
  RETURN_IF_ERROR(store_auth::ValidateSecret(secret, "the job secret file " + Quoted(name)));
  return secret;
}

}  // namespace ckpt::coll

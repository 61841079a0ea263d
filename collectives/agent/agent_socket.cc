#include "collectives/agent/agent_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "collectives/agent/agent_protocol.h"
#include "collectives/store/private_directory.h"
#include "common/fault_injection.h"
#include "common/os_error.h"

namespace ckpt::coll::agent {
namespace {

// Overrides where the agents' sockets live; tests keep their runs apart with it.
constexpr char kSocketDirVar[] = "CKPT_AGENT_SOCKET_DIR";
constexpr char kSocketDirWhat[] = "the ckpt-agent socket directory";

// The address of the socket file `path`; kInvalidArgument when the path is too long for one.
Result<socklen_t> FileAddress(const std::string& path, sockaddr_un* address) {
  std::memset(address, 0, sizeof *address);
  address->sun_family = AF_UNIX;
  if (path.size() + 1 > sizeof address->sun_path) {
    return InvalidArgument("the agent's socket path " + Quoted(path) + " is longer than a unix address allows (" +
                           std::to_string(sizeof address->sun_path - 1) + " bytes): set " + kSocketDirVar +
                           " to a shorter directory");
  }
  std::memcpy(address->sun_path, path.data(), path.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
}

Result<UniqueFd> NewSocket() {
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return OsError("socket(AF_UNIX, SOCK_SEQPACKET) failed", errno);
  return fd;
}

// The lock file beside the socket file `socket_name`.
std::string LockName(const std::string& socket_name) { return socket_name + ".lock"; }

// Takes the lock file `name` in `dir_fd` for as long as the returned descriptor lives. A lock file that the agent
// holding it removed as it left, between this open and this lock, is no lock any more: taken afresh.
Result<UniqueFd> TakeLock(int dir_fd, const std::string& name, const std::string& shown) {
  while (true) {
    UniqueFd fd(openat(dir_fd, name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd.valid()) return OsError("cannot open the agent's lock file " + Quoted(shown), errno);
    if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) return AlreadyExists("an agent holds " + Quoted(shown));
      return OsError("cannot lock " + Quoted(shown), errno);
    }
    struct stat held = {}, named = {};
    if (fstat(fd.get(), &held) != 0) return OsError("cannot stat " + Quoted(shown), errno);
    if (fstatat(dir_fd, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 && named.st_dev == held.st_dev &&
        named.st_ino == held.st_ino) {
      return fd;
    }
  }
}

}  // namespace

std::string DefaultSocketDirectory() {
  const char* chosen = std::getenv(kSocketDirVar);
  if (chosen != nullptr && *chosen != '\0') return chosen;
  return UserPrivateDirectory();
}

AgentListener::AgentListener(UniqueFd socket, UniqueFd lock, std::string socket_path, std::string lock_path)
    : socket_(std::move(socket)),
      lock_(std::move(lock)),
      socket_path_(std::move(socket_path)),
      lock_path_(std::move(lock_path)) {}

Result<AgentListener> AgentListener::Open(const std::string& dir, const std::string& name) {
  ASSIGN_OR_RETURN(UniqueFd dir_fd, MakePrivateDirectory(dir, kSocketDirWhat));
  const std::string path = dir + "/" + name, lock_path = dir + "/" + LockName(name);
  sockaddr_un address;
  ASSIGN_OR_RETURN(socklen_t length, FileAddress(path, &address));
  ASSIGN_OR_RETURN(UniqueFd lock, TakeLock(dir_fd.get(), LockName(name), lock_path));
  // Holding the lock, whatever is at the socket's name is what an agent that died left.
  if (unlinkat(dir_fd.get(), name.c_str(), 0) != 0 && errno != ENOENT) {
    return OsError("cannot remove the stale agent socket " + Quoted(path), errno);
  }
  ASSIGN_OR_RETURN(UniqueFd fd, NewSocket());
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&address), length) != 0) {
    return OsError("cannot bind " + Quoted(path), errno);
  }
  if (fchmodat(dir_fd.get(), name.c_str(), 0600, 0) != 0) {
    return OsError("cannot restrict " + Quoted(path) + " to mode 0600", errno);
  }
  std::this_thread::sleep_for(fault::ListenDelay());
  if (listen(fd.get(), 256) != 0) return OsError("listen on " + Quoted(path) + " failed", errno);
  return AgentListener(std::move(fd), std::move(lock), path, lock_path);
}

void AgentListener::Remove() {
  if (!lock_.valid()) return;
  (void)unlink(socket_path_.c_str());
  // Unlinked while still held: an agent starting now finds the lock it waited for gone, and takes a new one.
  (void)unlink(lock_path_.c_str());
  socket_.Reset();
  lock_.Reset();
}

Result<UniqueFd> ConnectToAgent(const std::string& dir, const std::string& name) {
  Result<UniqueFd> dir_fd = OpenPrivateDirectory(dir, kSocketDirWhat);
  if (dir_fd.status().code() == Code::kNotFound) return NotFound("no agent listens in " + Quoted(dir) + " yet");
  RETURN_IF_ERROR(dir_fd.status());
  const std::string path = dir + "/" + name;
  sockaddr_un address;
  ASSIGN_OR_RETURN(socklen_t length, FileAddress(path, &address));
  ASSIGN_OR_RETURN(UniqueFd fd, NewSocket());
  int rc;
  do {
    rc = connect(fd.get(), reinterpret_cast<sockaddr*>(&address), length);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    if (errno == ECONNREFUSED || errno == ENOENT) return NotFound("no agent listens on " + Quoted(path));
    return OsError("cannot connect to the agent at " + Quoted(path), errno);
  }
  ASSIGN_OR_RETURN(ucred peer, PeerCredentials(fd.get()));
  if (peer.uid != geteuid()) {
    return Mismatch("the process listening on " + Quoted(path) + " (pid " + std::to_string(peer.pid) + ", uid " +
                    std::to_string(peer.uid) + ") is not this user's (uid " + std::to_string(geteuid()) +
                    "): another user is posing as the job's ckpt-agent; nothing was sent to it");
  }
  return fd;
}

Result<ucred> PeerCredentials(int fd) {
  ucred credentials{};
  socklen_t length = sizeof credentials;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
    return OsError("SO_PEERCRED failed", errno);
  }
  return credentials;
}

Status SendMessage(int fd, std::string_view message) {
  if (message.size() > kMaxMessageBytes) {
    return Internal("an agent message of " + std::to_string(message.size()) + " bytes exceeds the limit");
  }
  ssize_t sent;
  do {
    sent = send(fd, message.data(), message.size(), MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return PeerFailed("the agent connection is gone: " + OsErrorText(errno));
  return Status::Ok();
}

Result<std::string> ReceiveMessage(int fd, std::chrono::milliseconds timeout) {
  pollfd waiting{fd, POLLIN, 0};
  const int wait_ms = timeout.count() > 0 ? static_cast<int>(timeout.count()) : -1;
  int ready;
  do {
    ready = poll(&waiting, 1, wait_ms);
  } while (ready < 0 && errno == EINTR);
  if (ready < 0) return OsError("poll on the agent connection failed", errno);
  if (ready == 0)
    return Status(Code::kTimeout,
                  "no answer on the agent connection within " + std::to_string(timeout.count()) + " ms");
  // The peek with MSG_TRUNC gives the whole message's length, so the buffer is sized to it.
  ssize_t length;
  do {
    length = recv(fd, nullptr, 0, MSG_PEEK | MSG_TRUNC);
  } while (length < 0 && errno == EINTR);
  if (length < 0) return PeerFailed("the agent connection failed: " + OsErrorText(errno));
  if (static_cast<size_t>(length) > kMaxMessageBytes) {
    return PeerFailed("a message of " + std::to_string(length) + " bytes on the agent connection exceeds the limit");
  }
  std::string message(static_cast<size_t>(length), '\0');
  ssize_t got;
  do {
    got = recv(fd, message.data(), message.size(), 0);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return PeerFailed("the agent connection failed: " + OsErrorText(errno));
  // A zero-length read is end of file: no message of ours is empty.
  if (got == 0) return PeerFailed("the other end closed the agent connection");
  message.resize(static_cast<size_t>(got));
  return message;
}

}  // namespace ckpt::coll::agent

#include "collectives/agent_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "collectives/agent_protocol.h"
#include "common/fault_injection.h"

namespace ckpt::coll::agent {
namespace {

std::string Errno(int err) { return std::strerror(err); }

// An abstract address: sun_path starts with a NUL and the length counts only the name's bytes.
Result<socklen_t> AbstractAddress(std::string_view name, sockaddr_un* address) {
  std::memset(address, 0, sizeof *address);
  address->sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof address->sun_path) {
    return InvalidArgument("the agent's socket name '" + std::string(name) + "' does not fit a unix address");
  }
  std::memcpy(address->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

Result<UniqueFd> NewSocket() {
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return IoError("socket(AF_UNIX, SOCK_SEQPACKET) failed: " + Errno(errno));
  return fd;
}

}  // namespace

Result<UniqueFd> ListenAbstract(std::string_view name) {
  sockaddr_un address;
  ASSIGN_OR_RETURN(socklen_t length, AbstractAddress(name, &address));
  ASSIGN_OR_RETURN(UniqueFd fd, NewSocket());
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&address), length) != 0) {
    if (errno == EADDRINUSE) return AlreadyExists("an agent already listens on '@" + std::string(name) + "'");
    return IoError("cannot bind '@" + std::string(name) + "': " + Errno(errno));
  }
  std::this_thread::sleep_for(fault::ListenDelay());
  if (listen(fd.get(), 256) != 0) return IoError("listen on '@" + std::string(name) + "' failed: " + Errno(errno));
  return fd;
}

Result<UniqueFd> ConnectAbstract(std::string_view name) {
  sockaddr_un address;
  ASSIGN_OR_RETURN(socklen_t length, AbstractAddress(name, &address));
  ASSIGN_OR_RETURN(UniqueFd fd, NewSocket());
  int rc;
  do {
    rc = connect(fd.get(), reinterpret_cast<sockaddr*>(&address), length);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    if (errno == ECONNREFUSED || errno == ENOENT) return NotFound("no agent listens on '@" + std::string(name) + "'");
    return IoError("cannot connect to the agent at '@" + std::string(name) + "': " + Errno(errno));
  }
  return fd;
}

Result<uid_t> PeerUid(int fd) {
  ucred credentials{};
  socklen_t length = sizeof credentials;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
    return IoError("SO_PEERCRED failed: " + Errno(errno));
  }
  return credentials.uid;
}

Status SendMessage(int fd, std::string_view message) {
  if (message.size() > kMaxMessageBytes) {
    return Internal("an agent message of " + std::to_string(message.size()) + " bytes exceeds the limit");
  }
  ssize_t sent;
  do {
    sent = send(fd, message.data(), message.size(), MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return PeerFailed("the agent connection is gone: " + Errno(errno));
  return Status::Ok();
}

Result<std::string> ReceiveMessage(int fd, std::chrono::milliseconds timeout) {
  pollfd waiting{fd, POLLIN, 0};
  const int wait_ms = timeout.count() > 0 ? static_cast<int>(timeout.count()) : -1;
  int ready;
  do {
    ready = poll(&waiting, 1, wait_ms);
  } while (ready < 0 && errno == EINTR);
  if (ready < 0) return IoError("poll on the agent connection failed: " + Errno(errno));
  if (ready == 0)
    return Status(Code::kTimeout,
                  "no answer on the agent connection within " + std::to_string(timeout.count()) + " ms");
  // The peek with MSG_TRUNC gives the whole message's length, so the buffer is sized to it.
  ssize_t length;
  do {
    length = recv(fd, nullptr, 0, MSG_PEEK | MSG_TRUNC);
  } while (length < 0 && errno == EINTR);
  if (length < 0) return PeerFailed("the agent connection failed: " + Errno(errno));
  if (static_cast<size_t>(length) > kMaxMessageBytes) {
    return PeerFailed("a message of " + std::to_string(length) + " bytes on the agent connection exceeds the limit");
  }
  std::string message(static_cast<size_t>(length), '\0');
  ssize_t got;
  do {
    got = recv(fd, message.data(), message.size(), 0);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return PeerFailed("the agent connection failed: " + Errno(errno));
  // A zero-length read is end of file: no message of ours is empty.
  if (got == 0) return PeerFailed("the other end closed the agent connection");
  message.resize(static_cast<size_t>(got));
  return message;
}

}  // namespace ckpt::coll::agent

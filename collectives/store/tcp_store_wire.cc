#include "collectives/store/tcp_store_wire.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "common/bytes.h"
#include "common/os_error.h"

namespace ckpt::coll::store_wire {
namespace {

// Far beyond any sensible timeout, far below what steady_clock can add.
constexpr uint64_t kMaxTimeoutMs = uint64_t{365} * 24 * 3600 * 1000;

}  // namespace

const char* CollectiveName(MessageType type) {
  switch (type) {
    case MessageType::kAllToAll:
      return "alltoall";
    case MessageType::kBroadcast:
      return "broadcast";
    default:
      return "allgather";
  }
}

std::string EncodeHeader(MessageType type, uint64_t payload_length) {
  ByteWriter writer;
  writer.U32(static_cast<uint32_t>(type));
  writer.U64(payload_length);
  return writer.Take();
}

std::string EncodeFrame(MessageType type, std::string_view payload) {
  std::string frame = EncodeHeader(type, payload.size());
  frame.append(payload.data(), payload.size());
  return frame;
}

FrameHeader DecodeHeader(std::string_view bytes) {
  FrameHeader header;
  ByteReader reader(bytes.substr(0, kHeaderBytes), "frame header");
  // The caller guarantees kHeaderBytes, so neither read can fail.
  (void)reader.U32(&header.type);
  (void)reader.U64(&header.length);
  return header;
}

std::string EncodeError(const Status& status) {
  ByteWriter writer;
  writer.U32(static_cast<uint32_t>(status.code()));
  writer.Bytes(status.message());
  return writer.Take();
}

Status DecodeError(std::string_view payload) {
  ByteReader reader(payload, "error reply from the store");
  uint32_t code = 0;
  std::string message;
  RETURN_IF_ERROR(reader.U32(&code));
  RETURN_IF_ERROR(reader.Bytes(&message));
  RETURN_IF_ERROR(reader.ExpectDone());
  if (code == static_cast<uint32_t>(Code::kOk) || code > static_cast<uint32_t>(Code::kInternal)) {
    return Corrupt("the store replied with unknown status code " + std::to_string(code) + ": " + message);
  }
  return Status(static_cast<Code>(code), std::move(message));
}

std::chrono::milliseconds ClampTimeout(uint64_t timeout_ms) {
  return std::chrono::milliseconds(std::min(timeout_ms, kMaxTimeoutMs));
}

int PollTimeoutMs(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, INT_MAX));
}

int WaitFor(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    pollfd pfd = {fd, events, 0};
    const int ready = poll(&pfd, 1, PollTimeoutMs(deadline));
    if (ready >= 0 || errno != EINTR) return ready;
  }
}

Result<UniqueFd> ConnectOnce(const std::string& host, int port, std::chrono::steady_clock::time_point deadline) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &addresses);
  if (rc != 0) return IoError(gai_strerror(rc));
  std::string last_error = "no address";
  UniqueFd connected;
  for (addrinfo* a = addresses; a != nullptr && !connected.valid(); a = a->ai_next) {
    UniqueFd fd(socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      last_error = OsErrorText(errno);
      continue;
    }
    int err = connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      socklen_t len = sizeof err;
      const int ready = WaitFor(fd.get(), POLLOUT, deadline);
      if (ready <= 0) {
        err = ready == 0 ? ETIMEDOUT : errno;
      } else if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
        err = errno;
      }
    }
    if (err == 0) {
      connected = std::move(fd);
    } else {
      last_error = OsErrorText(err);
    }
  }
  freeaddrinfo(addresses);
  if (!connected.valid()) return IoError(last_error);
  return connected;
}

namespace {

struct SocketAddress {
  sockaddr_storage address = {};
  socklen_t length = sizeof address;
};

Result<SocketAddress> LocalAddress(int fd) {
  SocketAddress local;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local.address), &local.length) != 0) {
    return OsError("cannot read a socket's local address", errno);
  }
  return local;
}

}  // namespace

Result<int> LocalPort(int fd) {
  ASSIGN_OR_RETURN(const SocketAddress local, LocalAddress(fd));
  const sockaddr_storage& a = local.address;
  return ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port
                                       : reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
}

Result<std::string> LocalHost(int fd) {
  ASSIGN_OR_RETURN(SocketAddress local, LocalAddress(fd));
  sockaddr_storage& address = local.address;
  const socklen_t length = local.length;
  char host[NI_MAXHOST] = {};
  const int rc =
      getnameinfo(reinterpret_cast<sockaddr*>(&address), length, host, sizeof host, nullptr, 0, NI_NUMERICHOST);
  if (rc != 0) return IoError(std::string("cannot format a socket's local address: ") + gai_strerror(rc));
  return std::string(host);
}

Status ConfigureSocket(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return OsError("cannot make a store socket non-blocking", errno);
  }
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    return OsError("cannot set TCP_NODELAY on a store socket", errno);
  }
  return Status::Ok();
}

std::string FormatAddress(const std::string& host, int port) {
  const bool ipv6_literal = host.find(':') != std::string::npos;
  return (ipv6_literal ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<UniqueFd> Listen(const std::string& host, int port) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* addresses = nullptr;
  const std::string address = FormatAddress(host, port);
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &addresses);
  if (rc != 0) return IoError("cannot resolve the store address " + address + ": " + gai_strerror(rc));
  std::string last_error = "no address";
  bool in_use = false;
  UniqueFd listener;
  for (addrinfo* a = addresses; a != nullptr && !listener.valid(); a = a->ai_next) {
    UniqueFd fd(socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    const int one = 1;
    if (fd.valid() && setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
        bind(fd.get(), a->ai_addr, a->ai_addrlen) == 0 && listen(fd.get(), SOMAXCONN) == 0) {
      listener = std::move(fd);
    } else {
      in_use = in_use || errno == EADDRINUSE;
      last_error = OsErrorText(errno);
    }
  }
  freeaddrinfo(addresses);
  if (!listener.valid()) {
    const std::string hint =
        in_use ? " (another program holds the port: give ckpt's store a free one with CKPT_STORE_PORT)" : "";
    return IoError("cannot listen on " + address + " for the store: " + last_error + hint);
  }
  return listener;
}

}  // namespace ckpt::coll::store_wire

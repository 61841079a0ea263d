#include "collectives/store/store_client_socket.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "collectives/store/store_auth.h"
#include "common/os_error.h"

namespace ckpt::coll {

using store_wire::MessageType;

Status StoreClientSocket::SendAll(std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    const ssize_t n = send(fd_.get(), data.data(), data.size(), MSG_NOSIGNAL);
    if (n >= 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return LostConnection(OsErrorText(errno));
    const int ready = store_wire::WaitFor(fd_.get(), POLLOUT, deadline);
    if (ready < 0) return LostConnection(OsErrorText(errno));
    if (ready == 0) return NoReply();
  }
  return Status::Ok();
}

Status StoreClientSocket::RecvAll(char* out, size_t size, Clock::time_point deadline) {
  while (size > 0) {
    const ssize_t n = recv(fd_.get(), out, size, 0);
    if (n > 0) {
      out += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return LostConnection("connection closed");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return LostConnection(OsErrorText(errno));
    const int ready = store_wire::WaitFor(fd_.get(), POLLIN, deadline);
    if (ready < 0) return LostConnection(OsErrorText(errno));
    if (ready == 0) return NoReply();
  }
  return Status::Ok();
}

Result<store_wire::FrameHeader> StoreClientSocket::ReadHeader(Clock::time_point deadline) {
  char header_bytes[store_wire::kHeaderBytes];
  RETURN_IF_ERROR(RecvAll(header_bytes, sizeof header_bytes, deadline));
  return store_wire::DecodeHeader(std::string_view(header_bytes, sizeof header_bytes));
}

Status StoreClientSocket::ReadFrame(Clock::time_point deadline, uint64_t limit, uint32_t* type, std::string* payload) {
  ASSIGN_OR_RETURN(const store_wire::FrameHeader header, ReadHeader(deadline));
  if (header.length > limit) return InvalidReply(header.type, header.length);
  *type = header.type;
  payload->assign(header.length, '\0');
  return RecvAll(payload->data(), payload->size(), deadline);
}

Status StoreClientSocket::InvalidReply(uint32_t type, uint64_t length) const {
  return Corrupt(server_name_ + " sent an invalid reply (type " + std::to_string(type) + ", " + std::to_string(length) +
                 " bytes)");
}

Status StoreClientSocket::LostConnection(const std::string& why) const {
  return PeerFailed("lost connection to " + server_name_ + ": " + why);
}

Status StoreClientSocket::NoReply() const {
  return Timeout("no reply from " + server_name_ + " within " + std::to_string(timeout_.count()) + " ms");
}

Result<std::string> ReadChallenge(StoreClientSocket& socket, StoreClientSocket::Clock::time_point deadline,
                                  bool* turned_away) {
  ASSIGN_OR_RETURN(const store_wire::FrameHeader header, socket.ReadHeader(deadline));
  const bool busy = header.type == static_cast<uint32_t>(MessageType::kBusy);
  if ((!busy && header.type != static_cast<uint32_t>(MessageType::kChallenge)) ||
      header.length > store_wire::kMaxHandshakeBytes) {
    return InvalidArgument(socket.server_name() + " is not a ckpt store (it opened with type " +
                           std::to_string(header.type) + ", " + std::to_string(header.length) + " bytes)");
  }
  std::string payload(header.length, '\0');
  RETURN_IF_ERROR(socket.RecvAll(payload.data(), payload.size(), deadline));
  if (busy) {
    *turned_away = true;
    return PeerFailed(payload);
  }
  return store_handshake::DecodeChallenge(payload, socket.server_name());
}

Result<HandshakeReply> AnswerChallenge(StoreClientSocket& socket, store_handshake::Hello hello,
                                       const std::string& secret, const std::string& server_nonce,
                                       StoreClientSocket::Clock::time_point deadline) {
  ASSIGN_OR_RETURN(hello.client_nonce, store_auth::RandomBytes(store_auth::kNonceBytes));
  const std::string request = store_handshake::EncodeHello(hello, secret, server_nonce);
  RETURN_IF_ERROR(socket.SendAll(store_wire::EncodeFrame(MessageType::kHello, request), deadline));
  uint32_t type = 0;
  std::string reply;
  RETURN_IF_ERROR(socket.ReadFrame(deadline + kStoreReplyGrace, store_wire::kMaxMessageBytes, &type, &reply));
  HandshakeReply answer;
  switch (static_cast<MessageType>(type)) {
    case MessageType::kBusy:
      answer.turned_away = true;
      answer.busy_reason = std::move(reply);
      return answer;
    case MessageType::kError:
      return store_wire::DecodeError(reply);
    case MessageType::kRedirect: {
      ASSIGN_OR_RETURN(answer.redirect, store_handshake::DecodeRedirect(reply, secret, server_nonce, hello.client_nonce,
                                                                        socket.server_name()));
      answer.redirected = true;
      return answer;
    }
    case MessageType::kOk:
      RETURN_IF_ERROR(
          store_handshake::CheckWelcome(reply, secret, server_nonce, hello.client_nonce, socket.server_name()));
      return answer;
    default:
      return socket.InvalidReply(type, reply.size());
  }
}

Result<HandshakeReply> Handshake(StoreClientSocket& socket, store_handshake::Hello hello, const std::string& secret,
                                 StoreClientSocket::Clock::time_point deadline) {
  bool turned_away = false;
  Result<std::string> server_nonce = ReadChallenge(socket, deadline, &turned_away);
  if (turned_away) {
    HandshakeReply answer;
    answer.turned_away = true;
    answer.busy_reason = server_nonce.status().message();
    return answer;
  }
  RETURN_IF_ERROR(server_nonce.status());
  return AnswerChallenge(socket, std::move(hello), secret, *server_nonce, deadline);
}

}  // namespace ckpt::coll

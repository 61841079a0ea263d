// A client's end of a connection to a server of the TCP store's frames (rank 0's store, or a relay): blocking sends
// and reads, each bounded by a deadline, and the client's side of the handshake. Failures of the stream name the
// server as `server_name` says ("the store on rank 0 (host:port)").
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "collectives/store/store_handshake.h"
#include "collectives/store/tcp_store_wire.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace ckpt::coll {

// The server answers a timed-out request itself, naming who is missing; a client gives it this much longer before
// concluding that the server itself is stuck.
inline constexpr std::chrono::milliseconds kStoreReplyGrace{1000};

class StoreClientSocket {
 public:
  using Clock = std::chrono::steady_clock;

  StoreClientSocket() = default;
  StoreClientSocket(UniqueFd fd, std::string server_name, std::chrono::milliseconds timeout)
      : fd_(std::move(fd)), server_name_(std::move(server_name)), timeout_(timeout) {}

  bool valid() const { return fd_.valid(); }
  int fd() const { return fd_.get(); }
  UniqueFd Release() { return std::move(fd_); }
  void Reset() { fd_.Reset(); }
  const std::string& server_name() const { return server_name_; }

  Status SendAll(std::string_view data, Clock::time_point deadline);
  Status RecvAll(char* out, size_t size, Clock::time_point deadline);
  Result<store_wire::FrameHeader> ReadHeader(Clock::time_point deadline);
  // One frame, its length checked against `limit` before anything is read for it.
  Status ReadFrame(Clock::time_point deadline, uint64_t limit, uint32_t* type, std::string* payload);
  Status InvalidReply(uint32_t type, uint64_t length) const;

 private:
  Status LostConnection(const std::string& why) const;
  Status NoReply() const;

  UniqueFd fd_;
  std::string server_name_;
  std::chrono::milliseconds timeout_{0};
};

// How a server answered a hello.
struct HandshakeReply {
  bool turned_away = false;  // kBusy: the server read no hello (or will not serve it yet); trying again is safe
  std::string busy_reason;
  bool redirected = false;  // kRedirect: `redirect` says where to go instead
  store_handshake::Redirect redirect;
};

// The client's side of one handshake on a new connection: the challenge, `hello` (its nonce made here), and the
// welcome or redirect, whose proof is checked. An error for a refusal or a server that is not the job's; a reply that
// says the client was turned away or sent elsewhere otherwise.
Result<HandshakeReply> Handshake(StoreClientSocket& socket, store_handshake::Hello hello, const std::string& secret,
                                 StoreClientSocket::Clock::time_point deadline);

// The challenge alone, for a client that reads the secret only once the server has answered (it may be published
// for this node only when the server starts): the server's nonce, or *turned_away with the reason.
Result<std::string> ReadChallenge(StoreClientSocket& socket, StoreClientSocket::Clock::time_point deadline,
                                  bool* turned_away);
// The rest of the handshake after ReadChallenge.
Result<HandshakeReply> AnswerChallenge(StoreClientSocket& socket, store_handshake::Hello hello,
                                       const std::string& secret, const std::string& server_nonce,
                                       StoreClientSocket::Clock::time_point deadline);

}  // namespace ckpt::coll

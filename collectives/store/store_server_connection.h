// One client connection of the TCP store's server (tcp_store_server.h) and its framing: the bytes received and not
// yet parsed, whole frames handed on within the size limits, replies queued and sent without ever blocking the
// server's loop, and the one request it may have outstanding, with its deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "collectives/store/store_strangers.h"
#include "collectives/store/tcp_store_wire.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace ckpt::coll::store_server {

using Clock = std::chrono::steady_clock;
using store_wire::MessageType;
// An encoded frame, shared by every connection it answers.
using FramePtr = std::shared_ptr<const std::string>;

// What a connection waits for: its handshake (a stranger), the connect barrier, a key, or a collective.
enum class Pending { kNone, kHandshake, kHello, kWait, kAllGather };

struct Connection {
  UniqueFd fd;
  std::string in;  // received bytes not yet parsed
  std::deque<FramePtr> out;
  size_t out_offset = 0;          // bytes of out.front() already sent
  int rank = -1;                  // -1 until the handshake
  StrangerGate::Id stranger = 0;  // its slot among the strangers until the handshake
  std::string server_nonce;       // this connection's challenge
  std::string welcome;            // the reply to its hello, with the server's proof
  bool auxiliary = false;         // a rank's second connection: key-value requests only; its loss kills nobody
  bool closed = false;            // removed at the end of the loop iteration
  bool hung_up = false;           // a send failed: handled as a disconnect outside the sender's call chain
  Pending pending = Pending::kNone;
  Clock::time_point deadline;
  std::chrono::milliseconds timeout{0};
  std::string wait_key;
  uint64_t sequence = 0;
  // Rank 0's connection from a relay (store_relay.h), or a relay's connection to rank 0: it carries the relay's
  // members as channels, and is read even while frames to it are queued (the other end reads eagerly too).
  bool relay_link = false;
  // At rank 0, a relayed rank's connection: no socket of its own; its frames travel on `via` as `channel`.
  Connection* via = nullptr;
  uint32_t channel = 0;
  // At rank 0, a relay's link: the connections it carries, by channel.
  std::unordered_map<uint32_t, Connection*> channels;
};

// Every connection of the server, in the order they were accepted.
using Connections = std::vector<std::unique_ptr<Connection>>;

// What the server makes of the frames a connection delivers (store_server_session.h).
class FrameHandler {
 public:
  virtual void OnFrame(Connection& c, uint32_t type, std::string_view payload) = 0;
  // The connection ended without a goodbye, or broke the protocol.
  virtual void OnLost(Connection& c) = 0;

 protected:
  ~FrameHandler() = default;
};

// Whether a connection is read while frames to it are still queued: a link between a relay and rank 0.
inline bool ReadsAhead(const Connection& c) { return c.relay_link; }

FramePtr Frame(MessageType type, std::string_view payload);
// What precedes a frame of `frame_bytes` bytes of `channel` on a link between a relay and rank 0: a kRelayed header
// and the channel.
std::string RelayHeader(uint32_t channel, uint64_t frame_bytes);
// `frame` of `channel`, wrapped for a link between a relay and rank 0 (one copy).
FramePtr RelayedFrame(uint32_t channel, std::string_view frame);
FramePtr ErrorFrame(const Status& status);

// Reads what the socket holds, a bounded amount per call so that a busy sender cannot starve the others, and hands
// each whole frame to `handler`.
void ReadFrom(Connection& c, FrameHandler& handler);
// Hands the whole frames already received to `handler`, stopping while a reply is unsent: a client that does not
// read cannot make the server queue replies.
void ParseFrames(Connection& c, FrameHandler& handler);

// Queues `frame` and sends what the socket takes now; nothing more goes to a connection closed or hung up. A
// connection carried by a relay queues it on the relay's link, behind a header naming its channel (the frame itself
// is shared, not copied).
void Send(Connection& c, FramePtr frame);
// Sends queued replies until the socket would block; a failed send marks the connection hung up.
void Flush(Connection& c);
// Ends the connection's outstanding request with `frame`.
void Answer(Connection& c, const FramePtr& frame);
// Answers every connection waiting for `kind` (for kAllGather, only those in collective `sequence`) with `frame`.
void ReplyToPending(const Connections& conns, Pending kind, uint64_t sequence, const FramePtr& frame);
// Makes `kind` the connection's outstanding request, due within `timeout_ms` as the client asked.
void SetPending(Connection& c, Pending kind, uint64_t timeout_ms);

}  // namespace ckpt::coll::store_server

// The TCP store's wire protocol and socket helpers, shared by its server and its client. Every message is a frame:
// u32 type, u64 payload length, payload; little-endian. The receiver checks the length against a limit before it
// buffers anything, so a hostile or confused peer cannot make it allocate.
//
// The server opens every connection (collectives/store/store_auth.h):
//   kChallenge  u32 magic, u32 version, bytes server nonce
// or, while too many connections have not yet proven themselves (collectives/store/store_strangers.h), turns it away:
//   kBusy       the reason, as text (the whole payload); the server has read no hello from it and hangs up. A server
//               may also send it in place of the reply to a hello it has not read. The client may try again.
// Requests (client to server) and their payloads:
//   kHello      u32 magic, u32 version, i32 rank, i32 world size, u64 timeout ms, u8 role (0 a rank, 1 a rank's
//               auxiliary connection, 2 a relay), for a relay bytes host and i32 port it listens on, bytes client
//               nonce, bytes proof (HMAC of everything before it)
//                                                             -> kOk: bytes the server's proof, once every rank has
//                                                                said hello (an auxiliary connection, a relay: at once)
//                                                             -> kRedirect (in a job whose ranks reach rank 0 through
//                                                                relays, collectives/store/store_relay.h): bytes
//                                                                proof (over both nonces and what follows), u32 the
//                                                                relays' rows' length, bytes host, i32 port of this
//                                                                rank's relay; an empty host tells the rank that it
//                                                                is its row's relay and must start it. The server hangs
//                                                                up; while the relay has not connected it turns the
//                                                                rank away (kBusy) instead, and the rank tries again.
//   kSet        bytes key, bytes value                        -> kOk
//   kGet        bytes key                                     -> kOk: u8 found, bytes value (an error once a rank
//                                                                has died)
//   kWait       bytes key, u64 timeout ms                     -> kOk: bytes value
//   kAllGather  u64 sequence number, u64 timeout ms, bytes contribution -> kOk: u32 count, bytes each
//   kAllToAll   u64 sequence number, u64 timeout ms, bytes (u32 count, then i32 rank and bytes for each rank this
//               one sends a message that is not empty, ranks ascending)
//                                                             -> kOk: u32 count, then i32 rank and bytes for each
//                                                                message to this rank, ranks ascending
//   kBroadcast  u64 sequence number, u64 timeout ms, bytes (rank 0's message; empty from the others)
//                                                             -> kOk: bytes rank 0's message
//   kDelete     bytes key                                     -> kOk
// The collectives share one sequence: every rank issues them in the same order, and a rank that joins sequence
// number N with another kind than the others fails it for all.
//   kGoodbye    (empty): a clean leave; no reply
// Any request may instead be answered by kError: u32 status code, bytes message. A client sends its next request
// only once it has read the reply to the last one, and the server reads nothing more from a connection while a
// reply to it is still unsent, so that a client which does not read cannot make the server queue replies.
//
// A relay's connection to rank 0 carries its members' connections, each a channel (u32, the relay's choice):
//   kRelayed    u32 channel, then one whole frame of that channel (both ways). From the relay, the frames of a
//               channel are its rank's requests, opened by
//   kChannelOpen  i32 rank, u8 auxiliary, u64 timeout ms: a rank the relay has authenticated (answered as a hello),
//               and ended by its goodbye or by
//   kChannelLost  (empty): the rank's connection to the relay ended without a goodbye.
//               From rank 0, channel kEveryChannel carries a kError frame once a rank has died, for the relay to fail
//               its members' death checks at once.
//
// Peer links (collectives/peer/peer_links.h) are direct connections between ranks in the same frames, opened by the
// same challenge, hello and welcome (the listening rank plays the server). Then, from the connecting rank:
//   kPeerMessage  u64 sequence number, i32 sender rank, then the message's bytes up to the frame's end
//                                                             -> kPeerAck: u64 sequence number, once queued
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/unique_fd.h"

namespace ckpt::coll::store_wire {

inline constexpr uint32_t kMagic = 0x54504b43;  // "CKPT"
inline constexpr uint32_t kVersion = 4;
inline constexpr size_t kHeaderBytes = sizeof(uint32_t) + sizeof(uint64_t);
inline constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 30;
// Before the handshake a peer is a stranger: it may send a hello and nothing larger (the server's challenge is
// bounded alike).
inline constexpr uint64_t kMaxHandshakeBytes = 4096;
// A relay's frame wraps a whole frame of a channel.
inline constexpr uint64_t kMaxRelayedBytes = kMaxMessageBytes + kHeaderBytes + sizeof(uint32_t);
inline constexpr uint32_t kEveryChannel = 0xffffffff;
// The key whose Get asks whether a rank died (any Get fails once one has): a relay answers it for its members.
inline constexpr char kPeersAliveKey[] = "ckpt/peers-alive";

enum class MessageType : uint32_t {
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kWait = 4,
  kAllGather = 5,
  kGoodbye = 6,
  kChallenge = 7,
  kAllToAll = 8,
  kBroadcast = 9,
  kDelete = 10,
  kPeerMessage = 11,
  kPeerAck = 12,
  kRelayed = 13,
  kChannelOpen = 14,
  kChannelLost = 15,
  kRedirect = 67,
  kOk = 64,
  kError = 65,
  kBusy = 66,
};

struct FrameHeader {
  uint32_t type = 0;
  uint64_t length = 0;
};

// "allgather", "alltoall" or "broadcast", for messages about a collective of that type.
const char* CollectiveName(MessageType type);

std::string EncodeFrame(MessageType type, std::string_view payload);
// A frame's header alone, for a payload the caller sends from where it lies.
std::string EncodeHeader(MessageType type, uint64_t payload_length);
// `bytes` holds at least kHeaderBytes.
FrameHeader DecodeHeader(std::string_view bytes);

std::string EncodeError(const Status& status);
// The Status carried by a kError payload (kCorrupt if the payload itself is malformed).
Status DecodeError(std::string_view payload);

// Timeouts travel as milliseconds; this clamps what a peer sends to something a clock can add without overflow.
std::chrono::milliseconds ClampTimeout(uint64_t timeout_ms);

// What is left until `deadline`, in milliseconds for poll(): 0 once it has passed.
int PollTimeoutMs(std::chrono::steady_clock::time_point deadline);

// Waits for `events` on `fd` until `deadline`: 1 ready, 0 timed out, -1 error (errno set).
int WaitFor(int fd, short events, std::chrono::steady_clock::time_point deadline);

// One non-blocking connect attempt to any of the host's addresses, waiting until `deadline`; the error text (kIo)
// if none accepts.
Result<UniqueFd> ConnectOnce(const std::string& host, int port, std::chrono::steady_clock::time_point deadline);

// The numeric address of this end of a connected socket: the interface that reaches its peer.
Result<std::string> LocalHost(int fd);
// The port a socket is bound to (a listener bound to port 0 learns its port here).
Result<int> LocalPort(int fd);

// Non-blocking with Nagle off: the store's messages are small and latency-bound.
Status ConfigureSocket(int fd);

// A non-blocking listening socket on host:port, with SO_REUSEADDR so that a restarted job can reuse the port.
Result<UniqueFd> Listen(const std::string& host, int port);

// "host:port", bracketing IPv6 literals.
std::string FormatAddress(const std::string& host, int port);

}  // namespace ckpt::coll::store_wire

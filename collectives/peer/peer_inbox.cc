#include "collectives/peer/peer_inbox.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "collectives/store/store_auth.h"
#include "collectives/store/store_handshake.h"
#include "collectives/store/store_strangers.h"
#include "collectives/store/tcp_store_wire.h"
#include "common/bytes.h"
#include "common/os_error.h"

namespace ckpt::coll {
namespace {

using Clock = std::chrono::steady_clock;
using store_wire::MessageType;

// How often the loop wakes to drop strangers past their hello timeout (kStrangerHelloTimeout), when nothing else
// wakes it.
constexpr std::chrono::milliseconds kSweepInterval{500};
// Reads per connection per wakeup, so that one rank streaming megabytes does not starve the others.
constexpr int kReadsPerWakeup = 16;

}  // namespace

struct PeerInbox::Connection {
  UniqueFd fd;
  int rank = -1;                  // -1 until its hello proves it knows the secret
  StrangerGate::Id stranger = 0;  // its slot among the strangers until then
  std::string server_nonce;
  Clock::time_point hello_deadline;
  char header[store_wire::kHeaderBytes] = {};
  size_t header_filled = 0;
  uint32_t type = 0;
  std::string payload;
  size_t payload_filled = 0;
  std::string out;                 // bytes not yet sent: the challenge, the welcome, acks
  bool hang_up_when_sent = false;  // a refused stranger: it gets the reason, then nothing more
  bool closed = false;
};

Result<std::unique_ptr<PeerInbox>> PeerInbox::Start(int rank, int world_size, const std::string& host,
                                                    std::string secret) {
  ASSIGN_OR_RETURN(UniqueFd listener, store_wire::Listen(host, 0));
  ASSIGN_OR_RETURN(const int port, store_wire::LocalPort(listener.get()));
  UniqueFd wake(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake.valid()) return OsError("cannot make the peer links' eventfd", errno);
  return std::unique_ptr<PeerInbox>(
      new PeerInbox(rank, world_size, std::move(secret), std::move(listener), port, std::move(wake)));
}

PeerInbox::PeerInbox(int rank, int world_size, std::string secret, UniqueFd listener, int port, UniqueFd wake)
    : rank_(rank),
      world_size_(world_size),
      secret_(std::move(secret)),
      listener_(std::move(listener)),
      port_(port),
      wake_(std::move(wake)),
      open_links_(world_size, 0),
      had_link_(world_size, false) {
  thread_ = std::thread([this] { Loop(); });
}

PeerInbox::~PeerInbox() {
  stopping_ = true;
  const uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof one);
  thread_.join();
}

std::optional<std::string> PeerInbox::Take(uint64_t sequence, int from, Clock::time_point until) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto key = std::make_pair(sequence, from);
  queued_.wait_until(lock, until, [&] { return messages_.count(key) > 0 || !failure_.ok(); });
  const auto it = messages_.find(key);
  if (it == messages_.end()) return std::nullopt;
  std::string message = std::move(it->second);
  messages_.erase(it);
  return message;
}

std::map<int, std::string> PeerInbox::TakeAll(uint64_t sequence) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<int, std::string> taken;
  auto it = messages_.lower_bound({sequence, -1});
  while (it != messages_.end() && it->first.first == sequence) {
    taken.emplace(it->first.second, std::move(it->second));
    it = messages_.erase(it);
  }
  return taken;
}

void PeerInbox::Finish(uint64_t sequence, bool completed) {
  std::lock_guard<std::mutex> lock(mu_);
  finished_below_ = std::max(finished_below_, sequence + 1);
  if (!completed) abandoned_.insert(sequence);
  messages_.erase(messages_.begin(), messages_.lower_bound({sequence + 1, -1}));
}

Status PeerInbox::TakeFailure() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(failure_, Status::Ok());
}

std::vector<bool> PeerInbox::Accepted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return had_link_;
}

bool PeerInbox::LinkClosed(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  return had_link_[rank] && open_links_[rank] == 0;
}

void PeerInbox::Loop() {
  while (!stopping_) {
    Clock::time_point now = Clock::now();
    // The listener is left out while the gate is closed: connections then wait in the listen queue.
    std::vector<pollfd> fds = {{wake_.get(), POLLIN, 0}, {strangers_.Open(now) ? listener_.get() : -1, POLLIN, 0}};
    for (const auto& c : connections_) {
      fds.push_back({c->fd.get(), static_cast<short>(c->hang_up_when_sent ? 0 : POLLIN), 0});
      if (!c->out.empty()) fds.back().events |= POLLOUT;
    }
    const Clock::time_point wake_by =
        std::min(now + kSweepInterval, strangers_.ReopensAt(now).value_or(now + kSweepInterval));
    if (poll(fds.data(), fds.size(), store_wire::PollTimeoutMs(wake_by)) < 0 && errno != EINTR) return;
    for (size_t i = 2; i < fds.size(); ++i) {
      Connection& c = *connections_[i - 2];
      if (fds[i].revents & POLLOUT) Flush(c);
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) ReadFrom(c);
    }
    now = Clock::now();
    for (auto& c : connections_) {
      if (c->rank < 0 && !c->closed && now > c->hello_deadline) Close(*c);
    }
    connections_.erase(
        std::remove_if(connections_.begin(), connections_.end(), [](const auto& c) { return c->closed; }),
        connections_.end());
    // Only now, so that the gate counts just the strangers still there.
    if (fds[1].revents != 0) AcceptAll();
  }
}

// Takes connections from the listen queue while the gate lets them in (collectives/store/store_strangers.h).
void PeerInbox::AcceptAll() {
  while (std::optional<StrangerGate::Arrival> arrival = strangers_.Accept(listener_.get(), Clock::now())) {
    if (!MakeRoomFor(arrival->source)) {
      TurnAway(arrival->fd.get(), BusyText(arrival->source));
      continue;
    }
    Result<std::string> nonce = store_auth::RandomBytes(store_auth::kNonceBytes);
    if (!store_wire::ConfigureSocket(arrival->fd.get()).ok() || !nonce.ok()) continue;
    auto c = std::make_unique<Connection>();
    c->fd = std::move(arrival->fd);
    c->server_nonce = std::move(nonce).value();
    c->hello_deadline = Clock::now() + kStrangerHelloTimeout;
    c->stranger = strangers_.Admit(std::move(arrival->source), Clock::now());
    Queue(*c, MessageType::kChallenge, store_handshake::EncodeChallenge(c->server_nonce));
    connections_.push_back(std::move(c));
  }
}

// Closes strangers that have had their fair chance until one more from `source` fits; false if none may go.
bool PeerInbox::MakeRoomFor(const std::string& source) {
  return strangers_.MakeRoomFor(source, Clock::now(), [&](StrangerGate::Id victim) {
    for (const auto& c : connections_) {
      if (c->stranger != victim || c->closed) continue;
      ReadFrom(*c);  // a hello already received is answered first: its sender may be a rank, only slow
      if (c->rank < 0 && !c->closed) {
        c->hang_up_when_sent = true;
        Queue(*c, MessageType::kBusy, BusyText(source));
        Close(*c);
      }
    }
  });
}

std::string PeerInbox::BusyText(const std::string& source) const {
  return "the peer links of rank " + std::to_string(rank_) + " are busy: " + BusyReason(source);
}

void PeerInbox::ReadFrom(Connection& c) {
  for (int reads = 0; reads < kReadsPerWakeup && !c.closed && !c.hang_up_when_sent; ++reads) {
    const bool in_header = c.header_filled < sizeof c.header;
    char* into = in_header ? c.header + c.header_filled : c.payload.data() + c.payload_filled;
    const size_t wanted = in_header ? sizeof c.header - c.header_filled : c.payload.size() - c.payload_filled;
    const ssize_t n = recv(c.fd.get(), into, wanted, 0);
    if (n == 0) return Close(c);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) Close(c);
      return;
    }
    bytes_received_ += static_cast<uint64_t>(n);
    if (!in_header) {
      c.payload_filled += static_cast<size_t>(n);
    } else if ((c.header_filled += static_cast<size_t>(n)) < sizeof c.header || !StartPayload(c)) {
      continue;
    }
    if (c.payload_filled == c.payload.size()) OnFrame(c);
  }
}

// Checks a frame's declared length before anything is buffered for it: a stranger may send a hello and nothing
// larger, a rank a message up to the cap.
bool PeerInbox::StartPayload(Connection& c) {
  const store_wire::FrameHeader header = store_wire::DecodeHeader(std::string_view(c.header, sizeof c.header));
  const uint64_t limit = c.rank < 0 ? store_wire::kMaxHandshakeBytes : kMaxPeerMessageBytes + kMessagePrefixBytes;
  if (header.length > limit) {
    Drop(c,
         Corrupt("a frame of " + std::to_string(header.length) + " bytes, over the limit of " + std::to_string(limit)));
    return false;
  }
  c.type = header.type;
  c.payload.assign(header.length, '\0');
  c.payload_filled = 0;
  return true;
}

void PeerInbox::OnFrame(Connection& c) {
  if (c.rank < 0) {
    OnHello(c);
  } else if (Status handled = OnMessage(c); !handled.ok()) {
    Drop(c, handled);
  }
  c.header_filled = 0;
  c.payload = {};
  c.payload_filled = 0;
}

void PeerInbox::OnHello(Connection& c) {
  if (c.type != static_cast<uint32_t>(MessageType::kHello)) return Close(c);
  Result<store_handshake::Hello> hello = store_handshake::DecodeAuthenticHello(c.payload, secret_, c.server_nonce);
  Status admitted = hello.status().WithContext("the peer links of rank " + std::to_string(rank_));
  if (admitted.ok() && hello->world_size != world_size_) {
    admitted =
        Mismatch("rank " + std::to_string(hello->rank) + " says the world has " + std::to_string(hello->world_size) +
                 " ranks, but rank " + std::to_string(rank_) + " is in a world of " + std::to_string(world_size_));
  } else if (admitted.ok() && (hello->rank < 0 || hello->rank >= world_size_ || hello->rank == rank_)) {
    admitted = InvalidArgument("rank " + std::to_string(rank_) + " refused a peer link from rank " +
                               std::to_string(hello->rank));
  }
  if (!admitted.ok()) {
    c.hang_up_when_sent = true;
    return Queue(c, MessageType::kError, store_wire::EncodeError(admitted));
  }
  c.rank = hello->rank;
  strangers_.Forget(c.stranger);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++open_links_[c.rank];
    had_link_[c.rank] = true;
  }
  Queue(c, MessageType::kOk, store_handshake::EncodeWelcome(secret_, c.server_nonce, hello->client_nonce));
}

Status PeerInbox::OnMessage(Connection& c) {
  if (c.type != static_cast<uint32_t>(MessageType::kPeerMessage)) {
    return Corrupt("a frame of unknown type " + std::to_string(c.type));
  }
  ByteReader reader(c.payload, "peer message");
  uint64_t sequence = 0;
  int32_t sender = 0;
  RETURN_IF_ERROR(reader.U64(&sequence));
  RETURN_IF_ERROR(reader.I32(&sender));
  if (sender != c.rank) return Corrupt("a message signed by rank " + std::to_string(sender));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (sequence < finished_below_) {
      if (abandoned_.count(sequence) > 0) return Status::Ok();
      return Corrupt("a message for collective " + std::to_string(sequence) + ", which is over");
    }
    const auto [slot, added] = messages_.try_emplace({sequence, sender});
    if (!added) return Corrupt("a second message for collective " + std::to_string(sequence));
    slot->second = c.payload.substr(kMessagePrefixBytes);
  }
  queued_.notify_all();
  ByteWriter ack;
  ack.U64(sequence);
  Queue(c, MessageType::kPeerAck, ack.data());
  return Status::Ok();
}

void PeerInbox::Queue(Connection& c, MessageType type, std::string_view payload) {
  c.out += store_wire::EncodeFrame(type, payload);
  Flush(c);
}

void PeerInbox::Flush(Connection& c) {
  while (!c.out.empty() && !c.closed) {
    const ssize_t n = send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) Close(c);
      return;
    }
    bytes_sent_ += static_cast<uint64_t>(n);
    c.out.erase(0, static_cast<size_t>(n));
  }
  if (c.out.empty() && c.hang_up_when_sent) Close(c);
}

// A rank that broke the protocol: its link goes, and this rank's next collective learns why.
void PeerInbox::Drop(Connection& c, const Status& why) {
  if (c.rank >= 0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failure_.ok()) {
        failure_ = Status(why.code(), "rank " + std::to_string(rank_) + " dropped its peer link from rank " +
                                          std::to_string(c.rank) + ", which sent " + why.message());
      }
    }
    queued_.notify_all();
  }
  Close(c);
}

void PeerInbox::Close(Connection& c) {
  if (c.closed) return;
  c.closed = true;
  c.fd.Reset();
  if (c.rank < 0) return strangers_.Forget(c.stranger);
  {
    std::lock_guard<std::mutex> lock(mu_);
    --open_links_[c.rank];
  }
  queued_.notify_all();
}

}  // namespace ckpt::coll

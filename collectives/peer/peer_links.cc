#include "collectives/peer/peer_links.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "collectives/store/store_auth.h"
#include "collectives/store/store_handshake.h"
#include "collectives/store/tcp_store_wire.h"
#include "common/bytes.h"
#include "common/os_error.h"

namespace ckpt::coll {
namespace {

using store_wire::MessageType;

// A wait longer than this asks the store whether a rank died, and again after each as long; the store asks rank 0
// at most once per PeerCheckInterval (tcp_store.h), which grows with the world so that thousands of waiting ranks do
// not make rank 0's store the hot spot.
constexpr std::chrono::milliseconds kPeerCheckInterval{250};
constexpr uint64_t kAckBytes = sizeof(uint64_t);
// A peer whose inbox turns a connection away (too many strangers) is tried again, backing off between these bounds.
constexpr std::chrono::milliseconds kFirstRetryDelay{10};
constexpr std::chrono::milliseconds kMaxRetryDelay{500};

// Names the first few ranks only: a message listing thousands helps nobody.
std::string RankList(const std::vector<int>& ranks) {
  constexpr size_t kMaxRanksNamed = 16;
  std::string list;
  for (size_t i = 0; i < ranks.size() && i < kMaxRanksNamed; ++i)
    list += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > kMaxRanksNamed) list += ", ... (" + std::to_string(ranks.size()) + " in all)";
  return list;
}

std::chrono::milliseconds Remaining(PeerLinks::Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::ceil<std::chrono::milliseconds>(deadline - PeerLinks::Clock::now()));
}

}  // namespace

std::string PeerLinkAddressKey(int rank) { return "ckpt/peer-link/" + std::to_string(rank); }

Result<std::unique_ptr<PeerLinks>> PeerLinks::Open(TcpStore& store) {
  ASSIGN_OR_RETURN(std::string host, store.LocalHost());
  const std::string secret = store.AuxiliaryConfig().secret;
  ASSIGN_OR_RETURN(std::unique_ptr<PeerInbox> inbox, PeerInbox::Start(store.rank(), store.world_size(), host, secret));
  ByteWriter address;
  address.Bytes(host);
  address.I32(inbox->port());
  RETURN_IF_ERROR(store.Set(PeerLinkAddressKey(store.rank()), address.data()));
  return std::unique_ptr<PeerLinks>(new PeerLinks(store, secret, std::move(inbox)));
}

PeerLinks::PeerLinks(TcpStore& store, std::string secret, std::unique_ptr<PeerInbox> inbox)
    : store_(store),
      rank_(store.rank()),
      world_size_(store.world_size()),
      secret_(std::move(secret)),
      inbox_(std::move(inbox)),
      links_(world_size_),
      opened_(world_size_, false) {}

Status PeerLinks::Deliver(uint64_t sequence, const std::vector<std::pair<int, std::string_view>>& messages,
                          Clock::time_point deadline) {
  std::vector<int> receivers;
  for (const auto& [to, message] : messages) {
    RETURN_IF_ERROR(Send(to, sequence, message, deadline));
    receivers.push_back(to);
  }
  return AwaitAcks(sequence, std::move(receivers), deadline);
}

Result<std::string> PeerLinks::Receive(uint64_t sequence, int from, Clock::time_point deadline) {
  for (;;) {
    RETURN_IF_ERROR(inbox_->TakeFailure());
    std::optional<std::string> message =
        inbox_->Take(sequence, from, std::min(deadline, Clock::now() + kPeerCheckInterval));
    if (message) return std::move(*message);
    RETURN_IF_ERROR(inbox_->TakeFailure());
    if (inbox_->LinkClosed(from)) {
      return PeerFailed("the peer link from rank " + std::to_string(from) + " to rank " + std::to_string(rank_) +
                        " closed before its message of collective " + std::to_string(sequence) + " came");
    }
    if (Clock::now() >= deadline) {
      return Timeout("rank " + std::to_string(rank_) + " waited in vain for the message of collective " +
                     std::to_string(sequence) + " from rank " + std::to_string(from));
    }
    RETURN_IF_ERROR(store_.CheckPeers());
  }
}

std::vector<int> PeerLinks::LinkedRanks() const {
  std::vector<int> linked;
  const std::vector<bool> accepted = inbox_->Accepted();
  for (int r = 0; r < world_size_; ++r) {
    if (opened_[r] || accepted[r]) linked.push_back(r);
  }
  return linked;
}

Result<std::map<int, std::string>> PeerLinks::TakeAll(uint64_t sequence) {
  RETURN_IF_ERROR(inbox_->TakeFailure());
  return inbox_->TakeAll(sequence);
}

// The peer's address comes from the store, published when its links opened. An inbox flooded with strangers turns
// connections away before reading their hello: tried again, with backoff, until the deadline.
Status PeerLinks::Connect(int to, Clock::time_point deadline) {
  ASSIGN_OR_RETURN(std::string published, store_.Wait(PeerLinkAddressKey(to), Remaining(deadline)));
  ByteReader reader(published, "the peer link address of rank " + std::to_string(to));
  std::string host;
  int32_t port = 0;
  RETURN_IF_ERROR(reader.Bytes(&host));
  RETURN_IF_ERROR(reader.I32(&port));
  RETURN_IF_ERROR(reader.ExpectDone());
  std::chrono::milliseconds delay = kFirstRetryDelay;
  for (;;) {
    bool turned_away = false;
    Status linked = Link(to, host, port, deadline, &turned_away);
    if (!turned_away) return linked;
    if (Clock::now() + delay >= deadline) return Timeout(LinkTo(to) + ": " + linked.message());
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, kMaxRetryDelay);
  }
}

// One attempt at opening the link to `to`; *turned_away when its inbox refused it for pressure (safe to retry).
Status PeerLinks::Link(int to, const std::string& host, int port, Clock::time_point deadline, bool* turned_away) {
  Result<UniqueFd> fd = store_wire::ConnectOnce(host, port, deadline);
  if (!fd.ok()) {
    const std::string why = "cannot connect to " + store_wire::FormatAddress(host, port) + ": " + fd.status().message();
    return Clock::now() >= deadline ? Timeout(LinkTo(to) + ": " + why) : PeerFailed(LinkTo(to) + ": " + why);
  }
  RETURN_IF_ERROR(store_wire::ConfigureSocket(fd->get()));
  links_[to] = std::move(fd).value();
  opened_[to] = true;
  return Handshake(to, deadline, turned_away);
}

// The connecting end of the store's handshake: the peer plays the server, so each side proves it knows the secret.
Status PeerLinks::Handshake(int to, Clock::time_point deadline, bool* turned_away) {
  ASSIGN_OR_RETURN(auto challenge, ReadFrame(to, store_wire::kMaxHandshakeBytes, deadline));
  if (challenge.first == static_cast<uint32_t>(MessageType::kBusy)) {
    return TurnedAway(to, challenge.second, turned_away);
  }
  if (challenge.first != static_cast<uint32_t>(MessageType::kChallenge)) {
    return Failed(to, Corrupt(LinkTo(to) + " opened with frame type " + std::to_string(challenge.first)));
  }
  const std::string address = "rank " + std::to_string(to);
  ASSIGN_OR_RETURN(std::string server_nonce, store_handshake::DecodeChallenge(challenge.second, address));
  store_handshake::Hello hello;
  hello.rank = rank_;
  hello.world_size = world_size_;
  ASSIGN_OR_RETURN(hello.client_nonce, store_auth::RandomBytes(store_auth::kNonceBytes));
  const std::string request = store_handshake::EncodeHello(hello, secret_, server_nonce);
  RETURN_IF_ERROR(SendAll(to, store_wire::EncodeFrame(MessageType::kHello, request), deadline));
  ASSIGN_OR_RETURN(auto welcome, ReadFrame(to, store_wire::kMaxHandshakeBytes, deadline));
  if (welcome.first == static_cast<uint32_t>(MessageType::kBusy)) return TurnedAway(to, welcome.second, turned_away);
  if (welcome.first == static_cast<uint32_t>(MessageType::kError)) {
    return Failed(to, store_wire::DecodeError(welcome.second).WithContext(LinkTo(to)));
  }
  if (welcome.first != static_cast<uint32_t>(MessageType::kOk)) {
    return Failed(to,
                  Corrupt(LinkTo(to) + ": the peer answered hello with frame type " + std::to_string(welcome.first)));
  }
  Status welcomed = store_handshake::CheckWelcome(welcome.second, secret_, server_nonce, hello.client_nonce, address);
  return welcomed.ok() ? welcomed : Failed(to, welcomed);
}

Status PeerLinks::Send(int to, uint64_t sequence, std::string_view message, Clock::time_point deadline) {
  if (message.size() > kMaxPeerMessageBytes) {
    return InvalidArgument("a message of " + std::to_string(message.size()) + " bytes for rank " + std::to_string(to) +
                           " exceeds the peer links' limit of " + std::to_string(kMaxPeerMessageBytes));
  }
  if (!links_[to].valid()) RETURN_IF_ERROR(Connect(to, deadline));
  ByteWriter prefix;
  prefix.U64(sequence);
  prefix.I32(rank_);
  RETURN_IF_ERROR(SendAll(
      to, store_wire::EncodeHeader(MessageType::kPeerMessage, kMessagePrefixBytes + message.size()) + prefix.data(),
      deadline));
  return SendAll(to, message, deadline);
}

Status PeerLinks::AwaitAcks(uint64_t sequence, std::vector<int> waiting, Clock::time_point deadline) {
  while (!waiting.empty()) {
    std::vector<pollfd> fds;
    for (int r : waiting) fds.push_back({links_[r].get(), POLLIN, 0});
    const Clock::time_point slice = std::min(deadline, Clock::now() + kPeerCheckInterval);
    const int ready = poll(fds.data(), fds.size(), store_wire::PollTimeoutMs(slice));
    if (ready < 0 && errno != EINTR) return OsError("poll on the peer links", errno);
    if (ready <= 0) {
      if (Clock::now() >= deadline) {
        return Timeout("rank " + std::to_string(rank_) + " waited in vain for ranks " + RankList(waiting) +
                       " to take its messages of collective " + std::to_string(sequence));
      }
      RETURN_IF_ERROR(store_.CheckPeers());
      continue;
    }
    std::vector<int> still_waiting;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) {
        still_waiting.push_back(waiting[i]);
      } else {
        RETURN_IF_ERROR(ReadAck(waiting[i], sequence, deadline));
      }
    }
    waiting = std::move(still_waiting);
  }
  return Status::Ok();
}

Status PeerLinks::ReadAck(int from, uint64_t sequence, Clock::time_point deadline) {
  ASSIGN_OR_RETURN(auto ack, ReadFrame(from, kAckBytes, deadline));
  ByteReader reader(ack.second, "the ack of rank " + std::to_string(from));
  uint64_t acked = 0;
  const bool well_formed =
      ack.first == static_cast<uint32_t>(MessageType::kPeerAck) && reader.U64(&acked).ok() && reader.ExpectDone().ok();
  if (!well_formed || acked != sequence) {
    return Failed(from, Corrupt(LinkTo(from) + ": rank " + std::to_string(from) + " answered a message of collective " +
                                std::to_string(sequence) + " with something other than its ack"));
  }
  return Status::Ok();
}

// One frame from `peer`, its length checked against `limit` before anything is read for it.
Result<std::pair<uint32_t, std::string>> PeerLinks::ReadFrame(int peer, uint64_t limit, Clock::time_point deadline) {
  char header_bytes[store_wire::kHeaderBytes];
  RETURN_IF_ERROR(RecvAll(peer, header_bytes, sizeof header_bytes, deadline));
  const store_wire::FrameHeader header = store_wire::DecodeHeader(std::string_view(header_bytes, sizeof header_bytes));
  if (header.length > limit) {
    return Failed(peer, Corrupt(LinkTo(peer) + ": rank " + std::to_string(peer) + " sent a frame of " +
                                std::to_string(header.length) + " bytes, over the limit of " + std::to_string(limit)));
  }
  std::string payload(header.length, '\0');
  RETURN_IF_ERROR(RecvAll(peer, payload.data(), payload.size(), deadline));
  return std::make_pair(header.type, std::move(payload));
}

Status PeerLinks::SendAll(int to, std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    const ssize_t n = send(links_[to].get(), data.data(), data.size(), MSG_NOSIGNAL);
    if (n >= 0) {
      data.remove_prefix(static_cast<size_t>(n));
      bytes_sent_ += static_cast<uint64_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      RETURN_IF_ERROR(WaitReady(to, POLLOUT, deadline));
    } else if (errno != EINTR) {
      return Failed(to, PeerFailed(LinkTo(to) + ": " + OsErrorText(errno)));
    }
  }
  return Status::Ok();
}

Status PeerLinks::RecvAll(int from, char* out, size_t size, Clock::time_point deadline) {
  while (size > 0) {
    const ssize_t n = recv(links_[from].get(), out, size, 0);
    if (n > 0) {
      out += n;
      size -= static_cast<size_t>(n);
      bytes_received_ += static_cast<uint64_t>(n);
    } else if (n == 0) {
      return Failed(from, PeerFailed(LinkTo(from) + ": rank " + std::to_string(from) + " closed it"));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      RETURN_IF_ERROR(WaitReady(from, POLLIN, deadline));
    } else if (errno != EINTR) {
      return Failed(from, PeerFailed(LinkTo(from) + ": " + OsErrorText(errno)));
    }
  }
  return Status::Ok();
}

// Waits for `events` on the link to `peer`, asking the store every kPeerCheckInterval whether a rank died.
Status PeerLinks::WaitReady(int peer, short events, Clock::time_point deadline) {
  for (;;) {
    const int ready =
        store_wire::WaitFor(links_[peer].get(), events, std::min(deadline, Clock::now() + kPeerCheckInterval));
    if (ready > 0) return Status::Ok();
    if (ready < 0) return Failed(peer, PeerFailed(LinkTo(peer) + ": " + OsErrorText(errno)));
    if (Clock::now() >= deadline) {
      return Failed(peer, Timeout(LinkTo(peer) + ": rank " + std::to_string(rank_) + " waited in vain for rank " +
                                  std::to_string(peer)));
    }
    if (Status alive = store_.CheckPeers(); !alive.ok()) return Failed(peer, alive);
  }
}

Status PeerLinks::TurnedAway(int peer, const std::string& reason, bool* turned_away) {
  *turned_away = true;
  return Failed(peer, PeerFailed(reason));
}

// A link that failed mid-frame cannot be trusted to be at a frame's start again: it goes, and the next send to
// the peer opens a new one.
Status PeerLinks::Failed(int peer, Status why) {
  links_[peer].Reset();
  return why;
}

std::string PeerLinks::LinkTo(int peer) const {
  return "the peer link from rank " + std::to_string(rank_) + " to rank " + std::to_string(peer);
}

}  // namespace ckpt::coll

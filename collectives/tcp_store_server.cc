#include "collectives/tcp_store_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <deque>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "collectives/store_auth.h"
#include "collectives/store_handshake.h"
#include "collectives/store_strangers.h"
#include "collectives/tcp_store_wire.h"
#include "common/bytes.h"

namespace ckpt::coll {
namespace {

using Clock = std::chrono::steady_clock;
using ckpt::UniqueFd;
using store_wire::MessageType;

// How much one connection may read per wakeup, so that a busy sender cannot starve the others.
constexpr size_t kReadChunkBytes = 64 * 1024;
constexpr int kReadChunksPerWakeup = 16;
// What a connection turned away for pressure is told, before the gate's reason.
constexpr char kBusyPrefix[] = "the store on rank 0 is busy: ";
// Rank lists in error messages stop after this many.
constexpr size_t kMaxRanksNamed = 16;

enum class Pending { kNone, kHandshake, kHello, kWait, kAllGather };

struct Connection {
  UniqueFd fd;
  std::string in;  // received bytes not yet parsed
  std::deque<std::shared_ptr<const std::string>> out;
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
};

enum class RankState { kAbsent, kConnected, kLeft, kDead };

// The connect barrier or one collective (allgather, all-to-all, broadcast): who has arrived, with what.
struct Collective {
  explicit Collective(int world_size)
      : arrived(world_size, false), contributions(world_size), reply_bytes(world_size, sizeof(uint32_t)) {}
  MessageType kind = MessageType::kAllGather;
  std::vector<bool> arrived;
  // Allgather and broadcast: each rank's contribution. All-to-all: routed[to] holds the messages ranks send `to`,
  // with their senders (only messages that are not empty: most pairs of a large job have nothing to say).
  std::vector<std::string> contributions;
  std::vector<std::vector<std::pair<int, std::string>>> routed;
  int count = 0;
  std::vector<uint64_t> reply_bytes;  // the size of each rank's answer's payload so far
  std::optional<Status> failure;
};

// "rank 2", "ranks 1, 2", "ranks 0, 1, ... (40 in all)".
std::string FormatRanks(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size() && i < kMaxRanksNamed; ++i) {
    text += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
  }
  if (ranks.size() > kMaxRanksNamed) text += ", ... (" + std::to_string(ranks.size()) + " in all)";
  return text;
}

std::vector<int> MissingRanks(const Collective& collective) {
  std::vector<int> missing;
  for (size_t r = 0; r < collective.arrived.size(); ++r) {
    if (!collective.arrived[r]) missing.push_back(static_cast<int>(r));
  }
  return missing;
}

std::shared_ptr<const std::string> Frame(MessageType type, std::string_view payload) {
  return std::make_shared<const std::string>(store_wire::EncodeFrame(type, payload));
}

std::shared_ptr<const std::string> ErrorFrame(const Status& status) {
  return Frame(MessageType::kError, store_wire::EncodeError(status));
}

}  // namespace

class StoreServer::Loop {
 public:
  Loop(UniqueFd listener, UniqueFd wake_read, UniqueFd wake_write, int world_size, std::string secret)
      : secret_(std::move(secret)),
        listener_(std::move(listener)),
        wake_read_(std::move(wake_read)),
        wake_write_(std::move(wake_write)),
        world_size_(world_size),
        ranks_(world_size, RankState::kAbsent),
        connect_(world_size) {}

  void Run() {
    try {
      Serve();
    } catch (const std::exception&) {
      // Out of memory, most likely: what follows closes every connection, which every rank reports as the store lost.
    }
    conns_.clear();
    listener_.Reset();
  }

  void RequestStop(std::chrono::milliseconds grace) {
    stop_deadline_ticks_.store((Clock::now() + grace).time_since_epoch().count());
    stop_requested_.store(true);
    const char byte = 1;
    while (write(wake_write_.get(), &byte, 1) < 0 && errno == EINTR) {
    }
  }

 private:
  void Serve() {
    std::vector<pollfd> fds;
    for (;;) {
      const Clock::time_point now = Clock::now();
      if (stop_requested_.load() && (OpenRankConnections() == 0 || now >= StopDeadline())) return;
      BuildPollSet(&fds, now);
      const int ready = poll(fds.data(), fds.size(), PollTimeoutMs(now));
      if (ready < 0 && errno != EINTR) return;
      if (ready > 0) HandleEvents(fds);
      ExpireDeadlines(Clock::now());
      SweepHungUp();
      RemoveClosed();
      // Only now, so that the gate counts just the strangers still there.
      if (ready > 0 && (fds[1].revents & POLLIN)) AcceptAll();
    }
  }

  // Slot 0 is the wake pipe, slot 1 the listener (left out while the gate is closed), then one per connection in
  // the order of conns_.
  void BuildPollSet(std::vector<pollfd>* fds, Clock::time_point now) const {
    fds->clear();
    fds->push_back({wake_read_.get(), POLLIN, 0});
    fds->push_back({strangers_.Open(now) ? listener_.get() : -1, POLLIN, 0});
    for (const auto& c : conns_) {
      // A connection with a reply still unsent is not read from until the reply is out (hang-ups still show).
      const short events = static_cast<short>(c->out.empty() ? POLLIN : POLLOUT);
      fds->push_back({c->fd.get(), events, 0});
    }
  }

  int PollTimeoutMs(Clock::time_point now) const {
    std::optional<Clock::time_point> next;
    if (stop_requested_.load()) next = StopDeadline();
    if (const auto reopens = strangers_.ReopensAt(now); reopens && (!next || *reopens < *next)) next = reopens;
    for (const auto& c : conns_) {
      if (c->closed || c->pending == Pending::kNone) continue;
      if (!next || c->deadline < *next) next = c->deadline;
    }
    if (!next) return -1;
    if (*next <= now) return 0;
    // Rounded up, so that a wakeup never comes a little early and spins.
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(*next - now).count();
    return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
  }

  void HandleEvents(const std::vector<pollfd>& fds) {
    const size_t existing = conns_.size();
    for (size_t i = 0; i < existing; ++i) {
      Connection& c = *conns_[i];
      const short revents = fds[i + 2].revents;
      if (c.closed || revents == 0) continue;
      if (revents & POLLOUT) {
        Flush(c);
        if (c.out.empty()) ParseFrames(c);  // requests that arrived while the reply was going out
      }
      if (revents & (POLLIN | POLLHUP | POLLERR)) ReadFrom(c);
    }
    if (fds[0].revents & POLLIN) DrainWakePipe();
  }

  void DrainWakePipe() {
    char buffer[64];
    while (read(wake_read_.get(), buffer, sizeof buffer) > 0) {
    }
  }

  // Takes connections from the listen queue while the gate lets them in (collectives/store_strangers.h).
  void AcceptAll() {
    while (std::optional<StrangerGate::Arrival> arrival = strangers_.Accept(listener_.get(), Clock::now())) {
      if (!MakeRoomFor(arrival->source)) {
        TurnAway(arrival->fd.get(), kBusyPrefix + BusyReason(arrival->source));
        continue;
      }
      Result<std::string> nonce = store_auth::RandomBytes(store_auth::kNonceBytes);
      if (!store_wire::ConfigureSocket(arrival->fd.get()).ok() || !nonce.ok()) continue;
      auto c = std::make_unique<Connection>();
      c->fd = std::move(arrival->fd);
      c->server_nonce = std::move(nonce).value();
      c->pending = Pending::kHandshake;
      c->deadline = Clock::now() + kStrangerHelloTimeout;
      c->stranger = strangers_.Admit(std::move(arrival->source), Clock::now());
      Send(*c, Frame(MessageType::kChallenge, store_handshake::EncodeChallenge(c->server_nonce)));
      conns_.push_back(std::move(c));
    }
  }

  // Closes strangers that have had their fair chance until one more from `source` fits; false if none may go.
  bool MakeRoomFor(const std::string& source) {
    return strangers_.MakeRoomFor(source, Clock::now(), [&](StrangerGate::Id victim) {
      for (const auto& c : conns_) {
        if (c->stranger != victim || c->closed) continue;
        ReadFrom(*c);  // a hello already received is answered first: its sender may be a rank, only slow
        if (c->rank < 0 && !c->closed) {
          Send(*c, Frame(MessageType::kBusy, kBusyPrefix + BusyReason(source)));
          c->closed = true;
        }
      }
    });
  }

  void ReadFrom(Connection& c) {
    char buffer[kReadChunkBytes];
    for (int chunk = 0; chunk < kReadChunksPerWakeup && !c.closed; ++chunk) {
      const ssize_t n = recv(c.fd.get(), buffer, sizeof buffer, 0);
      if (n > 0) {
        c.in.append(buffer, static_cast<size_t>(n));
        ParseFrames(c);
      } else if (n == 0) {
        Disconnect(c);
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return;
      } else if (errno != EINTR) {
        Disconnect(c);
      }
    }
  }

  void ParseFrames(Connection& c) {
    size_t pos = 0;
    while (!c.closed && c.out.empty() && c.in.size() - pos >= store_wire::kHeaderBytes) {
      const store_wire::FrameHeader header = store_wire::DecodeHeader(std::string_view(c.in).substr(pos));
      const uint64_t limit = c.rank < 0 ? store_wire::kMaxHandshakeBytes : store_wire::kMaxMessageBytes;
      if (header.length > limit) {
        Disconnect(c);
        return;
      }
      if (c.in.size() - pos - store_wire::kHeaderBytes < header.length) break;
      const std::string_view payload(c.in.data() + pos + store_wire::kHeaderBytes, header.length);
      pos += store_wire::kHeaderBytes + header.length;
      HandleMessage(c, header.type, payload);
    }
    c.in.erase(0, pos);
  }

  void HandleMessage(Connection& c, uint32_t type, std::string_view payload) {
    if (type == static_cast<uint32_t>(MessageType::kGoodbye)) return Leave(c);
    if (type == static_cast<uint32_t>(MessageType::kHello)) return OnHello(c, payload);
    // Anything else before the handshake, or while a request is outstanding, is a peer we cannot trust.
    if (c.rank < 0 || c.pending != Pending::kNone) return Disconnect(c);
    Status status;
    switch (static_cast<MessageType>(type)) {
      case MessageType::kSet:
        status = OnSet(c, payload);
        break;
      case MessageType::kGet:
        status = OnGet(c, payload);
        break;
      case MessageType::kWait:
        status = OnWait(c, payload);
        break;
      case MessageType::kDelete:
        status = OnDelete(c, payload);
        break;
      case MessageType::kAllGather:
      case MessageType::kAllToAll:
      case MessageType::kBroadcast:
        if (c.auxiliary) return Disconnect(c);
        status = OnCollective(c, static_cast<MessageType>(type), payload);
        break;
      default:
        return Disconnect(c);
    }
    if (!status.ok()) Send(c, ErrorFrame(status));
  }

  // --- handshake ------------------------------------------------------------------------------------------------

  void OnHello(Connection& c, std::string_view payload) {
    if (c.rank >= 0) return Disconnect(c);
    Result<store_handshake::Hello> hello = store_handshake::DecodeAuthenticHello(payload, secret_, c.server_nonce);
    if (!hello.ok()) return Refuse(c, hello.status().WithContext("the store on rank 0"));
    c.welcome = store_handshake::EncodeWelcome(secret_, c.server_nonce, hello->client_nonce);
    if (hello->auxiliary) return OnAuxiliaryHello(c, *hello);
    if (Status admitted = Admit(hello->rank, hello->world_size); !admitted.ok()) return Refuse(c, admitted);
    c.rank = hello->rank;
    strangers_.Forget(c.stranger);
    ranks_[c.rank] = RankState::kConnected;
    connect_.arrived[c.rank] = true;
    ++connect_.count;
    SetPending(c, Pending::kHello, hello->timeout_ms);
    if (connect_.count == world_size_) {
      // Each rank gets its own proof: they answer different nonces.
      for (const auto& waiting : conns_) {
        if (waiting->pending == Pending::kHello) Answer(*waiting, Frame(MessageType::kOk, waiting->welcome));
      }
    }
  }

  Status Admit(int rank, int world_size) const {
    if (world_size != world_size_) {
      return Mismatch("rank " + std::to_string(rank) + " says the world has " + std::to_string(world_size) +
                      " ranks, but the store on rank 0 serves " + std::to_string(world_size_));
    }
    if (rank < 0 || rank >= world_size_) {
      return InvalidArgument("rank " + std::to_string(rank) + " is out of range for world size " +
                             std::to_string(world_size_));
    }
    if (ranks_[rank] == RankState::kConnected) {
      return AlreadyExists("rank " + std::to_string(rank) + " is already connected to the store");
    }
    if (ranks_[rank] != RankState::kAbsent) {
      return AlreadyExists("rank " + std::to_string(rank) + " already left the store and cannot rejoin");
    }
    if (connect_.failure) return *connect_.failure;
    return Status::Ok();
  }

  // A second connection of a rank already connected (for a background thread): answered at once, kept out of the
  // connect barrier and of collectives.
  void OnAuxiliaryHello(Connection& c, const store_handshake::Hello& hello) {
    if (hello.world_size != world_size_ || hello.rank < 0 || hello.rank >= world_size_ ||
        ranks_[hello.rank] != RankState::kConnected) {
      return Refuse(c, InvalidArgument("an auxiliary connection for rank " + std::to_string(hello.rank) +
                                       " needs that rank connected to the store first"));
    }
    c.rank = hello.rank;
    strangers_.Forget(c.stranger);
    c.auxiliary = true;
    c.pending = Pending::kNone;
    Send(c, Frame(MessageType::kOk, c.welcome));
  }

  // Answers a stranger's hello with an error and hangs up; it never became a rank, so nobody else is affected.
  void Refuse(Connection& c, const Status& status) {
    Send(c, ErrorFrame(status));
    c.closed = true;
  }

  // --- requests -------------------------------------------------------------------------------------------------

  Status OnSet(Connection& c, std::string_view payload) {
    ByteReader reader(payload, "store set from rank " + std::to_string(c.rank));
    std::string key, value;
    RETURN_IF_ERROR(reader.Bytes(&key));
    RETURN_IF_ERROR(reader.Bytes(&value));
    RETURN_IF_ERROR(reader.ExpectDone());
    Send(c, Frame(MessageType::kOk, {}));
    ByteWriter reply;
    reply.Bytes(value);
    const auto frame = Frame(MessageType::kOk, reply.data());
    for (const auto& waiter : conns_) {
      if (waiter->pending == Pending::kWait && waiter->wait_key == key) Answer(*waiter, frame);
    }
    kv_[std::move(key)] = std::move(value);
    return Status::Ok();
  }

  Status OnGet(Connection& c, std::string_view payload) {
    ByteReader reader(payload, "store get from rank " + std::to_string(c.rank));
    std::string key;
    RETURN_IF_ERROR(reader.Bytes(&key));
    RETURN_IF_ERROR(reader.ExpectDone());
    RETURN_IF_ERROR(DeadRanksError());
    const auto it = kv_.find(key);
    ByteWriter reply;
    reply.U8(it != kv_.end() ? 1 : 0);
    reply.Bytes(it != kv_.end() ? std::string_view(it->second) : std::string_view());
    Send(c, Frame(MessageType::kOk, reply.data()));
    return Status::Ok();
  }

  Status OnWait(Connection& c, std::string_view payload) {
    ByteReader reader(payload, "store wait from rank " + std::to_string(c.rank));
    std::string key;
    uint64_t timeout_ms = 0;
    RETURN_IF_ERROR(reader.Bytes(&key));
    RETURN_IF_ERROR(reader.U64(&timeout_ms));
    RETURN_IF_ERROR(reader.ExpectDone());
    RETURN_IF_ERROR(DeadRanksError());
    if (const auto it = kv_.find(key); it != kv_.end()) {
      ByteWriter reply;
      reply.Bytes(it->second);
      Send(c, Frame(MessageType::kOk, reply.data()));
      return Status::Ok();
    }
    c.wait_key = std::move(key);
    SetPending(c, Pending::kWait, timeout_ms);
    return Status::Ok();
  }

  Status OnDelete(Connection& c, std::string_view payload) {
    ByteReader reader(payload, "store delete from rank " + std::to_string(c.rank));
    std::string key;
    RETURN_IF_ERROR(reader.Bytes(&key));
    RETURN_IF_ERROR(reader.ExpectDone());
    kv_.erase(key);
    Send(c, Frame(MessageType::kOk, {}));
    return Status::Ok();
  }

  Status OnCollective(Connection& c, MessageType kind, std::string_view payload) {
    ByteReader reader(
        payload, std::string("store ") + store_wire::CollectiveName(kind) + " from rank " + std::to_string(c.rank));
    uint64_t sequence = 0, timeout_ms = 0;
    std::string contribution;
    RETURN_IF_ERROR(reader.U64(&sequence));
    RETURN_IF_ERROR(reader.U64(&timeout_ms));
    RETURN_IF_ERROR(reader.Bytes(&contribution));
    RETURN_IF_ERROR(reader.ExpectDone());
    RETURN_IF_ERROR(DeadRanksError());
    const std::string name = std::string(store_wire::CollectiveName(kind)) + " " + std::to_string(sequence);
    const auto [it, first] = gatherings_.try_emplace(sequence, world_size_);
    Collective& gathering = it->second;
    if (first) gathering.kind = kind;
    if (gathering.failure) return *gathering.failure;
    if (gathering.arrived[c.rank])
      return InvalidArgument("rank " + std::to_string(c.rank) + " joined " + name + " twice");
    gathering.arrived[c.rank] = true;
    ++gathering.count;
    c.sequence = sequence;
    SetPending(c, Pending::kAllGather, timeout_ms);
    Status accepted = gathering.kind == kind
                          ? Accept(gathering, c.rank, std::move(contribution))
                          : Mismatch("rank " + std::to_string(c.rank) + " called " + name + " while others called " +
                                     store_wire::CollectiveName(gathering.kind) + " " + std::to_string(sequence));
    if (!accepted.ok()) {
      FailAllGather(sequence, accepted.WithContext(name));
    } else if (gathering.count == world_size_) {
      CompleteCollective(sequence);
    } else {
      FailIfAbandoned(sequence);
    }
    return Status::Ok();
  }

  // Files one rank's contribution, keeping every answer it will be part of under the message limit.
  Status Accept(Collective& gathering, int rank, std::string contribution) {
    const uint64_t limit = store_wire::kMaxMessageBytes;
    const std::string too_large = " bytes to one rank (at most " + std::to_string(limit) + ")";
    switch (gathering.kind) {
      case MessageType::kAllToAll: {
        ByteReader parts(contribution, "alltoall contribution of rank " + std::to_string(rank));
        uint32_t count = 0;
        RETURN_IF_ERROR(parts.Count(&count, static_cast<uint32_t>(world_size_), sizeof(int32_t) + sizeof(uint64_t)));
        if (gathering.routed.empty()) gathering.routed.resize(world_size_);
        int previous = -1;
        for (uint32_t i = 0; i < count; ++i) {
          int32_t to = 0;
          std::string message;
          RETURN_IF_ERROR(parts.I32(&to));
          RETURN_IF_ERROR(parts.Bytes(&message));
          if (to <= previous || to >= world_size_) {
            return Corrupt("rank " + std::to_string(rank) + " addressed a message to rank " + std::to_string(to) +
                           " out of order or outside the world");
          }
          previous = to;
          gathering.reply_bytes[to] += sizeof(int32_t) + sizeof(uint64_t) + message.size();
          if (gathering.reply_bytes[to] > limit) {
            return InvalidArgument("rank " + std::to_string(to) + " would receive " +
                                   std::to_string(gathering.reply_bytes[to]) + too_large);
          }
          gathering.routed[to].emplace_back(rank, std::move(message));
        }
        return parts.ExpectDone();
      }
      case MessageType::kBroadcast:
        if (rank != 0 && !contribution.empty()) {
          return InvalidArgument("rank " + std::to_string(rank) + " contributed to a broadcast from rank 0");
        }
        if (contribution.size() + sizeof(uint64_t) > limit) {
          return InvalidArgument("rank 0 broadcasts " + std::to_string(contribution.size()) + too_large);
        }
        gathering.contributions[rank] = std::move(contribution);
        return Status::Ok();
      default:
        gathering.reply_bytes[0] += sizeof(uint64_t) + contribution.size();
        if (gathering.reply_bytes[0] > limit) {
          return InvalidArgument("gathers " + std::to_string(gathering.reply_bytes[0]) + too_large);
        }
        gathering.contributions[rank] = std::move(contribution);
        return Status::Ok();
    }
  }

  void CompleteCollective(uint64_t sequence) {
    Collective gathering = std::move(gatherings_.at(sequence));
    gatherings_.erase(sequence);
    if (gathering.kind != MessageType::kAllToAll) {
      ByteWriter reply;
      if (gathering.kind == MessageType::kBroadcast) {
        reply.Bytes(gathering.contributions[0]);
      } else {
        reply.U32(static_cast<uint32_t>(world_size_));
        for (const std::string& contribution : gathering.contributions) reply.Bytes(contribution);
      }
      ReplyToPending(Pending::kAllGather, sequence, Frame(MessageType::kOk, reply.data()));
      return;
    }
    // Each rank gets its own messages, by sender, built and sent one rank at a time so that only one reply is copied
    // at once.
    for (const auto& c : conns_) {
      if (c->pending != Pending::kAllGather || c->sequence != sequence) continue;
      std::vector<std::pair<int, std::string>>& row = gathering.routed.empty() ? empty_row_ : gathering.routed[c->rank];
      std::sort(row.begin(), row.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      ByteWriter reply;
      reply.U32(static_cast<uint32_t>(row.size()));
      for (const auto& [from, message] : row) {
        reply.I32(from);
        reply.Bytes(message);
      }
      row = {};
      Answer(*c, Frame(MessageType::kOk, reply.data()));
    }
  }

  // An allgather that a rank which left cleanly never joined can no longer complete.
  void FailIfAbandoned(uint64_t sequence) {
    Collective& gathering = gatherings_.at(sequence);
    std::vector<int> gone;
    for (int r = 0; r < world_size_; ++r) {
      if (ranks_[r] == RankState::kLeft && !gathering.arrived[r]) gone.push_back(r);
    }
    if (gone.empty()) return;
    FailAllGather(sequence, PeerFailed(FormatRanks(gone) + " left the store without joining " +
                                       store_wire::CollectiveName(gathering.kind) + " " + std::to_string(sequence)));
  }

  void FailAllGather(uint64_t sequence, const Status& status) {
    Collective& gathering = gatherings_.at(sequence);
    if (gathering.failure) return;
    gathering.failure = status;
    gathering.contributions = std::vector<std::string>();
    gathering.routed = {};
    ReplyToPending(Pending::kAllGather, sequence, ErrorFrame(status));
  }

  void FailConnect(const Status& status) {
    if (connect_.failure || connect_.count == world_size_) return;
    connect_.failure = status;
    ReplyToPending(Pending::kHello, 0, ErrorFrame(status));
  }

  // --- ranks that go away ---------------------------------------------------------------------------------------

  Status DeadRanksError() const {
    std::vector<int> dead;
    for (int r = 0; r < world_size_; ++r) {
      if (ranks_[r] == RankState::kDead) dead.push_back(r);
    }
    if (dead.empty()) return Status::Ok();
    return PeerFailed(FormatRanks(dead) + " disconnected");
  }

  // The connection closed without a goodbye: the rank is dead, and so is every collective and wait in progress.
  void Disconnect(Connection& c) {
    if (c.closed) return;
    c.closed = true;
    if (c.auxiliary || c.rank < 0 || ranks_[c.rank] != RankState::kConnected) return;
    ranks_[c.rank] = RankState::kDead;
    const Status dead = PeerFailed("rank " + std::to_string(c.rank) + " disconnected");
    FailConnect(dead);
    for (auto& [sequence, gathering] : gatherings_) FailAllGather(sequence, dead);
    const auto frame = ErrorFrame(dead);
    for (const auto& waiter : conns_) {
      if (waiter->pending == Pending::kWait) Answer(*waiter, frame);
    }
  }

  void Leave(Connection& c) {
    c.closed = true;
    if (c.auxiliary || c.rank < 0 || ranks_[c.rank] != RankState::kConnected) return;
    ranks_[c.rank] = RankState::kLeft;
    std::vector<uint64_t> in_progress;
    for (const auto& [sequence, gathering] : gatherings_) in_progress.push_back(sequence);
    for (uint64_t sequence : in_progress) FailIfAbandoned(sequence);
  }

  void SweepHungUp() {
    bool again = true;
    while (again) {
      again = false;
      for (const auto& c : conns_) {
        if (c->hung_up && !c->closed) {
          Disconnect(*c);
          again = true;
        }
      }
    }
  }

  void RemoveClosed() {
    for (const auto& c : conns_) {
      if (c->closed) strangers_.Forget(c->stranger);
    }
    conns_.erase(std::remove_if(conns_.begin(), conns_.end(), [](const auto& c) { return c->closed; }), conns_.end());
  }

  size_t OpenRankConnections() const {
    return std::count_if(conns_.begin(), conns_.end(), [](const auto& c) { return c->rank >= 0 && !c->closed; });
  }

  // --- deadlines ------------------------------------------------------------------------------------------------

  void SetPending(Connection& c, Pending kind, uint64_t timeout_ms) {
    c.pending = kind;
    c.timeout = store_wire::ClampTimeout(timeout_ms);
    c.deadline = Clock::now() + c.timeout;
  }

  void ExpireDeadlines(Clock::time_point now) {
    for (const auto& c : conns_) {
      if (c->closed || c->pending == Pending::kNone || c->deadline > now) continue;
      const std::string waited = std::to_string(c->timeout.count()) + " ms";
      switch (c->pending) {
        case Pending::kHandshake:
          c->closed = true;
          break;
        case Pending::kHello:
          FailConnect(Timeout("timed out after " + waited + " waiting for " + FormatRanks(MissingRanks(connect_)) +
                              " to connect to the store"));
          break;
        case Pending::kWait:
          Answer(*c, ErrorFrame(Timeout("key '" + c->wait_key + "' was not set within " + waited)));
          break;
        case Pending::kAllGather: {
          const Collective& gathering = gatherings_.at(c->sequence);
          FailAllGather(c->sequence, Timeout(std::string(store_wire::CollectiveName(gathering.kind)) + " " +
                                             std::to_string(c->sequence) + " timed out after " + waited +
                                             " waiting for " + FormatRanks(MissingRanks(gathering))));
        } break;
        case Pending::kNone:
          break;
      }
    }
  }

  Clock::time_point StopDeadline() const { return Clock::time_point(Clock::duration(stop_deadline_ticks_.load())); }

  // --- sending --------------------------------------------------------------------------------------------------

  void ReplyToPending(Pending kind, uint64_t sequence, const std::shared_ptr<const std::string>& frame) {
    for (const auto& c : conns_) {
      if (c->pending == kind && (kind != Pending::kAllGather || c->sequence == sequence)) Answer(*c, frame);
    }
  }

  void Answer(Connection& c, const std::shared_ptr<const std::string>& frame) {
    c.pending = Pending::kNone;
    c.wait_key.clear();
    Send(c, frame);
  }

  void Send(Connection& c, std::shared_ptr<const std::string> frame) {
    if (c.closed || c.hung_up) return;
    c.out.push_back(std::move(frame));
    Flush(c);
  }

  void Flush(Connection& c) {
    while (!c.out.empty() && !c.hung_up) {
      const std::string& front = *c.out.front();
      const ssize_t n = send(c.fd.get(), front.data() + c.out_offset, front.size() - c.out_offset, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) c.hung_up = true;
        return;
      }
      c.out_offset += static_cast<size_t>(n);
      if (c.out_offset == front.size()) {
        c.out.pop_front();
        c.out_offset = 0;
      }
    }
  }

  const std::string secret_;
  UniqueFd listener_;
  UniqueFd wake_read_;
  UniqueFd wake_write_;
  const int world_size_;
  std::vector<RankState> ranks_;
  Collective connect_;
  std::map<uint64_t, Collective> gatherings_;
  std::vector<std::pair<int, std::string>> empty_row_;  // the messages of an all-to-all in which nobody sent any
  std::unordered_map<std::string, std::string> kv_;
  std::vector<std::unique_ptr<Connection>> conns_;
  StrangerGate strangers_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<Clock::rep> stop_deadline_ticks_{0};
};

Result<std::unique_ptr<StoreServer>> StoreServer::Start(const std::string& host, int port, int world_size,
                                                        const SecretForPort& secret_for_port) {
  ASSIGN_OR_RETURN(UniqueFd listener, store_wire::Listen(host, port));
  ASSIGN_OR_RETURN(const int bound_port, store_wire::LocalPort(listener.get()));
  // Connections made before the loop runs wait in the listen backlog: none is answered before the secret exists.
  ASSIGN_OR_RETURN(std::string secret, secret_for_port(bound_port));
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    return IoError("cannot create the store's wake pipe: " + store_wire::ErrnoText(errno));
  }
  auto loop = std::make_unique<Loop>(std::move(listener), UniqueFd(pipe_fds[0]), UniqueFd(pipe_fds[1]), world_size,
                                     std::move(secret));
  return std::unique_ptr<StoreServer>(new StoreServer(std::move(loop), bound_port));
}

StoreServer::StoreServer(std::unique_ptr<Loop> loop, int port) : loop_(std::move(loop)), port_(port) {
  thread_ = std::thread([loop = loop_.get()] { loop->Run(); });
}

void StoreServer::Stop(std::chrono::milliseconds grace) {
  if (!thread_.joinable()) return;
  loop_->RequestStop(grace);
  thread_.join();
}

StoreServer::~StoreServer() { Stop(std::chrono::milliseconds(0)); }

}  // namespace ckpt::coll

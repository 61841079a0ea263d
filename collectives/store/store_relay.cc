#include "collectives/store/store_relay.h"

#include <algorithm>
#include <optional>
#include <thread>
#include <unordered_map>

#include "collectives/store/store_client_socket.h"
#include "collectives/store/store_handshake.h"
#include "collectives/store/store_server_loop.h"
#include "collectives/store/tcp_store_wire.h"
#include "common/bytes.h"

namespace ckpt::coll {
namespace {

using store_server::Clock;
using store_server::Connection;
using store_server::Connections;
using store_server::Frame;
using store_server::FramePtr;
using store_server::Pending;
using store_wire::MessageType;

constexpr std::chrono::milliseconds kFirstRetryDelay{10};
constexpr std::chrono::milliseconds kMaxRetryDelay{500};

// A member's frame, wrapped for rank 0 in one copy.
FramePtr Wrap(uint32_t channel, MessageType type, std::string_view payload) {
  std::string frame = store_server::RelayHeader(channel, store_wire::kHeaderBytes + payload.size());
  frame.append(store_wire::EncodeHeader(type, payload.size()));
  frame.append(payload.data(), payload.size());
  return std::make_shared<const std::string>(std::move(frame));
}

// What the relay's connections mean: its members' frames go up to rank 0 on their channel, rank 0's come back down.
class RelaySession : public store_server::LoopSession {
 public:
  RelaySession(const StoreRelayConfig& config, Connection& upstream, const Connections& conns, StrangerGate& strangers)
      : config_(config), upstream_(&upstream), conns_(conns), strangers_(strangers) {}

  void OnFrame(Connection& c, uint32_t type, std::string_view payload) override {
    if (&c == upstream_) return FromRankZero(type, payload);
    if (c.rank < 0) {
      if (type != static_cast<uint32_t>(MessageType::kHello)) return OnLost(c);
      return OnHello(c, payload);
    }
    if (type == static_cast<uint32_t>(MessageType::kGoodbye)) {
      c.closed = true;
      return Up(Wrap(c.channel, MessageType::kGoodbye, {}));
    }
    if (type == static_cast<uint32_t>(MessageType::kGet) && AnswerDeathCheck(c, payload)) return;
    Up(Wrap(c.channel, static_cast<MessageType>(type), payload));
  }

  void OnLost(Connection& c) override {
    if (c.closed) return;
    c.closed = true;
    if (&c == upstream_) {
      lost_ = PeerFailed("the store relay on rank " + std::to_string(config_.rank) + " lost its connection to rank 0");
      for (auto& [channel, member] : members_) member->closed = true;
      return;
    }
    if (c.rank >= 0) Up(Wrap(c.channel, MessageType::kChannelLost, {}));
  }

  // Strangers that never said hello; members wait for nothing here (rank 0 keeps their deadlines).
  void ExpireDeadlines(Clock::time_point now) override {
    for (const auto& c : conns_) {
      if (!c->closed && c->pending == Pending::kHandshake && c->deadline <= now) c->closed = true;
    }
  }

  void OnRemoved(Connection& c) override {
    if (&c == upstream_) upstream_ = nullptr;
    if (c.rank >= 0 && !c.relay_link) {
      if (const auto it = members_.find(c.channel); it != members_.end() && it->second == &c) members_.erase(it);
    }
  }

  bool Drained(const Connections& conns) const override {
    return std::none_of(conns.begin(), conns.end(),
                        [](const auto& c) { return c->rank >= 0 && !c->relay_link && !c->closed; });
  }

 private:
  void OnHello(Connection& c, std::string_view payload) {
    const std::string relay = "the store relay on rank " + std::to_string(config_.rank);
    Result<store_handshake::Hello> hello =
        store_handshake::DecodeAuthenticHello(payload, config_.secret, c.server_nonce);
    if (!hello.ok()) return Refuse(c, hello.status().WithContext(relay));
    if (hello->relay || hello->world_size != config_.world_size ||
        StoreRelayOf(hello->rank, config_.world_size, config_.columns) != config_.rank) {
      return Refuse(c, InvalidArgument("rank " + std::to_string(hello->rank) + " of " +
                                       std::to_string(hello->world_size) + " is not of the row " + relay + " serves"));
    }
    if (!lost_.ok()) return Refuse(c, lost_);
    c.rank = hello->rank;
    c.auxiliary = hello->auxiliary;
    c.pending = Pending::kNone;
    strangers_.Forget(c.stranger);
    // Sent once rank 0 has admitted the rank: until then nobody waits on it here.
    c.welcome = store_handshake::EncodeWelcome(config_.secret, c.server_nonce, hello->client_nonce);
    c.channel = next_channel_++;
    members_[c.channel] = &c;
    ByteWriter open;
    open.I32(hello->rank);
    open.U8(hello->auxiliary ? 1 : 0);
    open.U64(hello->timeout_ms);
    Up(Wrap(c.channel, MessageType::kChannelOpen, open.data()));
  }

  // A Get of the death-check key is answered here, from the first death rank 0 pushed (or the loss of rank 0).
  bool AnswerDeathCheck(Connection& c, std::string_view payload) {
    ByteReader reader(payload, "store get");
    std::string key;
    if (!reader.Bytes(&key).ok() || !reader.ExpectDone().ok() || key != store_wire::kPeersAliveKey) return false;
    if (!lost_.ok()) {
      store_server::Send(c, store_server::ErrorFrame(lost_));
    } else if (dead_) {
      store_server::Send(c, store_server::ErrorFrame(*dead_));
    } else {
      ByteWriter reply;
      reply.U8(0);
      reply.Bytes({});
      store_server::Send(c, Frame(MessageType::kOk, reply.data()));
    }
    return true;
  }

  void FromRankZero(uint32_t type, std::string_view payload) {
    uint32_t channel = 0;
    if (type != static_cast<uint32_t>(MessageType::kRelayed) ||
        payload.size() < sizeof channel + store_wire::kHeaderBytes) {
      return OnLost(*upstream_);
    }
    std::copy_n(payload.data(), sizeof channel, reinterpret_cast<char*>(&channel));
    const std::string_view frame = payload.substr(sizeof channel);
    const store_wire::FrameHeader header = store_wire::DecodeHeader(frame);
    if (header.length != frame.size() - store_wire::kHeaderBytes) return OnLost(*upstream_);
    const std::string_view inner = frame.substr(store_wire::kHeaderBytes);
    if (channel == store_wire::kEveryChannel) {
      if (header.type != static_cast<uint32_t>(MessageType::kError)) return OnLost(*upstream_);
      if (!dead_) dead_ = store_wire::DecodeError(inner);
      return;
    }
    const auto it = members_.find(channel);
    if (it == members_.end() || it->second->closed) return;  // a member gone while its reply was on the way
    Connection& member = *it->second;
    if (!member.welcome.empty()) {
      // The answer to its opening: admitted (every rank has arrived), or refused.
      if (header.type == static_cast<uint32_t>(MessageType::kOk)) {
        store_server::Send(member, Frame(MessageType::kOk, member.welcome));
        member.welcome.clear();
        return;
      }
      store_server::Send(member, std::make_shared<const std::string>(frame));
      member.closed = true;
      return;
    }
    store_server::Send(member, std::make_shared<const std::string>(frame));
  }

  void Refuse(Connection& c, const Status& status) {
    store_server::Send(c, store_server::ErrorFrame(status));
    c.closed = true;
  }

  void Up(FramePtr frame) {
    if (upstream_ != nullptr) store_server::Send(*upstream_, std::move(frame));
  }

  const StoreRelayConfig config_;
  Connection* upstream_;
  const Connections& conns_;
  StrangerGate& strangers_;
  std::unordered_map<uint32_t, Connection*> members_;  // by channel
  uint32_t next_channel_ = 0;
  std::optional<Status> dead_;  // the first death rank 0 pushed
  Status lost_;                 // the link to rank 0, once lost
};

// The relay's own connection to rank 0, handshake done (a relay's hello is answered at once), and its listener, on
// the interface through which this host reaches rank 0: its row's ranks reach it there.
struct Upstream {
  UniqueFd fd;
  UniqueFd listener;
  std::string host;
  int port = 0;
};

Result<Upstream> ConnectUpstream(const StoreRelayConfig& config, Clock::time_point deadline) {
  const std::string name =
      "the store on rank 0 (" + store_wire::FormatAddress(config.store_host, config.store_port) + ")";
  Upstream up;
  std::chrono::milliseconds delay = kFirstRetryDelay;
  for (;;) {
    ASSIGN_OR_RETURN(UniqueFd fd, store_wire::ConnectOnce(config.store_host, config.store_port, deadline));
    RETURN_IF_ERROR(store_wire::ConfigureSocket(fd.get()));
    if (!up.listener.valid()) {
      ASSIGN_OR_RETURN(up.host, store_wire::LocalHost(fd.get()));
      ASSIGN_OR_RETURN(up.listener, store_wire::Listen(up.host, 0));
      ASSIGN_OR_RETURN(up.port, store_wire::LocalPort(up.listener.get()));
    }
    StoreClientSocket socket(std::move(fd), name, config.timeout);
    store_handshake::Hello hello;
    hello.rank = config.rank;
    hello.world_size = config.world_size;
    hello.timeout_ms = static_cast<uint64_t>(config.timeout.count());
    hello.relay = true;
    hello.relay_host = up.host;
    hello.relay_port = up.port;
    ASSIGN_OR_RETURN(HandshakeReply reply, Handshake(socket, hello, config.secret, deadline));
    if (reply.redirected) {
      return Corrupt(name + " sent its relay on rank " + std::to_string(config.rank) + " elsewhere");
    }
    if (!reply.turned_away) {
      up.fd = socket.Release();
      return up;
    }
    // A store flooded with connections turns some away before reading them: tried again, with backoff.
    if (Clock::now() + delay >= deadline) {
      return Timeout(name + " kept turning the store relay away: " + reply.busy_reason);
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, kMaxRetryDelay);
  }
}

}  // namespace

int StoreRelayColumns(int world_size) {
  int columns = 2;
  while (2 * static_cast<int64_t>(columns) * columns < world_size) ++columns;
  return columns;
}

int StoreRelayOf(int rank, int world_size, int columns) {
  if (columns <= 0 || rank <= 0) return -1;
  const int row = rank / columns;
  return row > 0 ? row * columns : std::min(columns, world_size) - 1;
}

int StoreRelayMembers(int relay, int world_size, int columns) {
  const int row_start = relay / columns * columns;
  return std::min(row_start + columns, world_size) - std::max(row_start, 1);
}

Result<std::unique_ptr<StoreRelay>> StoreRelay::Start(const StoreRelayConfig& config) {
  ASSIGN_OR_RETURN(Upstream up, ConnectUpstream(config, Clock::now() + config.timeout));
  auto upstream = std::make_unique<Connection>();
  upstream->fd = std::move(up.fd);
  upstream->rank = config.rank;
  upstream->relay_link = true;
  Connection& link = *upstream;
  ASSIGN_OR_RETURN(
      std::unique_ptr<store_server::ServerLoop> loop,
      store_server::ServerLoop::Create(std::move(up.listener), "the store relay on rank " + std::to_string(config.rank),
                                       [&](Connections& conns, StrangerGate& strangers) {
                                         return std::make_unique<RelaySession>(config, link, conns, strangers);
                                       }));
  loop->Adopt(std::move(upstream));
  return std::unique_ptr<StoreRelay>(new StoreRelay(std::move(loop), up.host, up.port));
}

StoreRelay::StoreRelay(std::unique_ptr<store_server::ServerLoop> loop, std::string host, int port)
    : loop_(std::move(loop)), host_(std::move(host)), port_(port) {
  thread_ = std::thread([loop = loop_.get()] { loop->Run(); });
}

void StoreRelay::Stop(std::chrono::milliseconds grace) {
  if (!thread_.joinable()) return;
  loop_->RequestStop(grace);
  thread_.join();
}

StoreRelay::~StoreRelay() { Stop(std::chrono::milliseconds(0)); }

}  // namespace ckpt::coll

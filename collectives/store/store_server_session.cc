#include "collectives/store/store_server_session.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "collectives/store/store_relay.h"
#include "common/bytes.h"

namespace ckpt::coll::store_server {
namespace {

bool IsKeyValueRequest(uint32_t type) {
  switch (static_cast<MessageType>(type)) {
    case MessageType::kSet:
    case MessageType::kGet:
    case MessageType::kWait:
    case MessageType::kDelete:
      return true;
    default:
      return false;
  }
}

bool IsCollective(uint32_t type) {
  switch (static_cast<MessageType>(type)) {
    case MessageType::kAllGather:
    case MessageType::kAllToAll:
    case MessageType::kBroadcast:
      return true;
    default:
      return false;
  }
}

}  // namespace

void Session::OnFrame(Connection& c, uint32_t type, std::string_view payload) {
  if (c.relay_link) return OnRelayed(c, type, payload);
  if (type == static_cast<uint32_t>(MessageType::kGoodbye)) return Leave(c);
  if (type == static_cast<uint32_t>(MessageType::kHello)) return OnHello(c, payload);
  // Anything else before the handshake, while a request is outstanding, or that this connection may not send, is a
  // peer we cannot trust.
  const bool collective = IsCollective(type);
  if (c.rank < 0 || c.pending != Pending::kNone || !(collective || IsKeyValueRequest(type)) ||
      (collective && c.auxiliary)) {
    return OnLost(c);
  }
  if (Status status = Serve(c, static_cast<MessageType>(type), payload); !status.ok()) Send(c, ErrorFrame(status));
}

Status Session::Serve(Connection& c, MessageType type, std::string_view payload) {
  switch (type) {
    case MessageType::kSet:
      return requests_.Set(c, payload);
    case MessageType::kGet:
      return requests_.Get(c, payload);
    case MessageType::kWait:
      return requests_.Wait(c, payload);
    case MessageType::kDelete:
      return requests_.Delete(c, payload);
    default:
      return rounds_.Join(c, type, payload);
  }
}

void Session::OnHello(Connection& c, std::string_view payload) {
  if (c.rank >= 0) return OnLost(c);
  Result<store_handshake::Hello> hello = store_handshake::DecodeAuthenticHello(payload, secret_, c.server_nonce);
  if (!hello.ok()) return Refuse(c, hello.status().WithContext("the store on rank 0"));
  c.welcome = store_handshake::EncodeWelcome(secret_, c.server_nonce, hello->client_nonce);
  if (hello->relay) return OnRelayHello(c, *hello);
  if (const int relay = StoreRelayOf(hello->rank, ranks_.world_size(), relay_columns_); relay >= 0) {
    return Redirect(c, *hello, relay);
  }
  if (hello->auxiliary) return OnAuxiliaryHello(c, *hello);
  if (Status admitted = Admit(hello->rank, hello->world_size); !admitted.ok()) return Refuse(c, admitted);
  c.rank = hello->rank;
  strangers_.Forget(c.stranger);
  ranks_.Set(c.rank, RankState::kConnected);
  rounds_.JoinConnect(c, hello->timeout_ms);
}

Status Session::Admit(int rank, int world_size) const {
  if (world_size != ranks_.world_size()) {
    return Mismatch("rank " + std::to_string(rank) + " says the world has " + std::to_string(world_size) +
                    " ranks, but the store on rank 0 serves " + std::to_string(ranks_.world_size()));
  }
  if (rank < 0 || rank >= ranks_.world_size()) {
    return InvalidArgument("rank " + std::to_string(rank) + " is out of range for world size " +
                           std::to_string(ranks_.world_size()));
  }
  if (ranks_.state(rank) == RankState::kConnected) {
    return AlreadyExists("rank " + std::to_string(rank) + " is already connected to the store");
  }
  if (ranks_.state(rank) != RankState::kAbsent) {
    return AlreadyExists("rank " + std::to_string(rank) + " already left the store and cannot rejoin");
  }
  if (rounds_.connect_failure()) return *rounds_.connect_failure();
  return Status::Ok();
}

// A second connection of a rank already connected (for a background thread): answered at once, kept out of the
// connect barrier and of collectives.
void Session::OnAuxiliaryHello(Connection& c, const store_handshake::Hello& hello) {
  if (hello.world_size != ranks_.world_size() || hello.rank < 0 || hello.rank >= ranks_.world_size() ||
      ranks_.state(hello.rank) != RankState::kConnected) {
    return Refuse(c, InvalidArgument("an auxiliary connection for rank " + std::to_string(hello.rank) +
                                     " needs that rank connected to the store first"));
  }
  c.rank = hello.rank;
  strangers_.Forget(c.stranger);
  c.auxiliary = true;
  c.pending = Pending::kNone;
  Send(c, Frame(MessageType::kOk, c.welcome));
}

void Session::Redirect(Connection& c, const store_handshake::Hello& hello, int relay) {
  if (hello.world_size != ranks_.world_size() || hello.rank >= ranks_.world_size()) {
    return Refuse(
        c, Mismatch("rank " + std::to_string(hello.rank) + " says the world has " + std::to_string(hello.world_size) +
                    " ranks, but the store on rank 0 serves " + std::to_string(ranks_.world_size())));
  }
  store_handshake::Redirect redirect;
  redirect.columns = static_cast<uint32_t>(relay_columns_);
  const auto it = relays_.find(relay);
  if (it != relays_.end()) {
    redirect.host = it->second.host;
    redirect.port = it->second.port;
  } else if (hello.rank != relay) {
    // Its relay starts when the relay's own rank first says hello here: the rank tries again meanwhile.
    Send(c, Frame(MessageType::kBusy, "the store relay of rank " + std::to_string(hello.rank) + " (on rank " +
                                          std::to_string(relay) + ") has not connected yet"));
    c.closed = true;
    return;
  }
  Send(c, Frame(MessageType::kRedirect,
                store_handshake::EncodeRedirect(redirect, secret_, c.server_nonce, hello.client_nonce)));
  c.closed = true;
}

// A relay's own connection: answered at once; the ranks of its row are sent to it from now on.
void Session::OnRelayHello(Connection& c, const store_handshake::Hello& hello) {
  if (hello.world_size != ranks_.world_size() || hello.rank >= ranks_.world_size() ||
      StoreRelayOf(hello.rank, ranks_.world_size(), relay_columns_) != hello.rank || relays_.count(hello.rank) != 0) {
    return Refuse(
        c, InvalidArgument("rank " + std::to_string(hello.rank) + " of " + std::to_string(hello.world_size) +
                           " offered a store relay that this store (" + std::to_string(ranks_.world_size()) +
                           " ranks, " + std::to_string(relay_columns_) + " columns) does not expect or already has"));
  }
  c.rank = hello.rank;
  c.relay_link = true;
  c.pending = Pending::kNone;
  strangers_.Forget(c.stranger);
  relays_[hello.rank] = Relay{hello.relay_host, hello.relay_port};
  Send(c, Frame(MessageType::kOk, c.welcome));
}

// A frame on a relay's link: one of a channel's, which the connection of that channel here handles as its own.
void Session::OnRelayed(Connection& link, uint32_t type, std::string_view payload) {
  uint32_t channel = 0;
  if (type != static_cast<uint32_t>(MessageType::kRelayed) ||
      payload.size() < sizeof channel + store_wire::kHeaderBytes) {
    return OnLost(link);
  }
  std::copy_n(payload.data(), sizeof channel, reinterpret_cast<char*>(&channel));
  const std::string_view frame = payload.substr(sizeof channel);
  const store_wire::FrameHeader header = store_wire::DecodeHeader(frame);
  if (header.length != frame.size() - store_wire::kHeaderBytes || channel == store_wire::kEveryChannel) {
    return OnLost(link);
  }
  const std::string_view inner = frame.substr(store_wire::kHeaderBytes);
  if (header.type == static_cast<uint32_t>(MessageType::kChannelOpen)) return OpenChannel(link, channel, inner);
  const auto it = link.channels.find(channel);
  // A channel this store closed (a refused rank) may still send what was in flight.
  if (it == link.channels.end() || it->second->closed) return;
  Connection& c = *it->second;
  if (header.type == static_cast<uint32_t>(MessageType::kChannelLost)) return OnLost(c);
  OnFrame(c, header.type, inner);
}

void Session::OpenChannel(Connection& link, uint32_t channel, std::string_view payload) {
  ByteReader reader(payload, "a channel opened by the store relay on rank " + std::to_string(link.rank));
  int32_t rank = 0;
  uint8_t auxiliary = 0;
  uint64_t timeout_ms = 0;
  const bool well_formed =
      reader.I32(&rank).ok() && reader.U8(&auxiliary).ok() && reader.U64(&timeout_ms).ok() && reader.ExpectDone().ok();
  // The relay authenticated the rank; one that opens a channel twice or for another row's rank is not a ckpt relay.
  if (!well_formed || link.channels.count(channel) != 0 ||
      StoreRelayOf(rank, ranks_.world_size(), relay_columns_) != link.rank) {
    return OnLost(link);
  }
  auto carried = std::make_unique<Connection>();
  Connection& c = *carried;
  c.via = &link;
  c.channel = channel;
  link.channels[channel] = &c;
  conns_.push_back(std::move(carried));
  store_handshake::Hello hello;
  hello.rank = rank;
  hello.world_size = ranks_.world_size();
  hello.timeout_ms = timeout_ms;
  hello.auxiliary = auxiliary != 0;
  // The relay makes the rank's welcome itself, answering its own challenge: this one only says that all arrived.
  if (hello.auxiliary) return OnAuxiliaryHello(c, hello);
  if (Status admitted = Admit(rank, hello.world_size); !admitted.ok()) return Refuse(c, admitted);
  c.rank = rank;
  ranks_.Set(rank, RankState::kConnected);
  rounds_.JoinConnect(c, timeout_ms);
}

// Answers a stranger's hello with an error and hangs up; it never became a rank, so nobody else is affected.
void Session::Refuse(Connection& c, const Status& status) {
  Send(c, ErrorFrame(status));
  c.closed = true;
}

void Session::OnLost(Connection& c) {
  if (c.relay_link) return LoseRelay(c);
  LoseRank(c, "disconnected");
}

void Session::LoseRank(Connection& c, const std::string& why) {
  if (c.closed) return;
  c.closed = true;
  if (c.auxiliary || c.rank < 0 || ranks_.state(c.rank) != RankState::kConnected) return;
  const Status dead = PeerFailed("rank " + std::to_string(c.rank) + " " + why);
  ranks_.MarkDead(c.rank, dead);
  // The relays answer their members' death checks from this, so that the checks never reach rank 0. Sent ahead of
  // the failures below on each link, so that a rank told of a failure finds the death when it checks next.
  if (!death_pushed_) {
    death_pushed_ = true;
    const std::string death = store_wire::EncodeFrame(MessageType::kError, store_wire::EncodeError(dead));
    for (const auto& link : conns_) {
      if (link->relay_link && !link->closed) Send(*link, RelayedFrame(store_wire::kEveryChannel, death));
    }
  }
  rounds_.FailAll(dead);
  ReplyToPending(conns_, Pending::kWait, 0, ErrorFrame(dead));
}

// A relay lost: the ranks it carried can no longer reach the store. Its own rank goes first, as the likely cause.
void Session::LoseRelay(Connection& link) {
  if (link.closed) return;
  link.closed = true;
  relays_.erase(link.rank);
  std::vector<Connection*> carried;
  for (const auto& [channel, c] : link.channels) carried.push_back(c);
  std::stable_partition(carried.begin(), carried.end(), [&](const Connection* c) { return c->rank == link.rank; });
  for (Connection* c : carried) {
    LoseRank(*c, c->rank == link.rank ? "disconnected" : "lost its store relay on rank " + std::to_string(link.rank));
  }
}

void Session::OnRemoved(Connection& c) {
  if (c.via != nullptr) c.via->channels.erase(c.channel);
}

bool Session::Drained(const Connections& conns) const {
  return std::none_of(conns.begin(), conns.end(), [](const auto& c) { return c->rank >= 0 && !c->closed; });
}

void Session::Leave(Connection& c) {
  c.closed = true;
  if (c.auxiliary || c.rank < 0 || ranks_.state(c.rank) != RankState::kConnected) return;
  ranks_.Set(c.rank, RankState::kLeft);
  rounds_.FailAbandoned();
}

void Session::ExpireDeadlines(Clock::time_point now) {
  for (const auto& c : conns_) {
    if (c->closed || c->pending == Pending::kNone || c->deadline > now) continue;
    const std::string waited = std::to_string(c->timeout.count()) + " ms";
    switch (c->pending) {
      case Pending::kHandshake:
        c->closed = true;
        break;
      case Pending::kWait:
        KeyValueRequests::ExpireWait(*c, waited);
        break;
      case Pending::kHello:
      case Pending::kAllGather:
        rounds_.Expire(*c, waited);
        break;
      case Pending::kNone:
        break;
    }
  }
}

}  // namespace ckpt::coll::store_server

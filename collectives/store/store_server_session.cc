#include "collectives/store/store_server_session.h"

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

// Answers a stranger's hello with an error and hangs up; it never became a rank, so nobody else is affected.
void Session::Refuse(Connection& c, const Status& status) {
  Send(c, ErrorFrame(status));
  c.closed = true;
}

void Session::OnLost(Connection& c) {
  if (c.closed) return;
  c.closed = true;
  if (c.auxiliary || c.rank < 0 || ranks_.state(c.rank) != RankState::kConnected) return;
  ranks_.Set(c.rank, RankState::kDead);
  const Status dead = PeerFailed("rank " + std::to_string(c.rank) + " disconnected");
  rounds_.FailAll(dead);
  ReplyToPending(conns_, Pending::kWait, 0, ErrorFrame(dead));
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

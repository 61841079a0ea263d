#include "collectives/store/tcp_store.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <mutex>
#include <thread>

#include "collectives/store/job_secret.h"
#include "collectives/store/store_auth.h"
#include "collectives/store/store_client_socket.h"
#include "collectives/store/store_handshake.h"
#include "collectives/store/store_relay.h"
#include "collectives/store/tcp_store_server.h"
#include "collectives/store/tcp_store_wire.h"
#include "common/bytes.h"
#include "common/os_error.h"

namespace ckpt::coll {
namespace {

using Clock = std::chrono::steady_clock;
using ckpt::UniqueFd;
using store_wire::MessageType;

// Rank 0 keeps serving this long (at most) after its own goodbye, so that ranks still finishing can say theirs.
constexpr std::chrono::milliseconds kServerDrainGrace{5000};
// Non-zero ranks retry connecting while rank 0 starts, backing off between these bounds.
constexpr std::chrono::milliseconds kFirstRetryDelay{10};
constexpr std::chrono::milliseconds kMaxRetryDelay{500};
constexpr std::chrono::milliseconds kGoodbyeTimeout{1000};

uint64_t RemainingMs(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<uint64_t>(left) : 0;
}

Status ValidateConfig(const TcpStoreConfig& config) {
  if (config.world_size < 1) return InvalidArgument("store world size " + std::to_string(config.world_size) + " < 1");
  if (config.rank < 0 || config.rank >= config.world_size) {
    return InvalidArgument("store rank " + std::to_string(config.rank) + " is out of range for world size " +
                           std::to_string(config.world_size));
  }
  const int lowest_port = config.rendezvous ? 0 : 1;  // a rendezvous spreads the port rank 0 picks
  if (config.port < lowest_port || config.port > 65535) {
    return InvalidArgument("store port " + std::to_string(config.port) + " is outside 1..65535");
  }
  if (config.host.empty()) return InvalidArgument("store host is empty");
  if (!config.secret.empty()) RETURN_IF_ERROR(store_auth::ValidateSecret(config.secret, "the job secret"));
  if (config.timeout.count() <= 0) {
    return InvalidArgument("store timeout " + std::to_string(config.timeout.count()) + " ms is not positive");
  }
  if (config.relay_columns < 0 || config.relay_columns == 1) {
    return InvalidArgument("store relay columns " + std::to_string(config.relay_columns) + ": 0 (none) or at least 2");
  }
  return Status::Ok();
}

}  // namespace

class TcpStore::Impl {
 public:
  explicit Impl(const TcpStoreConfig& config) : config_(config) {}

  ~Impl() {
    std::lock_guard<std::mutex> lock(mu_);
    if (socket_.valid()) {
      // Best effort: without a goodbye the server takes this rank for dead, which is still safe.
      (void)socket_.SendAll(store_wire::EncodeFrame(MessageType::kGoodbye, {}), Clock::now() + kGoodbyeTimeout);
      socket_.Reset();
    }
    // The relay first: rank 0 keeps serving until the relays' links close.
    if (relay_) relay_->Stop(std::min(config_.timeout, kServerDrainGrace));
    if (server_) server_->Stop(std::min(config_.timeout, kServerDrainGrace));
  }

  Status Open() {
    RETURN_IF_ERROR(ValidateConfig(config_));
    const Clock::time_point deadline = Clock::now() + config_.timeout;
    if (config_.rank == 0 && !config_.auxiliary) {
      ASSIGN_OR_RETURN(server_,
                       StoreServer::Start(config_.host, config_.port, config_.world_size, config_.relay_columns,
                                          [this](int bound_port) { return ServerSecret(bound_port); }));
      relay_columns_ = config_.relay_columns;
    }
    if (config_.rendezvous) {
      ASSIGN_OR_RETURN(StoreAddress address, config_.rendezvous(server_ ? server_->port() : 0, config_.secret));
      config_.host = address.host;
      config_.port = address.port;
      config_.secret = address.secret;
      config_.rendezvous = nullptr;
    }
    std::lock_guard<std::mutex> lock(mu_);
    // A store flooded with strangers turns connections away before reading their hello (kBusy), and rank 0 turns a
    // rank away until its row's relay has connected: tried again, with backoff, until the deadline. A redirect is
    // followed at once.
    std::chrono::milliseconds delay = kFirstRetryDelay;
    target_host_ = config_.host;
    target_port_ = config_.port;
    for (;;) {
      bool turned_away = false;
      std::optional<store_handshake::Redirect> redirect;
      Status joined = Join(deadline, &turned_away, &redirect);
      if (joined.ok() && redirect) {
        socket_.Reset();
        joined = FollowRedirect(*redirect);
        if (joined.ok()) continue;
      }
      if (!turned_away) return broken_ = joined;
      socket_.Reset();
      if (Clock::now() + delay >= deadline) {
        return broken_ = Timeout(ServerName() + " kept turning this rank away for " +
                                 std::to_string(config_.timeout.count()) + " ms: " + joined.message());
      }
      std::this_thread::sleep_for(delay);
      delay = std::min(delay * 2, kMaxRetryDelay);
    }
  }

  int relay_columns() const { return relay_columns_; }

  const TcpStoreConfig& config() const { return config_; }

  Result<std::string> LocalHost() {
    std::lock_guard<std::mutex> lock(mu_);
    return store_wire::LocalHost(socket_.fd());
  }

  Status Set(std::string_view key, std::string_view value) {
    ByteWriter request;
    request.Bytes(key);
    request.Bytes(value);
    std::lock_guard<std::mutex> lock(mu_);
    return Call(MessageType::kSet, request.data(), Clock::now() + config_.timeout).status();
  }

  Result<std::optional<std::string>> Get(std::string_view key) {
    ByteWriter request;
    request.Bytes(key);
    std::unique_lock<std::mutex> lock(mu_);
    ASSIGN_OR_RETURN(std::string reply, Call(MessageType::kGet, request.data(), Clock::now() + config_.timeout));
    lock.unlock();
    ByteReader reader(reply, "store reply to get '" + std::string(key) + "'");
    uint8_t found = 0;
    std::string value;
    RETURN_IF_ERROR(reader.U8(&found));
    RETURN_IF_ERROR(reader.Bytes(&value));
    RETURN_IF_ERROR(reader.ExpectDone());
    if (found == 0) return std::optional<std::string>();
    return std::optional<std::string>(std::move(value));
  }

  Result<std::string> Wait(std::string_view key, std::chrono::milliseconds timeout) {
    ByteWriter request;
    request.Bytes(key);
    request.U64(static_cast<uint64_t>(timeout.count()));
    std::unique_lock<std::mutex> lock(mu_);
    Result<std::string> reply = Call(MessageType::kWait, request.data(), Clock::now() + timeout + kStoreReplyGrace);
    lock.unlock();
    const std::string what = "waiting for key '" + std::string(key) + "'";
    if (!reply.ok()) return reply.status().WithContext(what);
    ByteReader reader(reply.value(), "store reply to " + what);
    std::string value;
    RETURN_IF_ERROR(reader.Bytes(&value));
    RETURN_IF_ERROR(reader.ExpectDone());
    return value;
  }

  Status Delete(std::string_view key) {
    ByteWriter request;
    request.Bytes(key);
    std::lock_guard<std::mutex> lock(mu_);
    return Call(MessageType::kDelete, request.data(), Clock::now() + config_.timeout).status();
  }

  // One collective of `kind`: this rank's contribution, the server's reply to it.
  Result<std::string> Collective(MessageType kind, std::string_view contribution, std::chrono::milliseconds timeout,
                                 std::string* what) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t sequence = next_sequence_++;
    ByteWriter request;
    request.U64(sequence);
    request.U64(static_cast<uint64_t>(timeout.count()));
    request.Bytes(contribution);
    sent_bytes_ += request.data().size();
    ++collectives_;
    Result<std::string> reply = Call(kind, request.data(), Clock::now() + timeout + kStoreReplyGrace);
    lock.unlock();
    *what = std::string("store ") + store_wire::CollectiveName(kind) + " " + std::to_string(sequence);
    if (!reply.ok()) return reply.status().WithContext(*what);
    received_bytes_ += reply->size();
    return reply;
  }

  Result<std::vector<std::string>> AllGather(std::string_view mine, std::chrono::milliseconds timeout) {
    std::string what;
    ASSIGN_OR_RETURN(std::string reply, Collective(MessageType::kAllGather, mine, timeout, &what));
    return DecodePerRank(reply, what);
  }

  Result<std::vector<std::string>> AllToAll(const std::vector<std::string>& outgoing,
                                            std::chrono::milliseconds timeout) {
    if (outgoing.size() != static_cast<size_t>(config_.world_size)) {
      return InvalidArgument("alltoall given " + std::to_string(outgoing.size()) + " messages for " +
                             std::to_string(config_.world_size) + " ranks");
    }
    // Only messages that are not empty travel, each with its rank: most pairs of a large job have nothing to say.
    ByteWriter contribution;
    const auto count = std::count_if(outgoing.begin(), outgoing.end(), [](const auto& m) { return !m.empty(); });
    contribution.U32(static_cast<uint32_t>(count));
    for (size_t to = 0; to < outgoing.size(); ++to) {
      if (outgoing[to].empty()) continue;
      contribution.I32(static_cast<int32_t>(to));
      contribution.Bytes(outgoing[to]);
    }
    std::string what;
    ASSIGN_OR_RETURN(std::string reply, Collective(MessageType::kAllToAll, contribution.data(), timeout, &what));
    ByteReader reader(reply, "reply to " + what);
    uint32_t received = 0;
    RETURN_IF_ERROR(
        reader.Count(&received, static_cast<uint32_t>(config_.world_size), sizeof(int32_t) + sizeof(uint64_t)));
    std::vector<std::string> incoming(config_.world_size);
    int previous = -1;
    for (uint32_t i = 0; i < received; ++i) {
      int32_t from = 0;
      RETURN_IF_ERROR(reader.I32(&from));
      if (from <= previous || from >= config_.world_size) {
        return Corrupt(what + ": the store returned a message from rank " + std::to_string(from) +
                       " out of order or outside the world");
      }
      previous = from;
      RETURN_IF_ERROR(reader.Bytes(&incoming[from]));
    }
    RETURN_IF_ERROR(reader.ExpectDone());
    return incoming;
  }

  Result<std::string> Broadcast(std::string_view from_root, std::chrono::milliseconds timeout) {
    std::string what;
    ASSIGN_OR_RETURN(std::string reply,
                     Collective(MessageType::kBroadcast, config_.rank == 0 ? from_root : "", timeout, &what));
    ByteReader reader(reply, "reply to " + what);
    std::string message;
    RETURN_IF_ERROR(reader.Bytes(&message));
    RETURN_IF_ERROR(reader.ExpectDone());
    return message;
  }

  ControlPlaneCounters counters() const { return {sent_bytes_.load(), received_bytes_.load(), collectives_.load()}; }

 private:
  // Rank 0's server: the configured secret, or a new one published for the ranks on this node.
  Result<std::string> ServerSecret(int bound_port) {
    if (config_.secret.empty()) {
      ASSIGN_OR_RETURN(PublishedSecret published, PublishedSecret::Publish(bound_port));
      config_.secret = published.secret();
      published_ = std::move(published);
    }
    return config_.secret;
  }

  // One attempt at the handshake on a new connection to the current target (rank 0's store, or this rank's relay):
  // the challenge, the hello, the welcome or a redirect. Sets *turned_away when the server refused the connection
  // for now: then trying again is safe.
  Status Join(Clock::time_point deadline, bool* turned_away, std::optional<store_handshake::Redirect>* redirect) {
    RETURN_IF_ERROR(ConnectSocket(deadline));
    Result<std::string> server_nonce = ReadChallenge(socket_, deadline, turned_away);
    if (*turned_away) return server_nonce.status();
    RETURN_IF_ERROR(server_nonce.status());
    // Read only now: rank 0 publishes its secret before its server answers anyone, so a secret read before the
    // challenge could be a previous job's.
    if (config_.secret.empty()) {
      ASSIGN_OR_RETURN(config_.secret, ReadPublishedSecret(config_.port));
    }
    store_handshake::Hello hello;
    hello.rank = config_.rank;
    hello.world_size = config_.world_size;
    hello.timeout_ms = RemainingMs(deadline);
    hello.auxiliary = config_.auxiliary;
    ASSIGN_OR_RETURN(HandshakeReply reply, AnswerChallenge(socket_, hello, config_.secret, *server_nonce, deadline));
    if (reply.turned_away) {
      *turned_away = true;
      return PeerFailed(reply.busy_reason);
    }
    if (reply.redirected) *redirect = reply.redirect;
    return Status::Ok();
  }

  // Rank 0 sent this rank to its row's relay; an empty host means that this rank is the relay, and starts it.
  Status FollowRedirect(const store_handshake::Redirect& redirect) {
    if (target_host_ != config_.host || target_port_ != config_.port) {
      return Corrupt(ServerName() + " sent this rank elsewhere again: only rank 0's store redirects");
    }
    relay_columns_ = static_cast<int>(redirect.columns);
    relay_rank_ = StoreRelayOf(config_.rank, config_.world_size, relay_columns_);
    if (!redirect.host.empty()) {
      target_host_ = redirect.host;
      target_port_ = redirect.port;
      return Status::Ok();
    }
    if (relay_ == nullptr) {
      if (relay_rank_ != config_.rank) {
        return Corrupt(ServerName() + " asked rank " + std::to_string(config_.rank) +
                       " to relay a row it does not relay");
      }
      StoreRelayConfig relay;
      relay.rank = config_.rank;
      relay.world_size = config_.world_size;
      relay.columns = relay_columns_;
      relay.store_host = config_.host;
      relay.store_port = config_.port;
      relay.secret = config_.secret;
      relay.timeout = config_.timeout;
      ASSIGN_OR_RETURN(relay_, StoreRelay::Start(relay));
    }
    target_host_ = relay_->host();
    target_port_ = relay_->port();
    return Status::Ok();
  }

  // Whom this rank's connection reaches, for its errors.
  std::string ServerName() const {
    const std::string address = store_wire::FormatAddress(target_host_, target_port_);
    if (relay_rank_ < 0 || (target_host_ == config_.host && target_port_ == config_.port)) {
      return "the store on rank 0 (" + address + ")";
    }
    return "the store relay on rank " + std::to_string(relay_rank_) + " (" + address + ")";
  }

  Result<std::vector<std::string>> DecodePerRank(std::string_view reply, const std::string& what) const {
    ByteReader reader(reply, "reply to " + what);
    uint32_t count = 0;
    RETURN_IF_ERROR(reader.Count(&count, static_cast<uint32_t>(config_.world_size), sizeof(uint64_t)));
    if (count != static_cast<uint32_t>(config_.world_size)) {
      return Corrupt(what + ": the store returned " + std::to_string(count) + " contributions for world size " +
                     std::to_string(config_.world_size));
    }
    std::vector<std::string> gathered(count);
    for (std::string& contribution : gathered) RETURN_IF_ERROR(reader.Bytes(&contribution));
    RETURN_IF_ERROR(reader.ExpectDone());
    return gathered;
  }

  // Rank 0's server may not be listening yet: refused connections are retried with backoff until the deadline.
  Status ConnectSocket(Clock::time_point deadline) {
    std::chrono::milliseconds delay = kFirstRetryDelay;
    for (;;) {
      Result<UniqueFd> fd = store_wire::ConnectOnce(target_host_, target_port_, deadline);
      if (fd.ok()) {
        RETURN_IF_ERROR(store_wire::ConfigureSocket(fd->get()));
        socket_ = StoreClientSocket(std::move(fd.value()), ServerName(), config_.timeout);
        return Status::Ok();
      }
      if (Clock::now() + delay >= deadline) {
        return Timeout("could not reach " + ServerName() + " within " + std::to_string(config_.timeout.count()) +
                       " ms: " + fd.status().message());
      }
      std::this_thread::sleep_for(delay);
      delay = std::min(delay * 2, kMaxRetryDelay);
    }
  }

  // Sends one request and reads its reply: the reply's payload, or the error the server answered with. A failure
  // of the stream itself (lost, stuck, garbled) leaves the connection unusable, and every later call says why.
  Result<std::string> Call(MessageType type, std::string_view payload, Clock::time_point deadline) {
    if (!broken_.ok()) return broken_;
    uint32_t reply_type = 0;
    std::string reply;
    Status transport = socket_.SendAll(store_wire::EncodeFrame(type, payload), deadline);
    if (transport.ok()) transport = socket_.ReadFrame(deadline, store_wire::kMaxMessageBytes, &reply_type, &reply);
    if (transport.ok() && reply_type != static_cast<uint32_t>(MessageType::kOk) &&
        reply_type != static_cast<uint32_t>(MessageType::kError)) {
      transport = socket_.InvalidReply(reply_type, reply.size());
    }
    if (!transport.ok()) return broken_ = transport;
    if (reply_type == static_cast<uint32_t>(MessageType::kError)) return store_wire::DecodeError(reply);
    return reply;
  }

  TcpStoreConfig config_;
  std::unique_ptr<StoreServer> server_;
  // This row's relay, when rank 0 made this rank its relay.
  std::unique_ptr<StoreRelay> relay_;
  int relay_columns_ = 0;  // rank 0's choice (its redirect says it): 0, no relays
  int relay_rank_ = -1;    // the rank whose relay this rank reaches rank 0 through; -1: directly
  // Where this rank's connection goes: rank 0's store, or its relay.
  std::string target_host_;
  int target_port_ = 0;
  // Rank 0 without a configured secret: the file it published, removed once the server has stopped.
  std::optional<PublishedSecret> published_;
  std::mutex mu_;  // one request on the connection at a time
  StoreClientSocket socket_;
  uint64_t next_sequence_ = 0;
  Status broken_;
  // Bytes of this rank's collectives on the wire, both ways (control_plane.h).
  std::atomic<uint64_t> sent_bytes_{0};
  std::atomic<uint64_t> received_bytes_{0};
  std::atomic<uint64_t> collectives_{0};
};

Result<std::unique_ptr<TcpStore>> TcpStore::Connect(const TcpStoreConfig& config) {
  auto impl = std::make_unique<Impl>(config);
  const Status opened = impl->Open();
  if (!opened.ok()) {
    return opened.WithContext("connecting rank " + std::to_string(config.rank) + " of " +
                              std::to_string(config.world_size) + " to the store at " +
                              store_wire::FormatAddress(config.host, config.port));
  }
  return std::unique_ptr<TcpStore>(new TcpStore(std::move(impl)));
}

TcpStore::TcpStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpStore::~TcpStore() = default;

int TcpStore::rank() const { return impl_->config().rank; }
int TcpStore::world_size() const { return impl_->config().world_size; }
int TcpStore::relay_columns() const { return impl_->relay_columns(); }
TcpStoreConfig TcpStore::AuxiliaryConfig() const {
  TcpStoreConfig config = impl_->config();
  config.auxiliary = true;
  return config;
}

Result<std::string> TcpStore::LocalHost() { return impl_->LocalHost(); }

Result<std::vector<std::string>> TcpStore::AllGather(std::string_view mine) {
  return impl_->AllGather(mine, impl_->config().timeout);
}
std::chrono::milliseconds TcpStore::timeout() const { return impl_->config().timeout; }
Result<std::vector<std::string>> TcpStore::AllGatherWithin(std::string_view mine, std::chrono::milliseconds timeout) {
  return impl_->AllGather(mine, std::min(timeout, impl_->config().timeout));
}
Result<std::vector<std::string>> TcpStore::AllToAllV(std::vector<std::string> outgoing,
                                                     std::chrono::milliseconds within) {
  return impl_->AllToAll(outgoing, std::min(within, impl_->config().timeout));
}
Result<std::string> TcpStore::Broadcast(std::string_view from_root, std::chrono::milliseconds within) {
  return impl_->Broadcast(from_root, std::min(within, impl_->config().timeout));
}
Status TcpStore::Barrier() {
  return impl_->AllToAll(std::vector<std::string>(impl_->config().world_size), impl_->config().timeout).status();
}
ControlPlaneCounters TcpStore::counters() const { return impl_->counters(); }
Status TcpStore::Set(std::string_view key, std::string_view value) { return impl_->Set(key, value); }
Status TcpStore::Delete(std::string_view key) { return impl_->Delete(key); }
std::chrono::milliseconds PeerCheckInterval(int askers, std::chrono::milliseconds timeout) {
  constexpr std::chrono::milliseconds kSmallJobInterval{250};
  constexpr int64_t kServerChecksPerSecond = 4000;
  const std::chrono::milliseconds spread{static_cast<int64_t>(askers) * 1000 / kServerChecksPerSecond};
  return std::max(kSmallJobInterval, std::min(spread, timeout / 4));
}

// The server answers any Get with the dead ranks' error once one has died.
Status TcpStore::CheckPeers() {
  std::lock_guard<std::mutex> lock(peer_check_mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (!last_peer_check_.ok() || now < next_peer_check_) return last_peer_check_;
  last_peer_check_ = impl_->Get(store_wire::kPeersAliveKey).status();
  // A relay answers its row's checks itself: a row's ranks ask it, not the world.
  const int askers = impl_->relay_columns() > 0 ? impl_->relay_columns() : impl_->config().world_size;
  next_peer_check_ = now + PeerCheckInterval(askers, impl_->config().timeout);
  return last_peer_check_;
}
Result<std::optional<std::string>> TcpStore::Get(std::string_view key) { return impl_->Get(key); }
Result<std::string> TcpStore::Wait(std::string_view key) { return impl_->Wait(key, impl_->config().timeout); }
Result<std::string> TcpStore::Wait(std::string_view key, std::chrono::milliseconds timeout) {
  return impl_->Wait(key, timeout);
}

}  // namespace ckpt::coll

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
#include "collectives/store/store_handshake.h"
#include "collectives/store/tcp_store_server.h"
#include "collectives/store/tcp_store_wire.h"
#include "common/bytes.h"
#include "common/os_error.h"

namespace ckpt::coll {
namespace {

using Clock = std::chrono::steady_clock;
using ckpt::UniqueFd;
using store_wire::MessageType;

// The server answers a timed-out WAIT or ALLGATHER itself, naming who is missing; the client gives it this much
// longer before concluding that the server itself is stuck.
constexpr std::chrono::milliseconds kReplyGrace{1000};
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
  return Status::Ok();
}

}  // namespace

class TcpStore::Impl {
 public:
  explicit Impl(const TcpStoreConfig& config)
      : config_(config), address_(store_wire::FormatAddress(config.host, config.port)) {}

  ~Impl() {
    std::lock_guard<std::mutex> lock(mu_);
    if (fd_.valid()) {
      // Best effort: without a goodbye the server takes this rank for dead, which is still safe.
      (void)SendAll(store_wire::EncodeFrame(MessageType::kGoodbye, {}), Clock::now() + kGoodbyeTimeout);
      fd_.Reset();
    }
    if (server_) server_->Stop(std::min(config_.timeout, kServerDrainGrace));
  }

  Status Open() {
    RETURN_IF_ERROR(ValidateConfig(config_));
    const Clock::time_point deadline = Clock::now() + config_.timeout;
    if (config_.rank == 0 && !config_.auxiliary) {
      ASSIGN_OR_RETURN(server_, StoreServer::Start(config_.host, config_.port, config_.world_size,
                                                   [this](int bound_port) { return ServerSecret(bound_port); }));
    }
    if (config_.rendezvous) {
      ASSIGN_OR_RETURN(StoreAddress address, config_.rendezvous(server_ ? server_->port() : 0, config_.secret));
      config_.host = address.host;
      config_.port = address.port;
      config_.secret = address.secret;
      config_.rendezvous = nullptr;
      address_ = store_wire::FormatAddress(config_.host, config_.port);
    }
    std::lock_guard<std::mutex> lock(mu_);
    // A store flooded with strangers turns connections away before reading their hello (kBusy): tried again, with
    // backoff, until the deadline.
    std::chrono::milliseconds delay = kFirstRetryDelay;
    for (;;) {
      bool turned_away = false;
      Status joined = Join(deadline, &turned_away);
      if (!turned_away) return broken_ = joined;
      fd_.Reset();
      if (Clock::now() + delay >= deadline) {
        return broken_ = Timeout("the store on rank 0 (" + address_ + ") kept turning this rank away for " +
                                 std::to_string(config_.timeout.count()) + " ms: " + joined.message());
      }
      std::this_thread::sleep_for(delay);
      delay = std::min(delay * 2, kMaxRetryDelay);
    }
  }

  const TcpStoreConfig& config() const { return config_; }

  Result<std::string> LocalHost() {
    std::lock_guard<std::mutex> lock(mu_);
    return store_wire::LocalHost(fd_.get());
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
    Result<std::string> reply = Call(MessageType::kWait, request.data(), Clock::now() + timeout + kReplyGrace);
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
    Result<std::string> reply = Call(kind, request.data(), Clock::now() + timeout + kReplyGrace);
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

  // One attempt at the handshake on a new connection: the challenge, the hello, the welcome. Sets *turned_away
  // when the store refused the connection for pressure before reading a hello from it: then trying again is safe.
  Status Join(Clock::time_point deadline, bool* turned_away) {
    RETURN_IF_ERROR(ConnectSocket(deadline));
    ASSIGN_OR_RETURN(std::string server_nonce, ReadChallenge(deadline, turned_away));
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
    ASSIGN_OR_RETURN(hello.client_nonce, store_auth::RandomBytes(store_auth::kNonceBytes));
    const std::string request = store_handshake::EncodeHello(hello, config_.secret, server_nonce);
    RETURN_IF_ERROR(SendAll(store_wire::EncodeFrame(MessageType::kHello, request), deadline));
    uint32_t type = 0;
    std::string reply;
    RETURN_IF_ERROR(ReadFrame(deadline + kReplyGrace, store_wire::kMaxMessageBytes, &type, &reply));
    if (type == static_cast<uint32_t>(MessageType::kBusy)) return TurnedAway(reply, turned_away);
    if (type == static_cast<uint32_t>(MessageType::kError)) return store_wire::DecodeError(reply);
    if (type != static_cast<uint32_t>(MessageType::kOk)) return InvalidReply(type, reply.size());
    return store_handshake::CheckWelcome(reply, config_.secret, server_nonce, hello.client_nonce, address_);
  }

  // The server's opening frame: its nonce. Anything else is not a ckpt store of this version.
  Result<std::string> ReadChallenge(Clock::time_point deadline, bool* turned_away) {
    ASSIGN_OR_RETURN(const store_wire::FrameHeader header, ReadHeader(deadline));
    const bool busy = header.type == static_cast<uint32_t>(MessageType::kBusy);
    if ((!busy && header.type != static_cast<uint32_t>(MessageType::kChallenge)) ||
        header.length > store_wire::kMaxHandshakeBytes) {
      return InvalidArgument("the server at " + address_ + " is not a ckpt store (it opened with type " +
                             std::to_string(header.type) + ", " + std::to_string(header.length) + " bytes)");
    }
    std::string payload(header.length, '\0');
    RETURN_IF_ERROR(RecvAll(payload.data(), payload.size(), deadline));
    if (busy) return TurnedAway(payload, turned_away);
    return store_handshake::DecodeChallenge(payload, address_);
  }

  Status TurnedAway(std::string_view reason, bool* turned_away) const {
    *turned_away = true;
    return PeerFailed(std::string(reason));
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
      Result<UniqueFd> fd = store_wire::ConnectOnce(config_.host, config_.port, deadline);
      if (fd.ok()) {
        fd_ = std::move(fd.value());
        return store_wire::ConfigureSocket(fd_.get());
      }
      if (Clock::now() + delay >= deadline) {
        return Timeout("could not reach the store on rank 0 within " + std::to_string(config_.timeout.count()) +
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
    bool is_error = false;
    std::string reply;
    Status transport = SendAll(store_wire::EncodeFrame(type, payload), deadline);
    if (transport.ok()) transport = ReadReply(deadline, &is_error, &reply);
    if (!transport.ok()) return broken_ = transport;
    if (is_error) return store_wire::DecodeError(reply);
    return reply;
  }

  Status ReadReply(Clock::time_point deadline, bool* is_error, std::string* payload) {
    uint32_t type = 0;
    RETURN_IF_ERROR(ReadFrame(deadline, store_wire::kMaxMessageBytes, &type, payload));
    *is_error = type == static_cast<uint32_t>(MessageType::kError);
    if (!*is_error && type != static_cast<uint32_t>(MessageType::kOk)) return InvalidReply(type, payload->size());
    return Status::Ok();
  }

  // One frame from the server, its length checked against `limit` before anything is read for it.
  Status ReadFrame(Clock::time_point deadline, uint64_t limit, uint32_t* type, std::string* payload) {
    ASSIGN_OR_RETURN(const store_wire::FrameHeader header, ReadHeader(deadline));
    if (header.length > limit) return InvalidReply(header.type, header.length);
    *type = header.type;
    payload->assign(header.length, '\0');
    return RecvAll(payload->data(), payload->size(), deadline);
  }

  Result<store_wire::FrameHeader> ReadHeader(Clock::time_point deadline) {
    char header_bytes[store_wire::kHeaderBytes];
    RETURN_IF_ERROR(RecvAll(header_bytes, sizeof header_bytes, deadline));
    return store_wire::DecodeHeader(std::string_view(header_bytes, sizeof header_bytes));
  }

  Status InvalidReply(uint32_t type, uint64_t length) const {
    return Corrupt("the store at " + address_ + " sent an invalid reply (type " + std::to_string(type) + ", " +
                   std::to_string(length) + " bytes)");
  }

  Status SendAll(std::string_view data, Clock::time_point deadline) {
    while (!data.empty()) {
      const ssize_t n = send(fd_.get(), data.data(), data.size(), MSG_NOSIGNAL);
      if (n >= 0) {
        data.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return LostConnection(OsErrorText(errno));
      const int ready = store_wire::WaitFor(fd_.get(), POLLOUT, deadline);
      if (ready < 0) return LostConnection(OsErrorText(errno));
      if (ready == 0) return NoReply();
    }
    return Status::Ok();
  }

  Status RecvAll(char* out, size_t size, Clock::time_point deadline) {
    while (size > 0) {
      const ssize_t n = recv(fd_.get(), out, size, 0);
      if (n > 0) {
        out += n;
        size -= static_cast<size_t>(n);
        continue;
      }
      if (n == 0) return LostConnection("connection closed");
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return LostConnection(OsErrorText(errno));
      const int ready = store_wire::WaitFor(fd_.get(), POLLIN, deadline);
      if (ready < 0) return LostConnection(OsErrorText(errno));
      if (ready == 0) return NoReply();
    }
    return Status::Ok();
  }

  Status LostConnection(const std::string& why) const {
    return PeerFailed("lost connection to the store on rank 0 (" + address_ + "): " + why);
  }

  Status NoReply() const {
    return Timeout("no reply from the store on rank 0 (" + address_ + ") within " +
                   std::to_string(config_.timeout.count()) + " ms");
  }

  TcpStoreConfig config_;
  std::string address_;
  std::unique_ptr<StoreServer> server_;
  // Rank 0 without a configured secret: the file it published, removed once the server has stopped.
  std::optional<PublishedSecret> published_;
  std::mutex mu_;  // one request on the connection at a time
  UniqueFd fd_;
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
std::chrono::milliseconds PeerCheckInterval(int world_size, std::chrono::milliseconds timeout) {
  constexpr std::chrono::milliseconds kSmallJobInterval{250};
  constexpr int64_t kRankZeroChecksPerSecond = 4000;
  const std::chrono::milliseconds spread{static_cast<int64_t>(world_size) * 1000 / kRankZeroChecksPerSecond};
  return std::max(kSmallJobInterval, std::min(spread, timeout / 4));
}

// The server answers any Get with the dead ranks' error once one has died.
Status TcpStore::CheckPeers() {
  std::lock_guard<std::mutex> lock(peer_check_mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (!last_peer_check_.ok() || now < next_peer_check_) return last_peer_check_;
  last_peer_check_ = impl_->Get("ckpt/peers-alive").status();
  next_peer_check_ = now + PeerCheckInterval(impl_->config().world_size, impl_->config().timeout);
  return last_peer_check_;
}
Result<std::optional<std::string>> TcpStore::Get(std::string_view key) { return impl_->Get(key); }
Result<std::string> TcpStore::Wait(std::string_view key) { return impl_->Wait(key, impl_->config().timeout); }
Result<std::string> TcpStore::Wait(std::string_view key, std::chrono::milliseconds timeout) {
  return impl_->Wait(key, timeout);
}

}  // namespace ckpt::coll

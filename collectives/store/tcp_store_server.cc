#include "collectives/store/tcp_store_server.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <optional>
#include <vector>

#include "collectives/store/store_auth.h"
#include "collectives/store/store_handshake.h"
#include "collectives/store/store_server_connection.h"
#include "collectives/store/store_server_session.h"
#include "collectives/store/store_strangers.h"
#include "collectives/store/tcp_store_wire.h"
#include "common/os_error.h"

namespace ckpt::coll {
namespace {

using ckpt::UniqueFd;
using store_server::Clock;
using store_server::Connection;
using store_server::Frame;
using store_server::Pending;
using store_wire::MessageType;

// What a connection turned away for pressure is told, before the gate's reason.
constexpr char kBusyPrefix[] = "the store on rank 0 is busy: ";

}  // namespace

class StoreServer::Loop {
 public:
  Loop(UniqueFd listener, UniqueFd wake_read, UniqueFd wake_write, int world_size, std::string secret)
      : listener_(std::move(listener)),
        wake_read_(std::move(wake_read)),
        wake_write_(std::move(wake_write)),
        session_(std::move(secret), world_size, conns_, strangers_) {}

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
      session_.ExpireDeadlines(Clock::now());
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

  // Until the next deadline: the stop's, the gate's reopening, or what a connection waits for.
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
        store_server::Flush(c);
        // Requests that arrived while the reply was going out.
        if (c.out.empty()) store_server::ParseFrames(c, session_);
      }
      if (revents & (POLLIN | POLLHUP | POLLERR)) store_server::ReadFrom(c, session_);
    }
    if (fds[0].revents & POLLIN) DrainWakePipe();
  }

  void DrainWakePipe() {
    char buffer[64];
    while (read(wake_read_.get(), buffer, sizeof buffer) > 0) {
    }
  }

  // Takes connections from the listen queue while the gate lets them in (collectives/store/store_strangers.h).
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
      store_server::Send(*c, Frame(MessageType::kChallenge, store_handshake::EncodeChallenge(c->server_nonce)));
      conns_.push_back(std::move(c));
    }
  }

  // Closes strangers that have had their fair chance until one more from `source` fits; false if none may go.
  bool MakeRoomFor(const std::string& source) {
    return strangers_.MakeRoomFor(source, Clock::now(), [&](StrangerGate::Id victim) {
      for (const auto& c : conns_) {
        if (c->stranger != victim || c->closed) continue;
        // A hello already received is answered first: its sender may be a rank, only slow.
        store_server::ReadFrom(*c, session_);
        if (c->rank < 0 && !c->closed) {
          store_server::Send(*c, Frame(MessageType::kBusy, kBusyPrefix + BusyReason(source)));
          c->closed = true;
        }
      }
    });
  }

  // A failed send is handled here, outside the sender's call chain, as the connection's loss.
  void SweepHungUp() {
    bool again = true;
    while (again) {
      again = false;
      for (const auto& c : conns_) {
        if (c->hung_up && !c->closed) {
          session_.OnLost(*c);
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

  Clock::time_point StopDeadline() const { return Clock::time_point(Clock::duration(stop_deadline_ticks_.load())); }

  UniqueFd listener_;
  UniqueFd wake_read_;
  UniqueFd wake_write_;
  store_server::Connections conns_;
  StrangerGate strangers_;
  store_server::Session session_;  // holds conns_ and strangers_, declared before it
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
    return OsError("cannot create the store's wake pipe", errno);
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

#include "collectives/store/store_server_loop.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <optional>

#include "collectives/store/store_auth.h"
#include "collectives/store/store_handshake.h"
#include "collectives/store/tcp_store_wire.h"
#include "common/os_error.h"

namespace ckpt::coll::store_server {

Result<std::unique_ptr<ServerLoop>> ServerLoop::Create(UniqueFd listener, std::string name,
                                                       const MakeSession& make_session) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) return OsError("cannot create " + name + "'s wake pipe", errno);
  std::unique_ptr<ServerLoop> loop(
      new ServerLoop(std::move(listener), UniqueFd(pipe_fds[0]), UniqueFd(pipe_fds[1]), std::move(name)));
  loop->session_ = make_session(loop->conns_, loop->strangers_);
  return loop;
}

ServerLoop::ServerLoop(UniqueFd listener, UniqueFd wake_read, UniqueFd wake_write, std::string name)
    : listener_(std::move(listener)),
      wake_read_(std::move(wake_read)),
      wake_write_(std::move(wake_write)),
      busy_prefix_(std::move(name) + " is busy: ") {}

void ServerLoop::Run() {
  try {
    Serve();
  } catch (const std::exception&) {
    // Out of memory, most likely: what follows closes every connection, which every client reports as the server lost.
  }
  for (const auto& c : conns_) session_->OnRemoved(*c);
  conns_.clear();
  listener_.Reset();
}

void ServerLoop::RequestStop(std::chrono::milliseconds grace) {
  stop_deadline_ticks_.store((Clock::now() + grace).time_since_epoch().count());
  stop_requested_.store(true);
  const char byte = 1;
  while (write(wake_write_.get(), &byte, 1) < 0 && errno == EINTR) {
  }
}

void ServerLoop::Serve() {
  std::vector<pollfd> fds;
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (stop_requested_.load() && (session_->Drained(conns_) || now >= StopDeadline())) return;
    BuildPollSet(&fds, now);
    const int ready = poll(fds.data(), fds.size(), PollTimeoutMs(now));
    if (ready < 0 && errno != EINTR) return;
    if (ready > 0) HandleEvents(fds);
    session_->ExpireDeadlines(Clock::now());
    SweepHungUp();
    RemoveClosed();
    // Only now, so that the gate counts just the strangers still there.
    if (ready > 0 && (fds[1].revents & POLLIN)) AcceptAll();
  }
}

// Slot 0 is the wake pipe, slot 1 the listener (left out while the gate is closed), then one per connection with a
// socket of its own, in polled_'s order. Connections carried by a relay take no slot: poll() refuses more slots than
// RLIMIT_NOFILE, which a process with few descriptors may carry many more connections than.
void ServerLoop::BuildPollSet(std::vector<pollfd>* fds, Clock::time_point now) {
  fds->clear();
  polled_.clear();
  fds->push_back({wake_read_.get(), POLLIN, 0});
  fds->push_back({strangers_.Open(now) ? listener_.get() : -1, POLLIN, 0});
  for (const auto& c : conns_) {
    if (c->via != nullptr) continue;
    polled_.push_back(c.get());
    // A connection with a reply still unsent is not read from until the reply is out (hang-ups still show); a link
    // between a relay and rank 0 is always read, so that neither end can block the other.
    const short unsent = static_cast<short>(c->out.empty() ? 0 : POLLOUT);
    const short events = static_cast<short>(ReadsAhead(*c) ? POLLIN | unsent : unsent != 0 ? unsent : POLLIN);
    fds->push_back({c->fd.get(), events, 0});
  }
}

// Until the next deadline: the stop's, the gate's reopening, or what a connection waits for.
int ServerLoop::PollTimeoutMs(Clock::time_point now) const {
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

void ServerLoop::HandleEvents(const std::vector<pollfd>& fds) {
  // Connections stay alive until RemoveClosed, after this: the pointers are good throughout.
  for (size_t i = 0; i < polled_.size(); ++i) {
    Connection& c = *polled_[i];
    const short revents = fds[i + 2].revents;
    if (c.closed || revents == 0) continue;
    if (revents & POLLOUT) {
      Flush(c);
      // Requests that arrived while the reply was going out.
      if (c.out.empty()) ParseFrames(c, *session_);
    }
    if (revents & (POLLIN | POLLHUP | POLLERR)) ReadFrom(c, *session_);
  }
  if (fds[0].revents & POLLIN) DrainWakePipe();
}

void ServerLoop::DrainWakePipe() {
  char buffer[64];
  while (read(wake_read_.get(), buffer, sizeof buffer) > 0) {
  }
}

// Takes connections from the listen queue while the gate lets them in (collectives/store/store_strangers.h).
void ServerLoop::AcceptAll() {
  while (std::optional<StrangerGate::Arrival> arrival = strangers_.Accept(listener_.get(), Clock::now())) {
    if (!MakeRoomFor(arrival->source)) {
      TurnAway(arrival->fd.get(), busy_prefix_ + BusyReason(arrival->source));
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
bool ServerLoop::MakeRoomFor(const std::string& source) {
  return strangers_.MakeRoomFor(source, Clock::now(), [&](StrangerGate::Id victim) {
    for (const auto& c : conns_) {
      if (c->stranger != victim || c->closed) continue;
      // A hello already received is answered first: its sender may be a rank, only slow.
      ReadFrom(*c, *session_);
      if (c->rank < 0 && !c->closed) {
        Send(*c, Frame(MessageType::kBusy, busy_prefix_ + BusyReason(source)));
        c->closed = true;
      }
    }
  });
}

// A failed send is handled here, outside the sender's call chain, as the connection's loss.
void ServerLoop::SweepHungUp() {
  bool again = true;
  while (again) {
    again = false;
    for (const auto& c : conns_) {
      if (c->hung_up && !c->closed) {
        session_->OnLost(*c);
        again = true;
      }
    }
  }
}

void ServerLoop::RemoveClosed() {
  for (const auto& c : conns_) {
    if (!c->closed) continue;
    strangers_.Forget(c->stranger);
    session_->OnRemoved(*c);
  }
  conns_.erase(std::remove_if(conns_.begin(), conns_.end(), [](const auto& c) { return c->closed; }), conns_.end());
}

Clock::time_point ServerLoop::StopDeadline() const {
  return Clock::time_point(Clock::duration(stop_deadline_ticks_.load()));
}

}  // namespace ckpt::coll::store_server

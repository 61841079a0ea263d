#include "agent/agent_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "collectives/agent/agent_socket.h"
#include "collectives/store/store_auth.h"
#include "common/os_error.h"

namespace ckpt::agent {
namespace {

using coll::agent::Reply;

// A connection must say hello this soon after it is accepted: a rank does so at once, so a silent one is a
// stranger or a hung process, and it must not hold a slot (or the agent's exit) for longer.
constexpr std::chrono::milliseconds kHelloTimeout{5000};
// While the agent waits for the persister before it leaves, it looks this often whether it is done.
constexpr int kPersistWaitPollMs = 100;

}  // namespace

AgentServer::AgentServer(int listener_fd, int signal_fd, AgentIdentity identity, AgentTimes times, MemoryStore& store,
                         Persister& persister, Replication replication, LogFn log)
    : listener_fd_(listener_fd),
      signal_fd_(signal_fd),
      identity_(std::move(identity)),
      times_(times),
      store_(store),
      persister_(persister),
      replication_(std::move(replication)),
      log_(std::move(log)) {
  // Accepting drains the backlog until it would block, so a connection withdrawn meanwhile cannot stall the loop.
  fcntl(listener_fd_, F_SETFL, fcntl(listener_fd_, F_GETFL) | O_NONBLOCK);
}

Status AgentServer::Run() {
  alone_since_ = Clock::now();
  while (!signalled_) {
    const Clock::time_point now = Clock::now();
    const std::optional<Clock::time_point> leave_at = LeaveAt();
    if (leave_at.has_value() && now >= *leave_at && !persister_.Busy()) break;
    std::vector<pollfd> fds = {{listener_fd_, POLLIN, 0}, {signal_fd_, POLLIN, 0}};
    for (const Session& session : sessions_) fds.push_back({session.fd.get(), POLLIN, 0});
    const int ready = poll(fds.data(), fds.size(), PollTimeoutMs(now));
    if (ready < 0 && errno != EINTR) {
      log_("poll failed, leaving: " + OsErrorText(errno));
      break;
    }
    if (ready > 0 && fds[1].revents != 0) signalled_ = ReadSignal();
    // The sessions polled are the first ones: Accept appends after them.
    for (size_t i = 0; ready > 0 && i + 2 < fds.size(); ++i) {
      if (fds[i + 2].revents != 0) Serve(sessions_[i]);
    }
    if (ready > 0 && fds[0].revents != 0) Accept();
    for (Session& session : sessions_) {
      if (session.joined || session.closing || Clock::now() < session.hello_deadline) continue;
      log_("a connection sent no hello within " + std::to_string(kHelloTimeout.count()) + " ms; closed");
      session.closing = true;
    }
    for (Session& session : sessions_) {
      if (session.closing) Close(session);
    }
    sessions_.erase(std::remove_if(sessions_.begin(), sessions_.end(), [](const Session& s) { return s.closing; }),
                    sessions_.end());
  }
  // A signal ends the persist in progress (it finishes) and drops the queued ones; otherwise none is left.
  persister_.Stop();
  return store_.RemoveAll();
}

// Sessions keep the agent; without any, it leaves after the linger when the job ended cleanly, or after the idle
// timeout when the trainers died or never came, so that a restarted job finds its checkpoints in memory.
std::optional<AgentServer::Clock::time_point> AgentServer::LeaveAt() const {
  if (!sessions_.empty()) return std::nullopt;
  return alone_since_ + (ever_joined_ && !died_ ? times_.linger : times_.idle_timeout);
}

int AgentServer::PollTimeoutMs(Clock::time_point now) const {
  std::optional<Clock::time_point> wake = LeaveAt();
  for (const Session& session : sessions_) {
    if (!session.joined) wake = std::min(wake.value_or(session.hello_deadline), session.hello_deadline);
  }
  if (!wake.has_value()) return -1;
  if (*wake <= now) return kPersistWaitPollMs;  // only the persister is left to wait for
  // Rounded up, so that the loop does not spin through the last millisecond.
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(*wake - now).count());
}

bool AgentServer::ReadSignal() {
  signalfd_siginfo info;
  if (read(signal_fd_, &info, sizeof info) != static_cast<ssize_t>(sizeof info)) return false;
  log_("signal " + std::to_string(info.ssi_signo) + " received: finishing the persist in progress, then leaving");
  return true;
}

void AgentServer::Accept() {
  while (true) {
    UniqueFd fd(accept4(listener_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
        log_("accept failed: " + OsErrorText(errno));
      }
      return;
    }
    Result<std::string> nonce = coll::store_auth::RandomBytes(coll::store_auth::kNonceBytes);
    if (!nonce.ok()) {
      log_("cannot challenge a connection: " + nonce.status().message());
      continue;
    }
    const std::string challenge = coll::agent::EncodeChallenge({coll::agent::kProtocolVersion, *nonce});
    if (!coll::agent::SendMessage(fd.get(), challenge).ok()) continue;  // gone before it was served
    Session session;
    session.fd = std::move(fd);
    session.id = next_id_++;
    session.challenge_nonce = std::move(*nonce);
    session.hello_deadline = Clock::now() + kHelloTimeout;
    sessions_.push_back(std::move(session));
  }
}

void AgentServer::Serve(Session& session) {
  // The descriptor is non-blocking and poll said it is readable: the wait never happens.
  Result<std::string> message = coll::agent::ReceiveMessage(session.fd.get(), std::chrono::milliseconds(1));
  if (message.status().code() == Code::kTimeout) return;
  if (!message.ok()) {
    session.closing = true;
    return;
  }
  if (!session.joined) {
    Join(session, *message);
    return;
  }
  Result<coll::agent::Request> request = coll::agent::DecodeRequest(*message);
  if (!request.ok()) {
    log_(Describe(session) + " sent an undecodable request; closing its connection: " + request.status().message());
    session.closing = true;
    return;
  }
  const Reply reply = HandleRequest(store_, persister_, replication_, session.id, *request);
  Status sent = coll::agent::SendMessage(session.fd.get(), coll::agent::EncodeReply(reply));
  if (!sent.ok()) {
    log_("cannot answer " + Describe(session) + "; closing its connection: " + sent.message());
    session.closing = true;
  } else if (request->op == coll::agent::Op::kDetach) {
    session.detached = true;
    session.closing = true;
  }
}

void AgentServer::Join(Session& session, const std::string& message) {
  session.closing = true;  // unless it is accepted below
  Result<coll::agent::Hello> hello = coll::agent::DecodeHello(message);
  if (!hello.ok()) {
    log_("a connection sent an undecodable hello; closed: " + hello.status().message());
    // A rank of another release is told why; anything else gets no answer.
    if (hello.status().code() == Code::kVersion) {
      const Reply refusal{Code::kVersion, hello.status().message(), ""};
      (void)coll::agent::SendMessage(session.fd.get(), coll::agent::EncodeReply(refusal));
    }
    return;
  }
  session.rank = hello->rank;
  session.pid = hello->pid;
  Result<ucred> peer = coll::agent::PeerCredentials(session.fd.get());
  // The kernel's pid, not the one the hello claims, names a stranger.
  if (peer.ok() && peer->uid != geteuid()) session.pid = static_cast<uint32_t>(peer->pid);
  Status allowed = peer.ok() ? Authenticate(identity_, peer->uid, session.challenge_nonce, *hello) : peer.status();
  if (!allowed.ok()) {
    log_("refused " + Describe(session) + ": " + allowed.message());
    (void)coll::agent::SendMessage(session.fd.get(),
                                   coll::agent::EncodeReply(Reply{allowed.code(), allowed.message(), ""}));
    return;
  }
  coll::agent::Welcome welcome{store_.directory(), store_.budget_bytes(),
                               replication_.replicator != nullptr ? replication_.replicator->address() : "", ""};
  if (!identity_.secret.empty()) {
    welcome.proof = coll::agent::WelcomeProof(identity_.secret, session.challenge_nonce, hello->nonce, welcome);
  }
  if (!coll::agent::SendMessage(session.fd.get(), coll::agent::EncodeReply({Code::kOk, "", EncodeWelcome(welcome)}))
           .ok()) {
    return;
  }
  session.closing = false;
  session.joined = true;
  if (joined_ == 0) died_ = false;  // the first rank of a new run of the job
  ++joined_;
  ever_joined_ = true;
  log_("session joined: " + Describe(session));
}

// A session that leaves without detaching is a trainer that died: the newest checkpoint goes to storage, as
// nobody else will write it there.
void AgentServer::Close(Session& session) {
  if (!session.joined) return;
  --joined_;
  if (joined_ == 0) alone_since_ = Clock::now();
  store_.ReleaseSession(session.id);
  if (session.detached) {
    log_("session left: " + Describe(session));
    return;
  }
  died_ = true;
  log_("session died: " + Describe(session) + " closed its connection without detaching");
  std::optional<MemoryCheckpoint> newest = store_.RequestPersistOfNewest();
  if (!newest.has_value()) return;
  log_("persisting memory checkpoint " + Quoted(newest->name) + " since its trainer died");
  persister_.Enqueue(std::move(*newest));
}

std::string AgentServer::Describe(const Session& session) const {
  return "rank " + std::to_string(session.rank) + " (pid " + std::to_string(session.pid) + ")";
}

}  // namespace ckpt::agent

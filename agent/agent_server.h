// The agent's socket loop: one thread polls the listening socket, the signal descriptor and every connection, so
// that no connection can stall another (each is non-blocking, a silent one is closed after the hello timeout, and
// an undecodable message closes only its own connection). It also decides when the agent's work is over.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent_requests.h"
#include "common/unique_fd.h"

namespace ckpt::agent {

struct AgentTimes {
  // After the job ended cleanly (every rank detached): how long to wait for a new session before leaving.
  std::chrono::milliseconds linger{2000};
  // After the ranks died, or when none came: how long to keep the checkpoints for a restarted job.
  std::chrono::milliseconds idle_timeout{600000};
};

class AgentServer {
 public:
  // `listener_fd`: the agent's listening socket (coll::agent::AgentListener); `signal_fd`: a signalfd for SIGTERM
  // and SIGINT. The server owns neither.
  AgentServer(int listener_fd, int signal_fd, AgentIdentity identity, AgentTimes times, MemoryStore& store,
              Persister& persister, Replication replication, LogFn log);

  // Serves until the job's work is over (its queued persists included) or a signal arrives. The memory directory
  // is then removed; the returned status is the removal's.
  Status Run();
  // After Run: whether the job ended cleanly (a rank attached, and every rank of the last run detached) and no
  // signal ended the agent; otherwise its log is kept for a user to read.
  bool EndedCleanly() const { return ever_joined_ && !died_ && !signalled_; }

 private:
  struct Session {
    UniqueFd fd;
    SessionId id = 0;
    std::string challenge_nonce;
    std::chrono::steady_clock::time_point hello_deadline;
    bool joined = false;    // its hello was accepted
    bool detached = false;  // it left cleanly
    bool closing = false;
    int32_t rank = -1;
    uint32_t pid = 0;
  };
  using Clock = std::chrono::steady_clock;

  void Accept();
  void Serve(Session& session);
  void Join(Session& session, const std::string& message);
  void Close(Session& session);
  std::string Describe(const Session& session) const;
  std::optional<Clock::time_point> LeaveAt() const;
  int PollTimeoutMs(Clock::time_point now) const;
  bool ReadSignal();

  const int listener_fd_;
  const int signal_fd_;
  const AgentIdentity identity_;
  const AgentTimes times_;
  MemoryStore& store_;
  Persister& persister_;
  const Replication replication_;
  const LogFn log_;
  std::vector<Session> sessions_;
  SessionId next_id_ = 1;
  int joined_ = 0;  // sessions attached now
  bool ever_joined_ = false;
  bool died_ = false;              // a session of the current run of the job closed without detaching
  bool signalled_ = false;         // a signal ended the agent
  Clock::time_point alone_since_;  // when the last session left (or the agent started)
};

}  // namespace ckpt::agent

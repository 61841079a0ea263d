// A rank's connection to its node's ckpt-agent: the handshake (collectives/agent/agent_protocol.h), in which the agent
// must prove that it is the job's own before the rank trusts anything it says, then one request at a time. Not
// thread-safe: its owner serializes calls.
#pragma once

#include <chrono>
#include <string>

#include "collectives/agent/agent_protocol.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace ckpt::coll::agent {

// The agent a rank looks for, and what that agent must prove.
struct AgentEndpoint {
  std::string socket_dir;  // this user's socket directory (DefaultSocketDirectory)
  std::string job_id;
  std::string node;      // this rank's node, as the agent was started for it
  std::string shm_root;  // the agent's memory directory must lie directly beneath it
  std::string secret;    // the job's (CKPT_AGENT_SECRET); empty: the job has none
};

class AgentConnection {
 public:
  // Connects to the agent of (this user, `endpoint.job_id`, `endpoint.node`) and introduces itself as `rank`. The
  // agent must be this user's process (kMismatch naming its uid and pid otherwise), prove the job's secret where
  // there is one (kMismatch), and name a memory directory directly beneath `endpoint.shm_root` that is a real
  // directory of this user with mode 0700 (kInvalidArgument): the rank sends nothing but its hello before that.
  // kNotFound when no agent listens; the agent's refusal (another user, another job, a wrong secret) with its own
  // code and message.
  static Result<AgentConnection> Open(const AgentEndpoint& endpoint, int rank, std::chrono::milliseconds timeout);

  const Welcome& welcome() const { return welcome_; }
  // Sends `request` and waits for its reply; the reply's status when it is an error.
  Result<Reply> Call(const Request& request);
  // Whether the agent has closed the connection (it died or left), without waiting. The agent sends nothing
  // unasked, so between calls anything to read means that too. Not while another thread is in Call.
  bool Closed() const;

 private:
  AgentConnection(UniqueFd fd, std::chrono::milliseconds timeout) : fd_(std::move(fd)), timeout_(timeout) {}
  // Sends the hello and returns the agent's welcome, unchecked.
  Result<Welcome> Introduce(const AgentEndpoint& endpoint, int rank);

  UniqueFd fd_;
  std::chrono::milliseconds timeout_;
  Welcome welcome_;
};

}  // namespace ckpt::coll::agent

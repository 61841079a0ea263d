// A rank's connection to its node's ckpt-agent: the handshake (collectives/agent_protocol.h), then one request at
// a time. Not thread-safe: its owner serializes calls.
#pragma once

#include <chrono>
#include <string>

#include "collectives/agent_protocol.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace ckpt::coll::agent {

class AgentConnection {
 public:
  // Connects to the agent of (this user, `job_id`) in this network namespace and introduces itself as `rank`,
  // proving the job's `secret` when it is not empty. kNotFound when no agent listens; the agent's refusal (another
  // user, another job, a wrong secret) with its own code and message.
  static Result<AgentConnection> Open(const std::string& job_id, const std::string& secret, int rank,
                                      std::chrono::milliseconds timeout);

  const Welcome& welcome() const { return welcome_; }
  // Sends `request` and waits for its reply; the reply's status when it is an error.
  Result<Reply> Call(const Request& request);
  // Whether the agent has closed the connection (it died or left), without waiting. The agent sends nothing
  // unasked, so between calls anything to read means that too. Not while another thread is in Call.
  bool Closed() const;

 private:
  AgentConnection(UniqueFd fd, std::chrono::milliseconds timeout) : fd_(std::move(fd)), timeout_(timeout) {}

  UniqueFd fd_;
  std::chrono::milliseconds timeout_;
  Welcome welcome_;
};

}  // namespace ckpt::coll::agent

// What the agent answers: whether a connection may attach (its hello), and each request of an attached rank
// (collectives/agent/agent_protocol.h). No socket here: the server hands in decoded messages and sends the replies.
#pragma once

#include <sys/types.h>

#include <string>

#include "agent/memory_store.h"
#include "agent/persister.h"
#include "agent/replicator.h"
#include "collectives/agent/agent_protocol.h"

namespace ckpt::agent {

// Who the agent serves.
struct AgentIdentity {
  std::string job_id;
  std::string node;
  std::string secret;  // the job's; empty when the job has none
};

// Whether the process at the other end (user `peer_uid`) may attach with `hello`, answering the challenge
// `challenge_nonce`: the agent's own user only (kInvalidArgument), the agent's job only (kMismatch), and the
// job's secret proved exactly when the agent has one (kMismatch).
Status Authenticate(const AgentIdentity& identity, uid_t peer_uid, const std::string& challenge_nonce,
                    const coll::agent::Hello& hello);

// The agent's replication to peer nodes: its replicator, or why it has none (UCX cannot run here).
struct Replication {
  Replicator* replicator = nullptr;
  std::string unavailable;
};

// Carries out `request` of the attached connection `session` and returns its reply. kDetach is answered here but
// the caller closes the connection.
coll::agent::Reply HandleRequest(MemoryStore& store, Persister& persister, const Replication& replication,
                                 SessionId session, const coll::agent::Request& request);

}  // namespace ckpt::agent

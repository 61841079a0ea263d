#include "agent/agent_requests.h"

#include <unistd.h>

#include <algorithm>

#include "collectives/store/store_auth.h"

namespace ckpt::agent {
namespace {

using coll::agent::Op;
using coll::agent::Reply;
using coll::agent::Request;

Reply ErrorReply(const Status& status) { return Reply{status.code(), status.message(), ""}; }

// Hands a checkpoint the store marked for persisting to the persister.
void Queue(Persister& persister, std::optional<MemoryCheckpoint> checkpoint) {
  if (checkpoint.has_value()) persister.Enqueue(std::move(*checkpoint));
}

Status NoReplication(const Replication& replication) {
  return Unsupported("this node's agent neither replicates nor fetches: " + replication.unavailable);
}

// A multi-node save's files go to the peer nodes in the background; the ranks learn the outcome from kList.
Reply Complete(MemoryStore& store, Persister& persister, const Replication& replication, SessionId session,
               const Request& request) {
  Result<std::optional<MemoryCheckpoint>> queued =
      store.Complete(session, request.reservation, request.checkpoint, request.persist);
  if (!queued.ok()) return ErrorReply(queued.status());
  Queue(persister, std::move(*queued));
  if (request.checkpoint.node_count > 1) {
    if (replication.replicator != nullptr) {
      replication.replicator->Replicate(request.checkpoint.name);
    } else {
      (void)store.MarkReplicated(request.checkpoint.name, NoReplication(replication).message());
    }
  }
  return Reply{};
}

Reply Peers(const Replication& replication, const Request& request) {
  if (replication.replicator == nullptr) return ErrorReply(NoReplication(replication));
  const bool listed = std::any_of(request.peers.begin(), request.peers.end(), [&](const coll::agent::PeerAgent& peer) {
    return peer.node_index == request.node_index;
  });
  if (!listed) {
    return ErrorReply(
        InvalidArgument("the peers sent to the agent lack this node's index " + std::to_string(request.node_index)));
  }
  const uint32_t others = static_cast<uint32_t>(request.peers.size() - 1);
  replication.replicator->SetPeers(request.peers, request.node_index, std::min(request.replicas, others));
  return Reply{};
}

Reply Fetch(const Replication& replication, const Request& request) {
  if (replication.replicator == nullptr) return ErrorReply(NoReplication(replication));
  return ErrorReply(replication.replicator->Fetch(request.checkpoint, request.files));
}

Reply Persist(MemoryStore& store, Persister& persister, const Request& request) {
  Result<std::optional<MemoryCheckpoint>> queued = store.RequestPersist(request.name);
  if (!queued.ok()) return ErrorReply(queued.status());
  Queue(persister, std::move(*queued));
  return Reply{};
}

}  // namespace

Status Authenticate(const AgentIdentity& identity, uid_t peer_uid, const std::string& challenge_nonce,
                    const coll::agent::Hello& hello) {
  const std::string agent = "the ckpt-agent of job '" + identity.job_id + "' on node '" + identity.node + "'";
  if (peer_uid != geteuid()) {
    return InvalidArgument(agent + " serves uid " + std::to_string(geteuid()) + " only; uid " +
                           std::to_string(peer_uid) + " may not attach");
  }
  if (hello.job_id != identity.job_id) {
    return Mismatch(agent + " serves that job only, not job '" + hello.job_id + "'");
  }
  if (identity.secret.empty()) {
    if (hello.proof.empty()) return Status::Ok();
    return Mismatch(agent +
                    " was started without the job's secret, but this rank has one: CKPT_AGENT_SECRET differs "
                    "between this rank and the rank that started the agent");
  }
  const std::string expected =
      coll::store_auth::HelloProof(identity.secret, challenge_nonce, hello.nonce, coll::agent::HelloProofFields(hello));
  if (!coll::store_auth::ProofsMatch(expected, hello.proof)) {
    return Mismatch(agent + " refuses this rank: its CKPT_AGENT_SECRET differs from the job's (or it has none)");
  }
  return Status::Ok();
}

Reply HandleRequest(MemoryStore& store, Persister& persister, const Replication& replication, SessionId session,
                    const Request& request) {
  switch (request.op) {
    case Op::kReserve: {
      if (request.file_sizes.size() != request.files.size()) {
        return ErrorReply(InvalidArgument("a reservation names " + std::to_string(request.files.size()) +
                                          " files but gives " + std::to_string(request.file_sizes.size()) + " sizes"));
      }
      std::vector<PlannedFile> files;
      for (size_t i = 0; i < request.files.size(); ++i) files.push_back({request.files[i], request.file_sizes[i]});
      return ErrorReply(store.Reserve(session, request.name, request.bytes, files));
    }
    case Op::kRelease:
      store.Release(session, request.name);
      return Reply{};
    case Op::kComplete:
      return Complete(store, persister, replication, session, request);
    case Op::kList:
      return Reply{Code::kOk, "", coll::agent::EncodeCheckpoints(store.List())};
    case Op::kPersist:
      return Persist(store, persister, request);
    case Op::kDetach:
      return Reply{};
    case Op::kPeers:
      return Peers(replication, request);
    case Op::kFetch:
      return Fetch(replication, request);
    case Op::kReassign:
      return ErrorReply(store.Reassign(request.checkpoint));
  }
  return ErrorReply(Internal("an agent request of unknown operation passed decoding"));
}

}  // namespace ckpt::agent

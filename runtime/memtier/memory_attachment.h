// One rank's attachment to its node's ckpt-agent, kept between saves and loads: attached collectively by the first
// save to the memory tier (every rank then knows the job's nodes and each node's leader has told its agent its
// peers), found without starting an agent by a load, and renewed when the agent dies.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/agent/agent_protocol.h"
#include "common/status.h"
#include "runtime/core/context.h"
#include "runtime/memtier/memory_tier.h"

namespace ckpt::runtime {

class MemoryAttachment {
 public:
  // Collective on first use: every rank attaches to its node's ckpt-agent, starting it when none runs, and all
  // agree on the outcome; where the ranks span several nodes, each node's leader then tells its agent every node's
  // agent (its peers for replicas and fetches). Later calls return the same attachment at no cost.
  // Shared with the saves in flight, which hold it until they finish even when a later save re-attaches.
  Result<std::shared_ptr<MemoryTier>> Attach(Context& ctx);
  // This rank's node among the job's nodes, as Attach agreed (one node until it has).
  const MemoryNodes& nodes() const { return nodes_; }
  // Whether this rank attached to a new agent since the agents' addresses were last exchanged (its agent died).
  bool peers_stale() const { return peers_stale_; }
  // Collective: the agents' addresses exchanged again and every node's agent told its peers (a no-op before the
  // memory tier is attached). Saves call it when some rank's agent is new.
  Status RefreshPeers(Context& ctx);
  // Local: the memory tier if attached, else this job's agent on this node if one runs (never starting one); null
  // when there is none or the job has no identity (coll::agent::JobIdFromEnvironment).
  std::shared_ptr<MemoryTier> Find(Context& ctx);
  // Local: the complete memory checkpoints this rank's agent holds (Find), in `memory_dir`; none when there is no
  // agent or it cannot say (logged as a warning: the caller then uses storage).
  struct Holdings {
    std::string memory_dir;
    std::vector<coll::agent::MemoryCheckpoint> checkpoints;
  };
  Holdings HeldInMemory(Context& ctx);

 private:
  // Collective: every rank's node and agent address gathered (failing on every rank where `local` failed on one),
  // the nodes numbered, and each node's leader telling its agent its peers.
  Status ExchangePeers(Context& ctx, const Status& local);

  std::shared_ptr<MemoryTier> tier_;  // released once the saves in flight have finished
  bool agreed_ = false;               // every rank attached (Attach)
  MemoryNodes nodes_;                 // agreed with agreed_
  bool peers_stale_ = false;          // a new agent since the last ExchangePeers
};

}  // namespace ckpt::runtime

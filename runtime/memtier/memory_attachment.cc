#include "runtime/memtier/memory_attachment.h"

#include <algorithm>
#include <cstdint>

#include "common/bytes.h"
#include "common/settings.h"
#include "runtime/core/agreement.h"

namespace ckpt::runtime {
namespace {

// This rank's attachment to its node's agent, starting one with `start`: MemoryTier::Attach.
Result<std::shared_ptr<MemoryTier>> AttachToAgent(const Context& ctx, bool start) {
  ASSIGN_OR_RETURN(std::string job_id, coll::agent::JobIdFromEnvironment());
  MemoryTierConfig config;
  config.job_id = std::move(job_id);
  // Not the store's CKPT_JOB_SECRET: launchers make that one afresh for every run (ckpt-launch does), and the
  // restarted job must be let in to the memory its crashed run left.
  config.job_secret = settings::StringFromEnv(settings::kAgentSecretVar);
  config.node_name = ctx.node_name();
  config.rank = ctx.rank();
  config.timeout = ctx.timeout();
  ASSIGN_OR_RETURN(std::unique_ptr<MemoryTier> attached, MemoryTier::Attach(config, start));
  return std::shared_ptr<MemoryTier>(std::move(attached));
}

}  // namespace

Result<std::shared_ptr<MemoryTier>> MemoryAttachment::Attach(Context& ctx) {
  if (agreed_) {
    // Local, never a collective: the ranks learn of a dead agent at different times. Should the new attachment
    // fail, the broken one stays and fails this rank's share of the save, and so the save on every rank. A new
    // agent knows no peers, and the others know its predecessor's address: the next save's proposals say so, and
    // every rank then exchanges the agents' addresses again (RefreshPeers).
    if (tier_->broken()) {
      Result<std::shared_ptr<MemoryTier>> attached = AttachToAgent(ctx, true);
      if (attached.ok()) {
        tier_ = std::move(attached).value();
        peers_stale_ = nodes_.node_count > 1;
      } else {
        ctx.Log(LogLevel::kWarning, "the memory tier: no new agent: " + attached.status().message());
      }
    }
    return tier_;
  }
  Status local;
  if (!tier_ || tier_->broken()) {
    Result<std::shared_ptr<MemoryTier>> attached = AttachToAgent(ctx, true);
    if (attached.ok()) tier_ = std::move(attached).value();
    local = attached.status();
  }
  RETURN_IF_ERROR(ExchangePeers(ctx, local));
  agreed_ = true;
  return tier_;
}

Status MemoryAttachment::RefreshPeers(Context& ctx) {
  if (!agreed_) return Status::Ok();
  return ExchangePeers(ctx, Status::Ok());
}

Status MemoryAttachment::ExchangePeers(Context& ctx, const Status& local) {
  // Each rank says its node and its agent's address for peers; every rank derives the same node order from them.
  ByteWriter mine;
  mine.Bytes(ctx.node_name());
  mine.Bytes(tier_ ? tier_->replication_address() : std::string());
  ASSIGN_OR_RETURN(std::vector<std::string> said,
                   AgreeAndGather(ctx.control(), "memory tier (attach)", local, mine.Take()));
  std::vector<coll::agent::PeerAgent> agents;  // one per node, in node order
  MemoryNodes nodes;
  for (size_t r = 0; r < said.size(); ++r) {
    coll::agent::PeerAgent agent;
    ByteReader in(said[r], "the memory tier's attach report of rank " + std::to_string(r));
    RETURN_IF_ERROR(in.Bytes(&agent.node));
    RETURN_IF_ERROR(in.Bytes(&agent.address));
    RETURN_IF_ERROR(in.ExpectDone());
    auto known = std::find_if(agents.begin(), agents.end(), [&](const auto& a) { return a.node == agent.node; });
    const bool first_of_node = known == agents.end();
    if (first_of_node) {
      agent.node_index = static_cast<uint32_t>(agents.size());
      agents.push_back(agent);
      known = agents.end() - 1;
    }
    if (static_cast<int>(r) == ctx.rank()) nodes = MemoryNodes{known->node_index, 0, first_of_node};
  }
  nodes.node_count = static_cast<uint32_t>(agents.size());
  if (nodes.node_count > 1) {
    nodes.replicas = static_cast<uint32_t>(
        std::min<uint64_t>(settings::CountFromEnv(settings::kMemoryReplicasVar, 1), nodes.node_count - 1));
    const Status told = nodes.leader ? tier_->SetPeers(agents, nodes.node_index, nodes.replicas) : Status::Ok();
    RETURN_IF_ERROR(Agree(ctx.control(), "memory tier (peers)", told));
  }
  nodes_ = nodes;
  peers_stale_ = false;
  return Status::Ok();
}

std::shared_ptr<MemoryTier> MemoryAttachment::Find(Context& ctx) {
  if (tier_ && !tier_->broken()) return tier_;
  if (agreed_) return nullptr;  // saves re-attach (Attach); a load reads storage meanwhile
  if (!coll::agent::JobIdFromEnvironment().ok()) return nullptr;
  Result<std::shared_ptr<MemoryTier>> attached = AttachToAgent(ctx, false);
  if (!attached.ok()) {
    if (attached.status().code() != Code::kNotFound) {
      ctx.Log(LogLevel::kWarning, "the node's ckpt-agent cannot be used: " + attached.status().message());
    }
    return nullptr;
  }
  tier_ = std::move(attached).value();
  return tier_;
}

MemoryAttachment::Holdings MemoryAttachment::HeldInMemory(Context& ctx) {
  const std::shared_ptr<MemoryTier> memory = Find(ctx);
  if (memory == nullptr) return {};
  Result<std::vector<coll::agent::MemoryCheckpoint>> held = memory->List();
  if (!held.ok()) {
    ctx.Log(LogLevel::kWarning, "the memory tier: " + held.status().message());
    return {};
  }
  return {memory->memory_dir(), std::move(held).value()};
}

}  // namespace ckpt::runtime

#include "runtime/save/save.h"

#include <algorithm>
#include <thread>

#include "common/bytes.h"
#include "io/checksum.h"
#include "io/file_io.h"
#include "io/object_storage.h"
#include "runtime/core/agreement.h"
#include "runtime/format/save_directory.h"
#include "runtime/save/save_partition.h"
#include "runtime/save/save_stager.h"

namespace ckpt::runtime {
namespace {

// What each rank says first: the path it was given, the structure of its state (as a hash), the structure it
// planned for last time, and (rank 0) the identity of this save.
struct Proposal {
  std::string path;
  std::string save_id;
  uint64_t structure = 0;
  uint64_t cached_structure = 0;
  bool memory_peers_stale = false;  // this rank's agent is new: the agents must learn its address
  bool check_replicas = false;      // CKPT_SAVE_CHECK_REPLICAS
  std::string base;                 // CKPT_SAVE_INCREMENTAL: rank 0's is every rank's
};

std::string EncodeProposal(const Proposal& p) {
  ByteWriter out;
  out.Bytes(p.path);
  out.Bytes(p.save_id);
  out.U64(p.structure);
  out.U64(p.cached_structure);
  out.U8(p.memory_peers_stale ? 1 : 0);
  out.U8(p.check_replicas ? 1 : 0);
  out.Bytes(p.base);
  return out.Take();
}

Result<Proposal> DecodeProposal(std::string_view bytes, int rank) {
  ByteReader in(bytes, "save proposal from rank " + std::to_string(rank));
  Proposal p;
  RETURN_IF_ERROR(in.Bytes(&p.path));
  RETURN_IF_ERROR(in.Bytes(&p.save_id));
  RETURN_IF_ERROR(in.U64(&p.structure));
  RETURN_IF_ERROR(in.U64(&p.cached_structure));
  uint8_t stale = 0, check = 0;
  RETURN_IF_ERROR(in.U8(&stale));
  RETURN_IF_ERROR(in.U8(&check));
  RETURN_IF_ERROR(in.Bytes(&p.base));
  RETURN_IF_ERROR(in.ExpectDone());
  p.memory_peers_stale = stale != 0;
  p.check_replicas = check != 0;
  return p;
}

std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// Every rank saves to the same path, all with replica checks or all without.
Status CheckSameSave(const std::vector<Proposal>& proposals) {
  for (size_t r = 1; r < proposals.size(); ++r) {
    if (proposals[r].path != proposals[0].path) {
      return Mismatch("ranks save to different paths: rank 0 to '" + proposals[0].path + "', rank " +
                      std::to_string(r) + " to '" + proposals[r].path + "'");
    }
    if (proposals[r].check_replicas != proposals[0].check_replicas) {
      return Mismatch(std::string("ranks disagree on CKPT_SAVE_CHECK_REPLICAS: rank 0 ") +
                      (proposals[0].check_replicas ? "asks for it" : "does not") + ", rank " + std::to_string(r) +
                      (proposals[r].check_replicas ? " does" : " does not"));
    }
  }
  return Status::Ok();
}

// Every rank planned for exactly its current structure last time, so the cached plan still holds.
bool CachedPlanHolds(const std::vector<Proposal>& proposals) {
  for (const Proposal& p : proposals) {
    if (p.cached_structure == 0 || p.cached_structure != p.structure) return false;
  }
  return true;
}

// What rank 0 decides from every rank's proposal: the save's identity, and whether the cached plans still hold.
struct Verdict {
  std::string save_id;
  std::string base;  // CKPT_SAVE_INCREMENTAL: rank 0's; empty: none
  bool reuse_plan = false;
  bool refresh_memory_peers = false;  // some rank's agent is new (MemoryAttachment::RefreshPeers)
};

// `local`: rank 0's verdict on the path (ClaimSaveDirectory). The proposals travel to rank 0 only.
Result<Verdict> ExchangeProposals(Context& ctx, RankSaves& saves, const MemoryAttachment& attachment,
                                  const std::string& path, const std::string& save_id, uint64_t structure,
                                  bool check_replicas, const std::string& base, const Status& local) {
  Proposal mine{path, save_id, structure, saves.plan_cache().structure, attachment.peers_stale(), check_replicas, base};
  auto decide = [](std::vector<std::string> payloads) -> Result<std::string> {
    std::vector<Proposal> proposals;
    for (size_t r = 0; r < payloads.size(); ++r) {
      ASSIGN_OR_RETURN(Proposal p, DecodeProposal(payloads[r], static_cast<int>(r)));
      proposals.push_back(std::move(p));
    }
    RETURN_IF_ERROR(CheckSameSave(proposals));
    ByteWriter verdict;
    verdict.Bytes(proposals[0].save_id);
    verdict.U8(CachedPlanHolds(proposals) ? 1 : 0);
    verdict.U8(std::any_of(proposals.begin(), proposals.end(), [](const Proposal& p) { return p.memory_peers_stale; })
                   ? 1
                   : 0);
    verdict.Bytes(proposals[0].base);
    return verdict.Take();
  };
  ASSIGN_OR_RETURN(std::string decided,
                   DecideAtRoot(ctx.control(), "save (proposals)", local, EncodeProposal(mine), decide));
  ByteReader in(decided, "save verdict from rank 0");
  Verdict verdict;
  uint8_t reuse = 0, refresh = 0;
  RETURN_IF_ERROR(in.Bytes(&verdict.save_id));
  RETURN_IF_ERROR(in.U8(&reuse));
  RETURN_IF_ERROR(in.U8(&refresh));
  RETURN_IF_ERROR(in.Bytes(&verdict.base));
  RETURN_IF_ERROR(in.ExpectDone());
  verdict.reuse_plan = reuse != 0;
  verdict.refresh_memory_peers = refresh != 0;
  return verdict;
}

// The partitioned exchange (runtime/save/save_partition.h): descriptors to their keys' owners, each owner's coverage
// check and plan, and each rank's own items back from the owners.
Status Replan(Context& ctx, RankSaves& saves, const RankDescriptor& mine, uint64_t structure,
              const SavePlanOptions& options) {
  PlanCache& cache = saves.plan_cache();
  cache = PlanCache{};
  coll::ControlPlane& control = ctx.control();
  ASSIGN_OR_RETURN(std::vector<std::string> incoming,
                   control.AllToAllV(PartitionDescriptor(mine, ctx.world_size()), control.timeout()));
  Result<std::vector<RankDescriptor>> owned = DecodeOwnedDescriptors(incoming, ctx.rank());
  incoming = {};
  const Status coverage = owned.ok() ? ValidateCoverage(owned.value(), ctx.rank()) : owned.status();
  std::vector<std::string> routes;
  if (coverage.ok()) {
    SavePlanOptions owner_options = options;
    owner_options.rotation = ctx.rank();
    routes = RouteWriteItems(PlanSave(owned.value(), owner_options), owned.value(), ctx.rank());
  }
  // Every owner's coverage check travels with its routed items, which spares a first save the two rounds of
  // agreeing on the checks before routing. A failed check reaches every rank alike and goes on into the plan's
  // agreement, which also settles a rank's own failure to read what it received, before anything is staged.
  ASSIGN_OR_RETURN(const std::vector<std::string> received,
                   control.AllToAllV(WithStatus("save (coverage)", coverage, std::move(routes), ctx.world_size()),
                                     control.timeout()));
  const Result<std::vector<std::string>> routed = JudgeExchange(received);
  auto skeleton = ctx.rank() == 0 ? std::make_shared<ManifestSkeleton>() : nullptr;
  Result<SavePlan> plan =
      routed.ok() ? MergeWriteItems(routed.value(), ctx.rank(), skeleton.get()) : Result<SavePlan>(routed.status());
  RETURN_IF_ERROR(Agree(control, "save (plan)", plan.status()));
  cache.plan = std::move(plan).value();
  cache.skeleton = std::move(skeleton);
  cache.structure = structure;
  ++ctx.stats().plans_computed;
  return Status::Ok();
}

// The bytes of tensors and objects the state registered, whoever writes them.
uint64_t StateBytes(const State& state) {
  uint64_t bytes = 0;
  for (const TensorShard& shard : state.tensors()) bytes += shard.data_size;
  for (const ObjectShard& object : state.objects()) bytes += object.size;
  return bytes;
}

// What a memory-tier save adds to one to storage: the storage path its memory checkpoint stands for, and the
// node's agent holding it. `agent` is null for a save to storage.
struct MemoryTarget {
  std::shared_ptr<MemoryTier> agent;
  std::string storage_path;
};

// The announcement of this node's committed memory checkpoint to its agent, which keeps it (and persists it for
// kBoth).
std::function<Status(const std::vector<std::string>&)> Announcement(const MemoryTarget& memory,
                                                                    const CommitInputs& commit,
                                                                    const SaveSettings& settings) {
  coll::agent::MemoryCheckpoint checkpoint;
  checkpoint.name = commit.path.substr(commit.path.rfind('/') + 1);
  checkpoint.storage_path = memory.storage_path;
  checkpoint.manager_root = settings.manager_root;
  checkpoint.step = settings.step;
  checkpoint.save_id = commit.save_id;
  checkpoint.node_index = commit.memory_nodes.node_index;
  checkpoint.node_count = commit.memory_nodes.node_count;
  return [agent = memory.agent, reservation = commit.memory_reservation, checkpoint,
          persist = settings.tier == Tier::kBoth](const std::vector<std::string>& own_files) {
    coll::agent::MemoryCheckpoint announced = checkpoint;
    announced.own_files = own_files;
    return agent->Complete(reservation, announced, persist);
  };
}

// CommitInputs::await_replicas of a save across nodes.
std::function<void()> ReplicaWait(Context& ctx, const MemoryTarget& memory, const CommitInputs& commit) {
  return [&ctx, agent = memory.agent, name = commit.path.substr(commit.path.rfind('/') + 1),
          replicas_asked = commit.memory_nodes.replicas > 0] {
    const Status replicated = agent->AwaitReplicas(name, replicas_asked, ctx.timeout());
    if (!replicated.ok()) ctx.Log(LogLevel::kWarning, "the memory tier: " + replicated.message());
  };
}

// A copy-on-write save's staging (or the checksums of write-protected replicas), on a thread of its own from now on
// (not behind earlier saves' commits in the executor: the trainer would fault on every page it writes meanwhile);
// the executor joins it.
void StartBackgroundStaging(Context& ctx, RankSaves& saves, const std::shared_ptr<SaveTicket>& ticket) {
  ticket->staging = std::thread([&ctx, t = ticket.get(), stage = std::move(ticket->stage_later)] {
    stage();
    ctx.stats().bytes_staged += t->bytes_staged;
  });
  saves.RanInBackground(ticket);
}

// Everything after rank 0's claim, filling `ticket`; `claim` moves into it, which holds it until the commit or
// abandonment.
Status BeginSave(Context& ctx, RankSaves& saves, MemoryAttachment& attachment, const State& state,
                 const std::string& path, const std::string& save_id, const Status& claimed, io::Claim claim,
                 const SaveSettings& settings, const MemoryTarget& memory, const std::shared_ptr<SaveTicket>& ticket) {
  const RankDescriptor mine = state.Describe(ctx.rank(), ctx.node_name());
  const std::string encoded_mine = EncodeRankDescriptor(mine);
  // A plan with replica checks lists more than one without, so the flag is part of the structure it was made for.
  const uint64_t replica_checks = settings.plan.replica_checks ? 0x5eed'0000'0000'0000ull : 0;
  const uint64_t structure =
      (io::Checksum(encoded_mine.data(), encoded_mine.size()) ^ replica_checks) | 1;  // never 0: "no plan"
  // A memory checkpoint's directory differs from node to node; the storage path it stands for is the job's.
  const std::string& proposed = memory.agent != nullptr ? memory.storage_path : path;
  ASSIGN_OR_RETURN(const Verdict verdict, ExchangeProposals(ctx, saves, attachment, proposed, save_id, structure,
                                                            settings.plan.replica_checks, settings.base, claimed));
  if (verdict.refresh_memory_peers) RETURN_IF_ERROR(attachment.RefreshPeers(ctx));
  if (verdict.reuse_plan) {
    ++ctx.stats().plans_reused;
  } else {
    RETURN_IF_ERROR(Replan(ctx, saves, mine, structure, settings.plan));
  }
  const PlanCache& cache = saves.plan_cache();
  ticket->marks.planned = NowNs();
  ticket->state_bytes = StateBytes(state);

  CommitInputs& commit = ticket->commit;
  commit.path = path;
  commit.save_id = verdict.save_id;
  commit.tmp_dir = TemporaryDirectory(path, commit.save_id);
  commit.world_size = ctx.world_size();
  commit.claim = std::move(claim);
  if (ctx.rank() == 0) {
    commit.skeleton = cache.skeleton;
    commit.metadata = settings.metadata;
    commit.after_commit = settings.after_commit;
    commit.before_commit = settings.before_commit;
    commit.base_pin = settings.base_pin;
  }
  StagingSettings staging;
  staging.rank = ctx.rank();
  staging.block_size = settings.block_size;
  staging.inline_common_max = settings.inline_common_max;
  staging.timeout = ctx.timeout();
  staging.data_directory = DataDirectoryOf(path, commit.save_id);
  // Compressed files are laid out by the workers as they write, which writes from the buffers, an agent's memory
  // and object uploads do not do: those saves store every tensor as it is.
  if (!settings.in_place && memory.agent == nullptr && !io::IsObjectStorePath(path)) {
    staging.compression = settings.compress ? StagingSettings::Compression::kAll
                                            : StagingSettings::Compression::kShardsAsking;
  }
  // Objects are written by the workers' uploads: a rank writing its files itself has no path to them.
  if (settings.in_place && !io::IsObjectStorePath(path)) staging.in_place = &ctx.io_tuning();
  if (memory.agent != nullptr) {
    commit.memory_tier = memory.agent;
    commit.memory_reservation = commit.tmp_dir.substr(commit.tmp_dir.rfind('/') + 1);
    commit.storage_path = memory.storage_path;
    commit.memory_nodes = attachment.nodes();
    const bool across_nodes = commit.memory_nodes.node_count > 1;
    if (across_nodes ? commit.memory_nodes.leader : ctx.rank() == 0) {
      commit.announce = Announcement(memory, commit, settings);
    }
    if (across_nodes) commit.await_replicas = ReplicaWait(ctx, memory, commit);
    staging.writes_after_staging = true;
    staging.overwrite_existing_files = true;
    staging.reserve = [agent = memory.agent, name = commit.memory_reservation](
                          uint64_t bytes, const std::vector<std::string>& files, const std::vector<uint64_t>& sizes) {
      return agent->Reserve(name, bytes, files, sizes);
    };
  }
  if (settings.copy_on_write) staging.copy_on_write = saves.CopyOnWrite(ctx);
  // Replicas are checksummed after the call where their buffers can be protected meanwhile; a memory tier's agent
  // takes the staged bytes once staging ends, and a save in place returns once written: both checksum at the call.
  if (settings.plan.replica_checks && !settings.in_place && memory.agent == nullptr) {
    staging.replica_protection = saves.CopyOnWrite(ctx);
  }
  if (staging.copy_on_write != nullptr || staging.replica_protection != nullptr) {
    staging.note = [&ctx](const std::string& note) { ctx.Log(LogLevel::kInfo, note); };
  }
  std::unique_ptr<IncrementalBase> base;
  Status staged = Status::Ok();
  if (settings.incremental) {
    staging.record_digests = true;
    staging.replica_checks = settings.plan.replica_checks;
    if (!verdict.base.empty()) {
      Result<std::unique_ptr<IncrementalBase>> opened = IncrementalBase::Open(path, verdict.base);
      if (opened.ok()) {
        base = std::move(opened).value();
        staging.base = base.get();
      } else {
        staged = opened.status();
      }
    }
  }
  saves.AwaitBackgroundStaging();
  if (staged.ok()) staged = StageSave(state, cache.plan, staging, ctx.arena(), ctx.workers(), *ticket);
  // A rank that cannot stage still reports, so that every rank's request fails instead of waiting for it.
  if (!staged.ok() && ticket->failure.ok()) ticket->failure = staged;
  if (ticket->failure.ok()) ticket->progress.Enter(Phase::kWriting, ticket->bytes_written, ticket->bytes_to_write);
  const bool in_background = ticket->stage_later && ticket->failure.ok();
  if (in_background) {
    StartBackgroundStaging(ctx, saves, ticket);
  } else {
    ctx.stats().bytes_staged += ticket->bytes_staged;
    ticket->marks.staged = NowNs();
    ticket->marks.returned = ticket->marks.staged.load();
  }
  saves.executor().Enqueue(ticket);
  // A copy-on-write save's call ends here, its staging thread started and the save queued.
  if (in_background) ticket->marks.returned = NowNs();
  return Status::Ok();
}

// Rank 0's claim on the save's temporary directory. A memory-tier save is also refused when its storage path
// is already a checkpoint: the agent could never persist it there.
// Whether a checkpoint is at `storage_path` already. On object storage only a MANIFEST makes one: objects of a dead
// save may lie there too.
bool OnStorage(const std::string& storage_path) {
  if (io::IsObjectStorePath(storage_path)) return io::ObjectSize(io::JoinPath(storage_path, kManifestName)).ok();
  return io::PathExists(storage_path);
}

// CKPT_SAVE_COPY_ON_WRITE's limits: it saves the staging copy's wait, which a save in place does not make, and a
// memory tier's agent takes the staged bytes only once staging ends.
Status CheckCopyOnWrite(const SaveSettings& settings) {
  if (!settings.copy_on_write) return Status::Ok();
  if (settings.in_place) return InvalidArgument("CKPT_SAVE_COPY_ON_WRITE cannot be combined with CKPT_SAVE_IN_PLACE");
  if (settings.tier != Tier::kStorage) {
    return InvalidArgument("CKPT_SAVE_COPY_ON_WRITE saves to storage only (CKPT_TIER_STORAGE)");
  }
  return Status::Ok();
}

// CKPT_SAVE_INCREMENTAL's limits: its references name sibling directories of a file system.
Status CheckIncremental(const std::string& path, const SaveSettings& settings) {
  if (!settings.incremental) {
    if (!settings.base.empty()) return InvalidArgument("a base checkpoint is given without CKPT_SAVE_INCREMENTAL");
    return Status::Ok();
  }
  if (settings.tier != Tier::kStorage) {
    return InvalidArgument("CKPT_SAVE_INCREMENTAL saves to storage only (CKPT_TIER_STORAGE)");
  }
  if (io::IsObjectStorePath(path)) {
    return InvalidArgument("CKPT_SAVE_INCREMENTAL saves to a file system only, not to object storage (" + path + ")");
  }
  return Status::Ok();
}

// CKPT_SAVE_COMPRESS's limits: the workers lay compressed files out as they write them, through the arena.
Status CheckCompress(const std::string& path, const SaveSettings& settings) {
  if (!settings.compress) return Status::Ok();
  if (settings.in_place) return InvalidArgument("CKPT_SAVE_COMPRESS cannot be combined with CKPT_SAVE_IN_PLACE");
  if (settings.tier != Tier::kStorage) {
    return InvalidArgument("CKPT_SAVE_COMPRESS saves to storage only (CKPT_TIER_STORAGE)");
  }
  if (io::IsObjectStorePath(path)) {
    return InvalidArgument("CKPT_SAVE_COMPRESS saves to a file system only, not to object storage (" + path + ")");
  }
  return Status::Ok();
}

Result<io::Claim> ClaimFor(const std::string& path, const std::string& save_id, const MemoryTarget& memory) {
  if (memory.agent != nullptr && OnStorage(memory.storage_path)) {
    return AlreadyExists("'" + memory.storage_path + "' already exists on storage");
  }
  return ClaimSaveDirectory(path, save_id);
}

}  // namespace

Result<std::shared_ptr<SaveTicket>> StartSave(Context& ctx, RankSaves& saves, MemoryAttachment& attachment,
                                              const State& state, const std::string& raw_path,
                                              const SaveSettings& settings) {
  auto ticket = std::make_shared<SaveTicket>();
  ticket->marks.called = NowNs();
  std::string path = StripTrailingSlashes(raw_path);
  if (path.empty()) return InvalidArgument("the checkpoint path is empty");
  ticket->progress = ProgressReporter(settings.progress);
  ticket->progress.Enter(Phase::kPlanning, 0, 0);
  // A refusal agreed with the proposals, so that a rank refusing does not leave the others waiting for it.
  Status refused = CheckCopyOnWrite(settings);
  if (refused.ok()) refused = CheckIncremental(path, settings);
  if (refused.ok()) refused = CheckCompress(path, settings);
  MemoryTarget memory;
  if (settings.tier != Tier::kStorage && refused.ok()) {
    Result<std::shared_ptr<MemoryTier>> agent = attachment.Attach(ctx);
    if (!agent.ok()) {
      ticket->progress.Enter(Phase::kFailed, 0, 0);
      return agent.status();
    }
    memory.agent = agent.value();
    memory.storage_path = AbsoluteStoragePath(path);
    path = memory.agent->PathFor(memory.storage_path);
  }
  // Rank 0 claims the temporary directory before any rank can write into it, so that no cleanup ever takes this
  // save for a dead one.
  const std::string save_id = ctx.rank() == 0 ? NewSaveId() : std::string();
  Result<io::Claim> claim = !refused.ok()     ? Result<io::Claim>(refused)
                            : ctx.rank() == 0 ? ClaimFor(path, save_id, memory)
                                              : Result<io::Claim>(io::Claim());
  const bool claimed_here = ctx.rank() == 0 && claim.ok();
  const Status started = BeginSave(ctx, saves, attachment, state, path, save_id, claim.status(),
                                   claim.ok() ? std::move(claim).value() : io::Claim(), settings, memory, ticket);
  if (started.ok()) return ticket;
  // A save that never reached the executor leaves nothing behind: its ranks stop before writing anything.
  if (claimed_here) (void)io::RemoveTree(UncommittedSaveFiles(path, save_id));
  // It may have failed because another rank found the node's agent dead before this one asked it anything: this
  // rank then attaches afresh at its next save too, instead of failing that one on the dead connection.
  if (memory.agent) memory.agent->NoticeClosedConnection();
  ticket->progress.Enter(Phase::kFailed, 0, 0);
  return started;
}

}  // namespace ckpt::runtime

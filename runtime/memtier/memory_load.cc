#include "runtime/memtier/memory_load.h"

#include <algorithm>
#include <set>

#include "common/bytes.h"
#include "runtime/core/agreement.h"
#include "runtime/format/save_directory.h"
#include "runtime/memtier/memory_tier.h"

namespace ckpt::runtime {
namespace {

// What this rank's node holds of the checkpoint at storage path `path` in memory.
struct MemoryView {
  std::string dir;
  std::optional<coll::agent::MemoryCheckpoint> checkpoint;  // the agent's record; none: the node holds no copy
  bool whole = false;  // every data file the manifest lists is there (across nodes, each holds its own and replicas)
};

MemoryView ViewInMemory(Context& ctx, MemoryAttachment& memory, const std::string& path) {
  const MemoryAttachment::Holdings held = memory.HeldInMemory(ctx);
  const std::string storage_path = AbsoluteStoragePath(path);
  MemoryView view;
  for (const coll::agent::MemoryCheckpoint& checkpoint : held.checkpoints) {
    if (checkpoint.storage_path != storage_path) continue;
    view.dir = held.memory_dir + "/" + checkpoint.name;
    view.checkpoint = checkpoint;
    Result<std::vector<std::string>> missing = MissingDataFiles(view.dir, view.dir);
    view.whole = missing.ok() && missing->empty();
  }
  return view;
}

// Every rank's vote, a byte each, as rank 0 gathered them: 'w' (its node holds a whole copy), 'p' (a part: its own
// files and replicas, across nodes), 'n' (none). Only a byte per rank travels to rank 0, and a byte per rank back.
Result<std::string> GatherVotes(Context& ctx, const MemoryView& view, const char* step) {
  const std::string vote(1, view.whole ? 'w' : view.checkpoint ? 'p' : 'n');
  return DecideAtRoot(ctx.control(), step, Status::Ok(), vote, [](std::vector<std::string> votes) {
    std::string all;
    for (const std::string& v : votes) all += v.empty() ? 'n' : v[0];
    return Result<std::string>(std::move(all));
  });
}

// The ranks whose vote is not among `accepted`, listed for a message ("0, 2, 3").
std::string RanksVotingOtherThan(const std::string& votes, const std::string& accepted) {
  std::string ranks;
  for (size_t r = 0; r < votes.size(); ++r) {
    if (accepted.find(votes[r]) == std::string::npos) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  return ranks;
}

// The agent's record of the copy, as rank `holder` knows it, on every rank.
Result<coll::agent::MemoryCheckpoint> RecordOf(Context& ctx, const MemoryView& view, int holder) {
  const std::string mine =
      ctx.rank() == holder && view.checkpoint ? coll::agent::EncodeCheckpoints({*view.checkpoint}) : std::string();
  ASSIGN_OR_RETURN(const std::string encoded,
                   DecideAtRoot(ctx.control(), "load (tier, record)", Status::Ok(), mine,
                                [holder](std::vector<std::string> records) -> Result<std::string> {
                                  return std::move(records[static_cast<size_t>(holder)]);
                                }));
  ASSIGN_OR_RETURN(std::vector<coll::agent::MemoryCheckpoint> one, coll::agent::DecodeCheckpoints(encoded));
  if (one.size() != 1) return Corrupt("rank " + std::to_string(holder) + " sent no record of its memory copy");
  return std::move(one.front());
}

CopyChoice Storage(const std::string& path) { return CopyChoice{path, false, false, std::nullopt}; }

CopyChoice Memory(Context& ctx, const std::string& path, const MemoryView& view, bool partial) {
  ctx.Log(LogLevel::kInfo, "loading '" + path + "' from the memory tier ('" + view.dir + "'" +
                               (partial ? ", which holds part of its data files)" : ")"));
  return CopyChoice{view.dir, true, partial, view.checkpoint};
}

// A data file's name as the agents know it: inside the checkpoint's data/ directory.
std::string AgentFileName(const std::string& manifest_name) {
  const std::string prefix = "data/";
  return manifest_name.compare(0, prefix.size(), prefix) == 0 ? manifest_name.substr(prefix.size()) : manifest_name;
}

// Rank 0's decision in ShareHoldings, from each rank's node, leadership, the files its node holds (leaders) and the
// files it reads alone but its node lacks: for each node, the files its leader fetches, then the table of holders
// with those files counted in.
Result<std::string> DecideHoldings(const std::vector<std::string>& payloads, const Manifest& manifest,
                                   uint32_t node_count) {
  const uint32_t file_count = static_cast<uint32_t>(manifest.files.size());
  std::vector<FileHolders::Node> nodes(node_count);
  std::vector<std::set<uint32_t>> fetches(node_count);
  for (size_t rank = 0; rank < payloads.size(); ++rank) {
    ByteReader in(payloads[rank], "the holdings of rank " + std::to_string(rank));
    uint32_t node = 0;
    uint8_t leader = 0;
    std::vector<uint32_t> held, missing;
    RETURN_IF_ERROR(in.U32(&node));
    RETURN_IF_ERROR(in.U8(&leader));
    RETURN_IF_ERROR(in.U32s(&held, file_count));
    RETURN_IF_ERROR(in.U32s(&missing, file_count));
    RETURN_IF_ERROR(in.ExpectDone());
    if (node >= node_count) {
      return Corrupt("rank " + std::to_string(rank) + " names node " + std::to_string(node) + " of " +
                     std::to_string(node_count));
    }
    nodes[node].ranks.push_back(static_cast<int>(rank));
    if (leader != 0) nodes[node].files = std::move(held);
    fetches[node].insert(missing.begin(), missing.end());
  }
  ASSIGN_OR_RETURN(const FileHolders held, FileHolders::Make(nodes, static_cast<int>(payloads.size()), file_count));
  const std::vector<uint32_t> unheld = held.Unheld();
  if (!unheld.empty()) {
    std::string named;
    for (size_t i = 0; i < unheld.size() && i < 4; ++i) {
      named += (i ? ", '" : "'") + manifest.files[unheld[i]].name + "'";
    }
    if (unheld.size() > 4) named += " and " + std::to_string(unheld.size() - 4) + " more";
    return NotFound("no node holds " + std::to_string(unheld.size()) + " of the " + std::to_string(file_count) +
                    " data files in memory (" + named + ")");
  }
  ByteWriter out;
  for (uint32_t n = 0; n < node_count; ++n) {
    out.U32s(std::vector<uint32_t>(fetches[n].begin(), fetches[n].end()));
    nodes[n].files.insert(nodes[n].files.end(), fetches[n].begin(), fetches[n].end());
  }
  ASSIGN_OR_RETURN(const FileHolders after,
                   FileHolders::Make(std::move(nodes), static_cast<int>(payloads.size()), file_count));
  out.Bytes(after.Encode());
  return out.Take();
}

}  // namespace

Result<CopyChoice> ChooseCopy(Context& ctx, MemoryAttachment& memory, const std::string& path) {
  if (!coll::agent::JobIdFromEnvironment().ok()) return Storage(path);
  MemoryView view = ViewInMemory(ctx, memory, path);
  ASSIGN_OR_RETURN(std::string votes, GatherVotes(ctx, view, "load (tier)"));
  if (votes.find_first_not_of('n') == std::string::npos) return Storage(path);
  if (votes.find_first_not_of('w') == std::string::npos) return Memory(ctx, path, view, false);
  const int holder = static_cast<int>(votes.find_first_not_of('n'));
  ASSIGN_OR_RETURN(const coll::agent::MemoryCheckpoint held, RecordOf(ctx, view, holder));
  // Collective: the agents of every node run and know one another (a replaced node's is started here).
  Result<std::shared_ptr<MemoryTier>> attached = memory.Attach(ctx);
  if (!attached.ok()) {
    ctx.Log(LogLevel::kWarning, "loading '" + path + "' from storage: the memory tier: " + attached.status().message());
    return Storage(path);
  }
  // With a data plane, a node needs only the MANIFEST; without one, every rank reads all it needs from its own node.
  const bool partial = ctx.transport() != nullptr;
  if (memory.nodes().leader && (partial ? !view.checkpoint.has_value() : !view.whole)) {
    const std::vector<std::string> files = partial ? std::vector<std::string>{"MANIFEST"} : std::vector<std::string>{};
    const Status fetched = (*attached)->Fetch(held, files, ctx.timeout());
    if (!fetched.ok()) ctx.Log(LogLevel::kWarning, "the memory tier: " + fetched.message());
  }
  // Every node's fetch is over before any rank looks at its node's copy again.
  RETURN_IF_ERROR(Agree(ctx.control(), "load (tier, fetched)", Status::Ok()));
  view = ViewInMemory(ctx, memory, path);
  ASSIGN_OR_RETURN(votes, GatherVotes(ctx, view, "load (tier, held)"));
  if (votes.find_first_not_of('w') == std::string::npos) return Memory(ctx, path, view, false);
  if (partial && votes.find('n') == std::string::npos) return Memory(ctx, path, view, true);
  if (ctx.rank() == 0) {
    ctx.Log(LogLevel::kWarning, "loading '" + path + "' from storage: the nodes of ranks " +
                                    RanksVotingOtherThan(votes, partial ? "wp" : "w") +
                                    (partial ? " hold no memory copy" : " could not make their memory copy whole"));
  }
  return Storage(path);
}

Result<std::shared_ptr<const FileHolders>> ShareHoldings(Context& ctx, MemoryAttachment& memory,
                                                         const CopyChoice& choice, const Manifest* manifest,
                                                         const Status& opened,
                                                         const std::vector<uint32_t>& read_alone) {
  ByteWriter payload;
  if (manifest != nullptr) {
    const std::vector<bool> here = HeldDataFiles(*manifest, choice.dir);
    std::vector<uint32_t> held, missing;
    for (uint32_t i = 0; i < here.size(); ++i) {
      if (here[i]) held.push_back(i);
    }
    for (uint32_t file : read_alone) {
      if (file < here.size() && !here[file]) missing.push_back(file);
    }
    payload.U32(memory.nodes().node_index);
    payload.U8(memory.nodes().leader ? 1 : 0);
    payload.U32s(memory.nodes().leader ? held : std::vector<uint32_t>{});
    payload.U32s(missing);
  }
  const uint32_t node_count = memory.nodes().node_count;
  ASSIGN_OR_RETURN(const std::string decided, DecideAtRoot(ctx.control(), "load (tier, holdings)", opened,
                                                           payload.data(), [&](std::vector<std::string> payloads) {
                                                             return DecideHoldings(payloads, *manifest, node_count);
                                                           }));
  ByteReader in(decided, "the holdings rank 0 decided");
  std::vector<uint32_t> fetch;
  for (uint32_t n = 0; n < node_count; ++n) {
    std::vector<uint32_t> files;
    RETURN_IF_ERROR(in.U32s(&files, static_cast<uint32_t>(manifest->files.size())));
    if (n == memory.nodes().node_index) fetch = std::move(files);
  }
  std::string table;
  RETURN_IF_ERROR(in.Bytes(&table));
  RETURN_IF_ERROR(in.ExpectDone());
  Status fetched = Status::Ok();
  if (!fetch.empty() && memory.nodes().leader) {
    std::vector<std::string> names;
    for (uint32_t file : fetch) names.push_back(AgentFileName(manifest->files[file].name));
    Result<std::shared_ptr<MemoryTier>> attached = memory.Attach(ctx);
    fetched = attached.ok() ? (*attached)->Fetch(*choice.record, names, ctx.timeout()) : attached.status();
  }
  RETURN_IF_ERROR(Agree(ctx.control(), "load (tier, files fetched)", fetched));
  ASSIGN_OR_RETURN(FileHolders holders,
                   FileHolders::Decode(table, ctx.world_size(), static_cast<uint32_t>(manifest->files.size())));
  return std::make_shared<const FileHolders>(std::move(holders));
}

Status ReassignCopy(Context& ctx, MemoryAttachment& memory, const CopyChoice& choice, const Manifest& manifest,
                    const FileHolders* holders) {
  Result<std::shared_ptr<MemoryTier>> attached = memory.Attach(ctx);
  if (!attached.ok()) {
    ctx.Log(LogLevel::kWarning, "the memory tier: no agent learns how this job persists '" + choice.dir +
                                    "': " + attached.status().message());
    return Status::Ok();
  }
  const MemoryNodes& nodes = memory.nodes();
  coll::agent::MemoryCheckpoint layout;
  if (nodes.node_count > 1) {
    ASSIGN_OR_RETURN(layout.save_id,
                     DecideAtRoot(ctx.control(), "load (tier, reassign)", Status::Ok(), std::string(),
                                  [](std::vector<std::string>) { return Result<std::string>(NewSaveId()); }));
  }
  const std::optional<coll::agent::MemoryCheckpoint>& record = choice.record;
  if (!nodes.leader || !record || record->persisted) return Status::Ok();
  if (nodes.node_count == 1 && record->node_count == 1) return Status::Ok();  // saved on this one node
  layout.name = record->name;
  layout.node_index = nodes.node_index;
  layout.node_count = nodes.node_count;
  for (uint32_t file = 0; file < manifest.files.size(); ++file) {
    uint32_t owner = file % nodes.node_count;  // every node holds the whole copy
    if (holders != nullptr) {
      const std::vector<uint32_t>& holding = holders->NodesHolding(file);
      if (holding.empty()) continue;  // ShareHoldings refuses such a table: no agent can write the file
      owner = holding[file % holding.size()];
    }
    if (owner == nodes.node_index) layout.own_files.push_back(AgentFileName(manifest.files[file].name));
  }
  const Status reassigned = (*attached)->Reassign(layout);
  if (!reassigned.ok()) {
    ctx.Log(LogLevel::kWarning,
            "the memory tier: this node's agent will not persist '" + record->name +
                "' for this job, so the agents cannot commit it to storage should the trainers die before they save "
                "again: " +
                reassigned.message());
  }
  return Status::Ok();
}

}  // namespace ckpt::runtime

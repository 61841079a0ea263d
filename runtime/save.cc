#include "runtime/save.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <set>

#include "common/bytes.h"
#include "io/file_io.h"
#include "runtime/agreement.h"
#include "runtime/dtype.h"
#include "runtime/manifest.h"
#include "runtime/save_files.h"

namespace ckpt::runtime {
namespace {

// What each rank proposes before anything is written: its shards, the path it was given, and (rank 0) the
// identity of this save and whether the target already exists.
struct Proposal {
  std::string path;
  std::string save_id;
  RankDescriptor descriptor;
};

std::string EncodeProposal(const Proposal& p) {
  ByteWriter out;
  out.Bytes(p.path);
  out.Bytes(p.save_id);
  out.Bytes(EncodeRankDescriptor(p.descriptor));
  return out.Take();
}

Result<Proposal> DecodeProposal(std::string_view bytes, int rank) {
  ByteReader in(bytes, "save proposal from rank " + std::to_string(rank));
  Proposal p;
  std::string descriptor;
  RETURN_IF_ERROR(in.Bytes(&p.path));
  RETURN_IF_ERROR(in.Bytes(&p.save_id));
  RETURN_IF_ERROR(in.Bytes(&descriptor));
  RETURN_IF_ERROR(in.ExpectDone());
  ASSIGN_OR_RETURN(p.descriptor, DecodeRankDescriptor(descriptor, rank));
  return p;
}

std::string NewSaveId() {
  std::random_device entropy;
  const uint64_t id = (static_cast<uint64_t>(entropy()) << 32) ^ entropy() ^
                      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(id));
  return text;
}

std::string ParentDirectory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// Every rank must name the same directory, and rank 0 checks it is free, before anything is planned.
Status CheckTarget(const std::vector<Proposal>& proposals) {
  for (size_t r = 1; r < proposals.size(); ++r) {
    if (proposals[r].path != proposals[0].path) {
      return Mismatch("ranks save to different paths: rank 0 to '" + proposals[0].path + "', rank " +
                      std::to_string(r) + " to '" + proposals[r].path + "'");
    }
  }
  return Status::Ok();
}

// The shard of this rank that holds `box` of `key`, and where that box's buffer starts.
struct SourceBuffer {
  const char* data;
  Box box;
  size_t element_size;
};

Result<SourceBuffer> FindSource(const State& state, const WriteItem& item) {
  for (const TensorShard& shard : state.tensors()) {
    if (shard.key != item.key) continue;
    const size_t element_size = DTypeSize(shard.dtype);
    for (const FlatPiece& piece : shard.pieces) {
      if (Contains(piece.box, item.box)) {
        return SourceBuffer{static_cast<const char*>(shard.data) + piece.range_offset * element_size, piece.box,
                            element_size};
      }
    }
  }
  return Internal("the plan asks this rank to write tensor '" + item.key + "' box " + item.box.ToString() +
                  ", which it does not hold");
}

Result<const ObjectShard*> FindObject(const State& state, const WriteItem& item) {
  for (const ObjectShard& object : state.objects()) {
    if (object.key == item.key && object.index == item.index) return &object;
  }
  return Internal("the plan asks this rank to write object '" + item.key + "', which it does not hold");
}

// Writes this rank's share of the plan (and, on rank 0, the large common entries) into its data file.
Result<WriterReport> WriteShare(const Context& ctx, const State& state, const SavePlan& plan,
                                const std::string& tmp_dir, const SaveSettings& settings) {
  RETURN_IF_ERROR(io::MakeDirectories(io::JoinPath(tmp_dir, kDataDirName)));
  DataFileWriter writer(tmp_dir, std::string(kDataDirName) + "/" + std::to_string(ctx.rank()) + "-0.bin",
                        settings.block_size);
  WriterReport report;
  for (const WriteItem& item : plan.items) {
    if (item.writer != ctx.rank()) continue;
    WrittenItem written{item.is_object, item.key, item.box, item.index, {}};
    if (item.is_object) {
      ASSIGN_OR_RETURN(const ObjectShard* object, FindObject(state, item));
      ASSIGN_OR_RETURN(written.bytes, writer.Append(object->data, object->size));
    } else {
      ASSIGN_OR_RETURN(SourceBuffer source, FindSource(state, item));
      ASSIGN_OR_RETURN(written.bytes, writer.AppendRegion(source.data, source.box, item.box, source.element_size));
    }
    report.items.push_back(std::move(written));
  }
  if (ctx.rank() == 0) {
    for (const auto& [key, bytes] : state.common()) {
      if (bytes.size() <= settings.inline_common_max) continue;
      CommonRecord record;
      record.key = key;
      record.is_inline = false;
      ASSIGN_OR_RETURN(record.stored, writer.Append(bytes.data(), bytes.size()));
      report.stored_common.push_back(std::move(record));
    }
  }
  if (writer.created()) report.file_name = writer.relative_name();
  ASSIGN_OR_RETURN(report.file_size, writer.Finish());
  return report;
}

// Rank 0: the manifest of the checkpoint, from the agreed descriptors and every writer's report.
Manifest BuildManifest(const Context& ctx, const State& state, const std::vector<Proposal>& proposals,
                       const std::vector<WriterReport>& reports, const SaveSettings& settings) {
  Manifest m;
  m.library_version = CKPT_LIBRARY_VERSION;
  m.checkpoint_id = proposals[0].save_id;
  m.world_size = static_cast<uint32_t>(ctx.world_size());
  m.metadata = settings.metadata;

  std::set<std::string> nodes;
  std::map<std::string, TensorRecord> tensors;
  std::map<std::string, ObjectRecord> objects;
  for (const Proposal& p : proposals) {
    nodes.insert(p.descriptor.node);
    for (const TensorShardDesc& t : p.descriptor.tensors) {
      tensors.emplace(t.key, TensorRecord{t.key, t.dtype, t.global_shape, {}});
    }
    for (const ObjectShardDesc& o : p.descriptor.objects) {
      objects.emplace(o.key, ObjectRecord{o.key, o.grid_shape, {}});
    }
  }
  m.node_count = static_cast<uint32_t>(nodes.size());

  for (const WriterReport& report : reports) {
    if (report.file_name.empty()) continue;
    const auto file_index = static_cast<uint32_t>(m.files.size());
    m.files.push_back(DataFileRecord{report.file_name, report.file_size});
    for (WrittenItem item : report.items) {
      item.bytes.file_index = file_index;
      if (item.is_object) {
        objects[item.key].pieces.push_back(ObjectPieceRecord{item.index, std::move(item.bytes)});
      } else {
        tensors[item.key].chunks.push_back(ChunkRecord{item.box, std::move(item.bytes)});
      }
    }
    for (CommonRecord c : report.stored_common) {
      c.stored.file_index = file_index;
      m.common.push_back(std::move(c));
    }
  }
  for (const auto& [key, bytes] : state.common()) {
    if (bytes.size() <= settings.inline_common_max) m.common.push_back(CommonRecord{key, true, bytes, {}});
  }
  std::sort(m.common.begin(), m.common.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  for (auto& [key, t] : tensors) {
    std::sort(t.chunks.begin(), t.chunks.end(), [](const auto& a, const auto& b) { return a.box < b.box; });
    m.tensors.push_back(std::move(t));
  }
  for (auto& [key, o] : objects) {
    std::sort(o.pieces.begin(), o.pieces.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
    m.objects.push_back(std::move(o));
  }
  return m;
}

// Rank 0: write the manifest into the temporary directory, make everything durable, and rename it into place.
Status Commit(const Manifest& manifest, const std::string& tmp_dir, const std::string& path) {
  RETURN_IF_ERROR(WriteManifest(tmp_dir, manifest));
  RETURN_IF_ERROR(io::SyncDirectory(io::JoinPath(tmp_dir, kDataDirName)));
  RETURN_IF_ERROR(io::SyncDirectory(tmp_dir));
  RETURN_IF_ERROR(io::RenameNoReplace(tmp_dir, path));
  return io::SyncDirectory(ParentDirectory(path));
}

// Rank 0: decode every writer's report, then commit.
Status CommitReports(const Context& ctx, const State& state, const std::vector<Proposal>& proposals,
                     const std::vector<std::string>& gathered, const std::string& tmp_dir, const std::string& path,
                     const SaveSettings& settings) {
  std::vector<WriterReport> reports;
  for (size_t r = 0; r < gathered.size(); ++r) {
    ASSIGN_OR_RETURN(WriterReport report, DecodeWriterReport(gathered[r], static_cast<int>(r)));
    reports.push_back(std::move(report));
  }
  return Commit(BuildManifest(ctx, state, proposals, reports, settings), tmp_dir, path);
}

Result<std::vector<Proposal>> ExchangeProposals(Context& ctx, const State& state, const std::string& path) {
  Proposal mine{path, ctx.rank() == 0 ? NewSaveId() : std::string(), state.Describe(ctx.rank(), ctx.node_name())};
  Status local;
  if (ctx.rank() == 0 && io::PathExists(path)) {
    local = AlreadyExists("'" + path + "' already exists; a committed checkpoint is never overwritten");
  }
  ASSIGN_OR_RETURN(std::vector<std::string> gathered, AgreeAndGather(ctx.control(), local, EncodeProposal(mine)));
  std::vector<Proposal> proposals;
  for (size_t r = 0; r < gathered.size(); ++r) {
    ASSIGN_OR_RETURN(Proposal p, DecodeProposal(gathered[r], static_cast<int>(r)));
    proposals.push_back(std::move(p));
  }
  return proposals;
}

}  // namespace

Status Save(Context& ctx, const State& state, const std::string& raw_path, const SaveSettings& settings) {
  const std::string path = StripTrailingSlashes(raw_path);
  if (path.empty()) return InvalidArgument("the checkpoint path is empty");

  ASSIGN_OR_RETURN(std::vector<Proposal> proposals, ExchangeProposals(ctx, state, path));
  std::vector<RankDescriptor> descriptors;
  for (const Proposal& p : proposals) descriptors.push_back(p.descriptor);
  Status verdict = CheckTarget(proposals);
  if (verdict.ok()) verdict = ValidateCoverage(descriptors, ctx.rank());
  RETURN_IF_ERROR(Agree(ctx.control(), verdict));

  const SavePlan plan = PlanSave(descriptors, settings.plan);
  const std::string tmp_dir = path + ".tmp-" + proposals[0].save_id;
  Result<WriterReport> mine = WriteShare(ctx, state, plan, tmp_dir, settings);
  auto gathered = AgreeAndGather(ctx.control(), mine.status(), mine.ok() ? EncodeWriterReport(*mine) : "");

  const std::string context = "saving '" + path + "'";
  if (!gathered.ok()) {
    // Every rank holds the same error already; rank 0 removes what was written.
    if (ctx.rank() == 0) (void)io::RemoveTree(tmp_dir);
    return gathered.status().WithContext(context);
  }
  Status committed;
  if (ctx.rank() == 0) {
    committed = CommitReports(ctx, state, proposals, *gathered, tmp_dir, path, settings);
    if (!committed.ok()) (void)io::RemoveTree(tmp_dir);
  }
  return Agree(ctx.control(), committed).WithContext(context);
}

}  // namespace ckpt::runtime

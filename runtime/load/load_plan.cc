#include "runtime/load/load_plan.h"

#include <algorithm>
#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "common/bytes.h"
#include "io/checksum.h"
#include "runtime/core/box_index.h"
#include "runtime/core/dtype.h"

namespace ckpt::runtime {
namespace {

constexpr uint32_t kMaxBoxesPerRequest = 1u << 24;
// Smallest encoding of one box (a scalar's): tensor index and two empty dimension lists. Bounds the box count by
// what is left of the message before anything is allocated.
constexpr size_t kMinBoxBytes = 4 + 1 + 1;

std::string ShapeToString(const Shape& shape) {
  std::string out = "[";
  for (size_t d = 0; d < shape.size(); ++d) out += (d > 0 ? ", " : "") + std::to_string(shape[d]);
  return out + "]";
}

// Why `requested` is not a box of one of the manifest's tensors; empty if it is.
std::string BoxProblem(const RequestedBox& requested, const Manifest& manifest) {
  if (requested.tensor >= manifest.tensors.size()) {
    return "tensor index " + std::to_string(requested.tensor) + " is out of range (the checkpoint has " +
           std::to_string(manifest.tensors.size()) + " tensors)";
  }
  const TensorRecord& tensor = manifest.tensors[requested.tensor];
  const Box& box = requested.box;
  if (box.offset.size() != tensor.shape.size() || box.shape.size() != tensor.shape.size()) {
    return "box of tensor '" + tensor.key + "' has offset and shape of " + std::to_string(box.offset.size()) + " and " +
           std::to_string(box.shape.size()) + " dimensions, the tensor " + std::to_string(tensor.shape.size());
  }
  if (!Contains(WholeBox(tensor.shape), box)) {
    return "box " + box.ToString() + " lies outside tensor '" + tensor.key + "' of shape " +
           ShapeToString(tensor.shape);
  }
  return {};
}

// The planner's arithmetic relies on these; DecodeManifest guarantees them, a hand-built manifest may not.
Status CheckStoredTensor(const TensorRecord& tensor) {
  const uint64_t element_size = DTypeSize(tensor.dtype);
  const std::string name = "tensor '" + tensor.key + "'";
  if (element_size == 0) return Corrupt(name + ": dtype " + std::to_string(tensor.dtype) + " is not a dtype");
  for (const ChunkRecord& chunk : tensor.chunks) {
    const std::string what = name + " chunk " + chunk.box.ToString();
    if (chunk.box.ndim() != tensor.shape.size() || chunk.box.offset.size() != tensor.shape.size()) {
      return Corrupt(what + " has " + std::to_string(chunk.box.ndim()) + " dimensions, the tensor " +
                     std::to_string(tensor.shape.size()));
    }
    if (!VolumeFits(chunk.box.shape, element_size) || chunk.bytes.byte_length != chunk.box.volume() * element_size) {
      return Corrupt(what + " stores " + std::to_string(chunk.bytes.byte_length) + " bytes, not its volume times " +
                     std::to_string(element_size));
    }
    if (chunk.bytes.block_size == 0) return Corrupt(what + " has block size 0");
  }
  return Status::Ok();
}

void EncodeDims(const Shape& dims, ByteWriter* w) {
  w->U8(static_cast<uint8_t>(dims.size()));
  for (uint64_t extent : dims) w->U64(extent);
}

Status DecodeDims(ByteReader* r, const std::string& what, Shape* dims) {
  uint8_t ndim = 0;
  RETURN_IF_ERROR(r->U8(&ndim));
  if (ndim > kMaxDims) {
    return Corrupt(what + " has " + std::to_string(ndim) + " dimensions, at most " + std::to_string(kMaxDims));
  }
  dims->resize(ndim);
  for (uint64_t& extent : *dims) RETURN_IF_ERROR(r->U64(&extent));
  return Status::Ok();
}

Status DecodeBox(ByteReader* r, const std::string& source, const Manifest& manifest, RequestedBox* out) {
  RETURN_IF_ERROR(r->U32(&out->tensor));
  RETURN_IF_ERROR(DecodeDims(r, source + ": box offset", &out->box.offset));
  RETURN_IF_ERROR(DecodeDims(r, source + ": box shape", &out->box.shape));
  const std::string problem = BoxProblem(*out, manifest);
  return problem.empty() ? Status::Ok() : Corrupt(source + ": " + problem);
}

// The requests indexed by rank, after checking that their ranks are 0..n-1 once each and their boxes valid.
Result<std::vector<const LoadRequest*>> RequestsByRank(const Manifest& manifest,
                                                       const std::vector<LoadRequest>& requests) {
  const int world = static_cast<int>(requests.size());
  std::vector<const LoadRequest*> by_rank(world, nullptr);
  for (const LoadRequest& request : requests) {
    const std::string source = "load request of rank " + std::to_string(request.rank);
    if (request.rank < 0 || request.rank >= world) {
      return InvalidArgument(source + ": rank outside the world of " + std::to_string(world) + " ranks");
    }
    if (by_rank[request.rank] != nullptr) return InvalidArgument(source + ": two requests claim this rank");
    by_rank[request.rank] = &request;
    for (size_t i = 0; i < request.boxes.size(); ++i) {
      const std::string problem = BoxProblem(request.boxes[i], manifest);
      if (!problem.empty()) return InvalidArgument(source + ", box " + std::to_string(i) + ": " + problem);
    }
  }
  return by_rank;
}

// For one tensor: each distinct non-empty requested box, with the ranks (sorted, distinct) that asked for it.
// Replicas of a box are intersected with the chunks once, whatever the number of ranks holding them.
using WantedBoxes = std::map<Box, std::vector<int>>;

std::vector<WantedBoxes> CollectWanted(size_t tensor_count, const std::vector<const LoadRequest*>& by_rank) {
  std::vector<WantedBoxes> wanted(tensor_count);
  for (const LoadRequest* request : by_rank) {
    for (const RequestedBox& requested : request->boxes) {
      if (requested.box.empty()) continue;
      std::vector<int>& ranks = wanted[requested.tensor][requested.box];
      if (ranks.empty() || ranks.back() != request->rank) ranks.push_back(request->rank);
    }
  }
  return wanted;
}

// A region of one chunk and the ranks that need it (pointing into the WantedBoxes, which outlive planning).
// `carried`: the region lies in a block that a neighbouring group reads (GroupByBlocks): its ranks get it from that
// read's reader, but do not become candidates to read the rest of it.
struct Need {
  Box region;
  const std::vector<int>* ranks;
  bool carried = false;
};

// One read before its reader is chosen, with what it serves and the ranks that may read it.
struct Candidate {
  ChunkRead read;
  std::vector<Need> needs;
  std::vector<int> needers;  // sorted, distinct
};

// [begin, end) bytes of the row-major buffer of `chunk_box` that `region` (inside it) spans.
std::pair<uint64_t, uint64_t> ByteSpan(const Box& chunk_box, const Box& region, uint64_t element_size) {
  uint64_t first = 0;
  uint64_t last = 0;
  for (size_t d = 0; d < chunk_box.ndim(); ++d) {
    first = first * chunk_box.shape[d] + (region.offset[d] - chunk_box.offset[d]);
    last = last * chunk_box.shape[d] + (region.offset[d] + region.shape[d] - 1 - chunk_box.offset[d]);
  }
  return {first * element_size, (last + 1) * element_size};
}

// The ranks of `needs`, sorted and distinct; those of carried needs only if `carried`.
std::vector<int> RanksOf(const std::vector<Need>& needs, bool carried) {
  std::vector<int> ranks;
  for (const Need& need : needs) {
    if (carried || !need.carried) ranks.insert(ranks.end(), need.ranks->begin(), need.ranks->end());
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

// The read of the blocks that hold every region of `needs` (not empty), and the ranks that may read it. A read of
// one block may go to any rank that needs a byte of it; a longer one only to the ranks of its own needs, so that a
// rank carried a sliver of its last block (GroupByBlocks) is not made to read the rest and send it all.
Candidate MakeCandidate(uint32_t tensor, uint32_t chunk_index, const ChunkRecord& chunk, uint64_t element_size,
                        std::vector<Need> needs) {
  uint64_t begin = UINT64_MAX;
  uint64_t end = 0;
  for (const Need& need : needs) {
    const auto [need_begin, need_end] = ByteSpan(chunk.box, need.region, element_size);
    begin = std::min(begin, need_begin);
    end = std::max(end, need_end);
  }
  const uint64_t block_size = chunk.bytes.block_size;
  const uint64_t first_block = begin / block_size;
  const uint64_t block_count = io::BlockCount(end, block_size) - first_block;
  std::vector<int> needers = RanksOf(needs, block_count == 1);
  if (needers.empty()) needers = RanksOf(needs, true);  // not met: a longer read has needs of its own to end in it
  const uint64_t bytes = std::min(chunk.bytes.byte_length - first_block * block_size, block_count * block_size);
  return Candidate{ChunkRead{tensor, chunk_index, 0, first_block, block_count, bytes}, std::move(needs),
                   std::move(needers)};
}

// Into how many block ranges to cut the read of `whole`: one unless it is large, needed by several ranks, and
// element boundaries fall on block boundaries.
uint64_t PieceCount(const Candidate& whole, uint64_t block_size, uint64_t element_size,
                    const LoadPlanOptions& options) {
  if (whole.needers.size() < 2 || options.split_bytes == 0 || whole.read.bytes / 2 < options.split_bytes ||
      block_size % element_size != 0) {
    return 1;
  }
  return std::min<uint64_t>({whole.needers.size(), whole.read.bytes / options.split_bytes, whole.read.block_count});
}

// The parts of `needs` whose elements lie in the row-major element range [begin, end) of `chunk_box`.
std::vector<Need> ClipNeeds(const std::vector<Need>& needs, const Box& chunk_box, uint64_t begin, uint64_t end) {
  std::vector<Need> clipped;
  for (const FlatPiece& flat : DecomposeFlatRange(chunk_box, begin, end)) {
    for (const Need& need : needs) {
      if (std::optional<Box> part = Intersect(flat.box, need.region)) {
        clipped.push_back(Need{*part, need.ranks, need.carried});
      }
    }
  }
  return clipped;
}

// A need with the block range its span covers in its chunk.
struct Spanned {
  uint64_t first_block;
  uint64_t end_block;
  Need need;
};

// Appends to `out` the parts of `need` among the row-major elements [begin, end) of its chunk, marked `carried`.
void AppendClipped(const Need& need, const Box& chunk_box, uint64_t begin, uint64_t end, bool carried,
                   std::vector<Need>* out) {
  for (Need& part : ClipNeeds({need}, chunk_box, begin, end)) {
    part.carried = carried;
    out->push_back(std::move(part));
  }
}

// Adds `group`, whose first block is the last block of `before` (and of every group so far), to the groups. That
// block is read once, by `before`: the parts inside it of the needs that start in it are carried by `before` (their
// ranks get them from its reader), and what is left of the group, if anything, reads from the next block on. Where
// the block size is not a multiple of the element size, an element may straddle the block's end: the group joins
// `before` instead.
void SplitSharedBlock(const ChunkRecord& chunk, uint64_t element_size, std::vector<Spanned> group,
                      std::vector<std::vector<Need>>* groups) {
  const uint64_t block_size = chunk.bytes.block_size;
  const uint64_t shared = group.front().first_block;
  if (block_size % element_size != 0) {
    for (Spanned& s : group) groups->back().push_back(std::move(s.need));
    return;
  }
  const uint64_t begin = shared * block_size / element_size;
  const uint64_t end = std::min(chunk.bytes.byte_length, (shared + 1) * block_size) / element_size;
  std::vector<Need> rest;
  for (Spanned& s : group) {
    if (s.first_block != shared) {
      rest.push_back(std::move(s.need));
      continue;
    }
    AppendClipped(s.need, chunk.box, begin, end, true, &groups->back());
    AppendClipped(s.need, chunk.box, end, chunk.box.volume(), false, &rest);
  }
  if (!rest.empty()) groups->push_back(std::move(rest));
}

// The needs of a chunk in groups whose block ranges are disjoint: every block is read once, whatever the size of the
// pieces (issue #14: pieces smaller than a block that shared it landed in separate groups, each reading it, so a
// matrix loaded by five ranks split by columns was read five times). Needs whose block spans overlap by more than one
// block (replicas of one box, column slices whose spans interleave) form one group: read once, then exchanged. A need
// starting in the last block of the groups before it starts a group of its own, so that a rank that alone needs a
// region still reads it itself but for that block, which SplitSharedBlock leaves to the group before.
std::vector<std::vector<Need>> GroupByBlocks(const ChunkRecord& chunk, uint64_t element_size, std::vector<Need> needs) {
  const uint64_t block_size = chunk.bytes.block_size;
  std::vector<Spanned> spanned;
  for (Need& need : needs) {
    const auto [begin, end] = ByteSpan(chunk.box, need.region, element_size);
    spanned.push_back(Spanned{begin / block_size, io::BlockCount(end, block_size), std::move(need)});
  }
  std::stable_sort(spanned.begin(), spanned.end(),
                   [](const Spanned& a, const Spanned& b) { return a.first_block < b.first_block; });
  std::vector<std::vector<Need>> groups;
  uint64_t groups_end = 0;  // the end block of every group so far
  for (size_t i = 0; i < spanned.size();) {
    // The next group: the needs that start before the last block of what it spans so far.
    std::vector<Spanned> group;
    uint64_t end_block = 0;
    for (; i < spanned.size() && (group.empty() || spanned[i].first_block + 1 < end_block); ++i) {
      end_block = std::max(end_block, spanned[i].end_block);
      group.push_back(std::move(spanned[i]));
    }
    const bool shares_a_block = group.front().first_block < groups_end;
    groups_end = std::max(groups_end, end_block);
    if (shares_a_block) {
      SplitSharedBlock(chunk, element_size, std::move(group), &groups);
      continue;
    }
    groups.emplace_back();
    for (Spanned& s : group) groups.back().push_back(std::move(s.need));
  }
  return groups;
}

// The needs of a group read by more than `fan_out` ranks, as one group per fan_out ranks of them (consecutive in
// rank order, as even in size as can be), each read apart: a region that thousands of ranks need (a replicated
// tensor) is read once per group, and no reader sends it to, nor any consumer hears from, more than that many ranks.
// The rank lists the groups' needs point to are kept in `group_ranks`.
std::vector<std::vector<Need>> SplitByFanOut(std::vector<Need> needs, uint32_t fan_out,
                                             std::deque<std::vector<int>>* group_ranks) {
  const std::vector<int> consumers = RanksOf(needs, true);
  if (fan_out == 0 || consumers.size() <= fan_out) return {std::move(needs)};
  const size_t groups = (consumers.size() + fan_out - 1) / fan_out;
  std::vector<int> starts(groups);  // each group's first rank
  for (size_t g = 0; g < groups; ++g) starts[g] = consumers[g * consumers.size() / groups];
  std::vector<std::vector<Need>> split(groups);
  for (const Need& need : needs) {
    // The need's ranks, sorted, in runs of one group each.
    for (auto run = need.ranks->begin(); run != need.ranks->end();) {
      const size_t g = std::upper_bound(starts.begin(), starts.end(), *run) - starts.begin() - 1;
      const auto end = g + 1 < groups ? std::lower_bound(run, need.ranks->end(), starts[g + 1]) : need.ranks->end();
      const bool whole = run == need.ranks->begin() && end == need.ranks->end();
      split[g].push_back(Need{need.region, whole ? need.ranks : &group_ranks->emplace_back(run, end), need.carried});
      run = end;
    }
  }
  return split;
}

// One candidate for the needs of a chunk, or one per block range when the chunk is cut so that several ranks
// share its reading. A block range holding nothing anyone needs is not read.
void AddChunkCandidates(uint32_t tensor, uint32_t chunk_index, const ChunkRecord& chunk, uint64_t element_size,
                        std::vector<Need> needs, const LoadPlanOptions& options, std::vector<Candidate>* out) {
  Candidate whole = MakeCandidate(tensor, chunk_index, chunk, element_size, std::move(needs));
  const uint64_t block_size = chunk.bytes.block_size;
  const uint64_t pieces = PieceCount(whole, block_size, element_size, options);
  if (pieces <= 1) {
    out->push_back(std::move(whole));
    return;
  }
  const uint64_t base = whole.read.block_count / pieces;
  const uint64_t longer = whole.read.block_count % pieces;
  uint64_t block = whole.read.first_block;
  for (uint64_t i = 0; i < pieces; ++i) {
    const uint64_t count = base + (i < longer ? 1 : 0);
    const uint64_t end_byte = std::min(chunk.bytes.byte_length, (block + count) * block_size);
    std::vector<Need> clipped =
        ClipNeeds(whole.needs, chunk.box, block * block_size / element_size, end_byte / element_size);
    block += count;
    if (!clipped.empty()) {
      out->push_back(MakeCandidate(tensor, chunk_index, chunk, element_size, std::move(clipped)));
    }
  }
}

Result<std::vector<Candidate>> CollectCandidates(const Manifest& manifest, const std::vector<WantedBoxes>& wanted,
                                                 const LoadPlanOptions& options,
                                                 std::deque<std::vector<int>>* group_ranks) {
  std::vector<Candidate> candidates;
  for (uint32_t t = 0; t < manifest.tensors.size(); ++t) {
    if (wanted[t].empty()) continue;
    const TensorRecord& tensor = manifest.tensors[t];
    RETURN_IF_ERROR(CheckStoredTensor(tensor));
    const uint64_t element_size = DTypeSize(tensor.dtype);
    std::vector<const WantedBoxes::value_type*> entries;
    std::vector<const Box*> boxes;
    for (const auto& entry : wanted[t]) {
      entries.push_back(&entry);
      boxes.push_back(&entry.first);
    }
    const BoxIndex index(boxes);
    std::vector<uint32_t> meeting;
    for (uint32_t c = 0; c < tensor.chunks.size(); ++c) {
      const ChunkRecord& chunk = tensor.chunks[c];
      index.FindMeeting(chunk.box, &meeting);
      std::vector<Need> needs;
      for (uint32_t position : meeting) {
        const auto& [box, ranks] = *entries[position];
        if (std::optional<Box> region = Intersect(chunk.box, box)) needs.push_back(Need{*region, &ranks});
      }
      for (std::vector<Need>& group : GroupByBlocks(chunk, element_size, std::move(needs))) {
        for (std::vector<Need>& fanned : SplitByFanOut(std::move(group), options.fan_out, group_ranks)) {
          AddChunkCandidates(t, c, chunk, element_size, std::move(fanned), options, &candidates);
        }
      }
    }
  }
  return candidates;
}

// Each rank's node as a number, numbered in the order of the node names: comparing numbers breaks ties as comparing
// names does, and the nodes' tallies are a vector rather than a map searched by name for every needing rank.
std::vector<uint32_t> NodeNumbers(const std::vector<const LoadRequest*>& by_rank) {
  std::vector<std::string_view> names;
  for (const LoadRequest* request : by_rank) names.push_back(request->node);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::vector<uint32_t> numbers;
  for (const LoadRequest* request : by_rank) {
    numbers.push_back(
        static_cast<uint32_t>(std::lower_bound(names.begin(), names.end(), request->node) - names.begin()));
  }
  return numbers;
}

// Each rank's node as the holders number it; ranks of nodes that hold nothing (never readers) after them.
std::vector<uint32_t> HolderNodeNumbers(const FileHolders& holders, size_t world) {
  std::vector<uint32_t> numbers;
  for (size_t rank = 0; rank < world; ++rank) {
    const int node = holders.NodeOf(static_cast<int>(rank));
    numbers.push_back(node >= 0 ? static_cast<uint32_t>(node) : static_cast<uint32_t>(holders.nodes().size()));
  }
  return numbers;
}

// The ranks that may read `candidate` under `holders`, into `eligible`: its needing ranks whose node holds its
// file, else every rank of a node that does.
Status HoldingReaders(const Manifest& manifest, const FileHolders& holders, const Candidate& candidate,
                      std::vector<int>* eligible) {
  const uint32_t file = manifest.tensors[candidate.read.tensor].chunks[candidate.read.chunk].bytes.file_index;
  eligible->clear();
  for (int rank : candidate.needers) {
    if (holders.Holds(rank, file)) eligible->push_back(rank);
  }
  if (!eligible->empty()) return Status::Ok();
  for (uint32_t node : holders.NodesHolding(file)) {
    const std::vector<int>& ranks = holders.nodes()[node].ranks;
    eligible->insert(eligible->end(), ranks.begin(), ranks.end());
  }
  if (eligible->empty()) {
    return NotFound("no node holds data file '" + manifest.files[file].name + "' (of tensor '" +
                    manifest.tensors[candidate.read.tensor].key + "') in memory");
  }
  return Status::Ok();
}

// Greedy balancing, largest reads first: the eligible ranks' least loaded node, then its least loaded rank; ties go
// to the first node and rank in their orders starting at `options.rotation`. The eligible ranks are the needing
// ones, or those HoldingReaders names.
Status ChooseReaders(const Manifest& manifest, const std::vector<const LoadRequest*>& by_rank,
                     const LoadPlanOptions& options, std::vector<Candidate>* candidates, LoadPlan* plan) {
  // Stable: the reads of one block range by several groups (SplitByFanOut) keep their groups' order.
  std::stable_sort(candidates->begin(), candidates->end(), [](const Candidate& a, const Candidate& b) {
    if (a.read.bytes != b.read.bytes) return a.read.bytes > b.read.bytes;
    return ReadOrder(a.read) < ReadOrder(b.read);
  });
  const std::vector<uint32_t> node_of =
      options.holders != nullptr ? HolderNodeNumbers(*options.holders, by_rank.size()) : NodeNumbers(by_rank);
  std::vector<uint64_t>& rank_bytes = plan->read_bytes_per_rank;
  const uint64_t world = by_rank.size();
  const uint64_t nodes = node_of.empty() ? 1 : *std::max_element(node_of.begin(), node_of.end()) + 1;
  std::vector<uint64_t> node_bytes(nodes, 0);
  const uint64_t shift = static_cast<uint64_t>(options.rotation) % world;
  auto load_of = [&](int rank) {
    const uint64_t rotated_node = (node_of[rank] + nodes - shift % nodes) % nodes;
    const uint64_t rotated_rank = (rank + world - shift) % world;
    return std::make_tuple(node_bytes[node_of[rank]], rotated_node, rank_bytes[rank], rotated_rank);
  };
  std::vector<int> eligible;
  for (Candidate& candidate : *candidates) {
    const std::vector<int>* readers = &candidate.needers;
    if (options.holders != nullptr) {
      RETURN_IF_ERROR(HoldingReaders(manifest, *options.holders, candidate, &eligible));
      readers = &eligible;
    }
    int best = readers->front();
    auto best_load = load_of(best);
    for (int rank : *readers) {
      auto load = load_of(rank);
      if (load < best_load) {
        best = rank;
        best_load = load;
      }
    }
    candidate.read.reader = best;
    node_bytes[node_of[best]] += candidate.read.bytes;
    rank_bytes[best] += candidate.read.bytes;
  }
  return Status::Ok();
}

// The plan's reads in (tensor, chunk, block) order, and for each, what its reader keeps and what it sends.
void EmitReadsAndTransfers(const Manifest& manifest, std::vector<Candidate> candidates, LoadPlan* plan) {
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return ReadOrder(a.read) < ReadOrder(b.read); });
  for (uint32_t i = 0; i < candidates.size(); ++i) {
    const ChunkRead& read = candidates[i].read;
    plan->reads.push_back(read);
    const uint64_t element_size = DTypeSize(manifest.tensors[read.tensor].dtype);
    for (const Need& need : candidates[i].needs) {
      for (int rank : *need.ranks) {
        Transfer transfer{i, rank, need.region, need.region.volume() * element_size};
        (rank == read.reader ? plan->local_copies : plan->transfers).push_back(std::move(transfer));
      }
    }
  }
  // Stable: within a (reader, consumer) pair, transfers stay in read order.
  std::stable_sort(plan->transfers.begin(), plan->transfers.end(), [&](const Transfer& a, const Transfer& b) {
    return std::make_pair(plan->reads[a.read].reader, a.consumer) <
           std::make_pair(plan->reads[b.read].reader, b.consumer);
  });
}

uint64_t AlignUp(uint64_t bytes) { return (bytes + kTransferAlignment - 1) / kTransferAlignment * kTransferAlignment; }

bool TravelsAlone(const LoadPlan& plan, const Transfer& transfer) { return transfer.bytes >= plan.separate_bytes; }

std::vector<PeerBatch> Batches(const LoadPlan& plan, int rank, bool outgoing) {
  std::vector<PeerBatch> batches;
  for (size_t i = 0; i < plan.transfers.size(); ++i) {
    const Transfer& transfer = plan.transfers[i];
    const int reader = plan.reads[transfer.read].reader;
    if ((outgoing ? reader : transfer.consumer) != rank) continue;
    const int peer = outgoing ? transfer.consumer : reader;
    if (batches.empty() || batches.back().peer != peer) batches.push_back(PeerBatch{peer, {}, {}, 0, {}});
    PeerBatch& batch = batches.back();
    if (TravelsAlone(plan, transfer)) {
      batch.separate.push_back(i);
      continue;
    }
    const uint64_t offset = AlignUp(batch.packed_bytes);
    batch.packed.push_back(i);
    batch.offsets.push_back(offset);
    batch.packed_bytes = offset + transfer.bytes;
  }
  return batches;
}

}  // namespace

std::tuple<uint32_t, uint32_t, uint64_t> ReadOrder(const ChunkRead& read) {
  return std::make_tuple(read.tensor, read.chunk, read.first_block);
}

uint64_t TransferBufferBytes(const LoadPlan& plan, const Transfer& transfer) {
  return TravelsAlone(plan, transfer) ? transfer.bytes : AlignUp(transfer.bytes);
}

std::string EncodeLoadRequest(const LoadRequest& request) {
  ByteWriter w;
  w.I32(request.rank);
  w.Bytes(request.node);
  w.U32(static_cast<uint32_t>(request.boxes.size()));
  for (const RequestedBox& requested : request.boxes) {
    w.U32(requested.tensor);
    EncodeDims(requested.box.offset, &w);
    EncodeDims(requested.box.shape, &w);
  }
  return w.Take();
}

Result<LoadRequest> DecodeLoadRequest(std::string_view bytes, int from_rank, const Manifest& manifest) {
  const std::string source = "load request from rank " + std::to_string(from_rank);
  ByteReader r(bytes, source);
  LoadRequest request;
  RETURN_IF_ERROR(r.I32(&request.rank));
  if (request.rank != from_rank) return Corrupt(source + " claims rank " + std::to_string(request.rank));
  RETURN_IF_ERROR(r.Bytes(&request.node));
  uint32_t count = 0;
  RETURN_IF_ERROR(r.Count(&count, kMaxBoxesPerRequest, kMinBoxBytes));
  request.boxes.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    Status status = DecodeBox(&r, source, manifest, &request.boxes[i]);
    if (!status.ok()) return Status(status.code(), status.message() + " (box " + std::to_string(i) + ")");
  }
  RETURN_IF_ERROR(r.ExpectDone());
  return request;
}

Result<LoadPlan> PlanLoad(const Manifest& manifest, const std::vector<LoadRequest>& requests,
                          const LoadPlanOptions& options) {
  ASSIGN_OR_RETURN(const std::vector<const LoadRequest*> by_rank, RequestsByRank(manifest, requests));
  const std::vector<WantedBoxes> wanted = CollectWanted(manifest.tensors.size(), by_rank);
  std::deque<std::vector<int>> group_ranks;  // what the needs of SplitByFanOut's groups point to
  ASSIGN_OR_RETURN(std::vector<Candidate> candidates, CollectCandidates(manifest, wanted, options, &group_ranks));
  LoadPlan plan;
  plan.read_bytes_per_rank.assign(requests.size(), 0);
  plan.separate_bytes = options.separate_bytes;
  RETURN_IF_ERROR(ChooseReaders(manifest, by_rank, options, &candidates, &plan));
  EmitReadsAndTransfers(manifest, std::move(candidates), &plan);
  return plan;
}

std::vector<PeerBatch> OutgoingBatches(const LoadPlan& plan, int rank) { return Batches(plan, rank, true); }

std::vector<PeerBatch> IncomingBatches(const LoadPlan& plan, int rank) { return Batches(plan, rank, false); }

}  // namespace ckpt::runtime

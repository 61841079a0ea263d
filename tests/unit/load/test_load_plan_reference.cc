// PlanLoad against a reference that follows load_plan.h in the plainest way: every distinct requested box tested
// against every stored chunk, ordered maps for every tally. The planner indexes the boxes and sorts flat lists so that
// it grows linearly with the ranks; on random layouts its output must still be the reference's, field by field.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/load/load_plan.h"
#include "tests/unit/load/load_plan_testing.h"

namespace ckpt::runtime {
namespace {

// ---- The reference planner ----

struct RefNeed {
  Box region;
  std::vector<int> ranks;
  bool carried = false;  // in a block that another group reads: its ranks may not read the rest
};

struct RefCandidate {
  ChunkRead read;
  std::vector<RefNeed> needs;
  std::set<int> needers;
};

// [begin, end) bytes of `region` in the row-major buffer of `chunk`: from its first run to the end of its last.
std::pair<uint64_t, uint64_t> RefSpan(const Box& chunk, const Box& region) {
  uint64_t begin = UINT64_MAX;
  uint64_t end = 0;
  ForEachRun(chunk, region, region, 4, [&](uint64_t offset, uint64_t, uint64_t bytes) {
    begin = std::min(begin, offset);
    end = std::max(end, offset + bytes);
  });
  return {begin, end};
}

RefCandidate RefRead(uint32_t tensor, uint32_t chunk_index, const ChunkRecord& chunk, std::vector<RefNeed> needs) {
  RefCandidate candidate{{}, std::move(needs), {}};
  uint64_t begin = UINT64_MAX;
  uint64_t end = 0;
  std::set<int> every_rank;
  for (const RefNeed& need : candidate.needs) {
    const auto [need_begin, need_end] = RefSpan(chunk.box, need.region);
    begin = std::min(begin, need_begin);
    end = std::max(end, need_end);
    every_rank.insert(need.ranks.begin(), need.ranks.end());
    if (!need.carried) candidate.needers.insert(need.ranks.begin(), need.ranks.end());
  }
  const uint64_t block_size = chunk.bytes.block_size;
  const uint64_t first = begin / block_size;
  const uint64_t end_block = (end + block_size - 1) / block_size;
  if (end_block - first == 1) candidate.needers = every_rank;  // any rank needing a byte of one block may read it
  const uint64_t bytes = std::min(chunk.bytes.byte_length, end_block * block_size) - first * block_size;
  candidate.read = ChunkRead{tensor, chunk_index, 0, first, end_block - first, bytes};
  return candidate;
}

// The parts of `need` among the row-major elements [begin, end) of `chunk`, in order.
std::vector<RefNeed> RefClip(const Box& chunk, const RefNeed& need, uint64_t begin, uint64_t end, bool carried) {
  std::vector<RefNeed> parts;
  for (const FlatPiece& flat : DecomposeFlatRange(chunk, begin, end)) {
    if (std::optional<Box> part = Intersect(flat.box, need.region))
      parts.push_back(RefNeed{*part, need.ranks, carried});
  }
  return parts;
}

// Needs in order of their first block; a need starting before the last block of its group so far joins the group.
// Groups never share a block: a group starting in the last block of the groups before it leaves that block to the
// group before, which carries the parts inside it of the needs starting there; with a block size that is not a
// multiple of the element size, the group joins the group before.
std::vector<std::vector<RefNeed>> RefGroups(const ChunkRecord& chunk, std::vector<RefNeed> needs) {
  const uint64_t block_size = chunk.bytes.block_size;
  std::vector<std::tuple<uint64_t, uint64_t, RefNeed>> spanned;  // first block, end block, need
  for (RefNeed& need : needs) {
    const auto [begin, end] = RefSpan(chunk.box, need.region);
    spanned.emplace_back(begin / block_size, (end + block_size - 1) / block_size, std::move(need));
  }
  std::stable_sort(spanned.begin(), spanned.end(),
                   [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  struct RawGroup {
    uint64_t first_block;
    bool shared;                                      // its first block is the last of the groups before
    std::vector<std::pair<uint64_t, RefNeed>> needs;  // with their first blocks
  };
  std::vector<RawGroup> raw;
  uint64_t group_end = 0;
  for (auto& [first_block, end_block, need] : spanned) {
    if (raw.empty() || first_block + 1 >= group_end) raw.push_back(RawGroup{first_block, first_block < group_end, {}});
    group_end = std::max(group_end, end_block);
    raw.back().needs.emplace_back(first_block, std::move(need));
  }
  std::vector<std::vector<RefNeed>> groups;
  for (RawGroup& group : raw) {
    if (!group.shared || block_size % 4 != 0) {
      if (!group.shared) groups.emplace_back();
      for (auto& [first_block, need] : group.needs) groups.back().push_back(std::move(need));
      continue;
    }
    const uint64_t begin = group.first_block * block_size / 4;
    const uint64_t end = std::min(chunk.bytes.byte_length, (group.first_block + 1) * block_size) / 4;
    std::vector<RefNeed> rest;
    for (auto& [first_block, need] : group.needs) {
      if (first_block != group.first_block) {
        rest.push_back(std::move(need));
        continue;
      }
      for (RefNeed& part : RefClip(chunk.box, need, begin, end, true)) groups.back().push_back(std::move(part));
      for (RefNeed& part : RefClip(chunk.box, need, end, chunk.box.volume(), false)) rest.push_back(std::move(part));
    }
    if (!rest.empty()) groups.push_back(std::move(rest));
  }
  return groups;
}

// A group whose needs go to more than `fan_out` ranks, as one group per fan_out of those ranks: ranks
// consecutive in order, the g-th of G groups from the (g * n / G)-th of the n ranks to the one before the
// ((g + 1) * n / G)-th; each need keeps the ranks of its own in the group.
std::vector<std::vector<RefNeed>> RefFanOut(std::vector<RefNeed> needs, uint32_t fan_out) {
  std::set<int> consumers;
  for (const RefNeed& need : needs) consumers.insert(need.ranks.begin(), need.ranks.end());
  if (fan_out == 0 || consumers.size() <= fan_out) return {std::move(needs)};
  const std::vector<int> ordered(consumers.begin(), consumers.end());
  const size_t n = ordered.size();
  const size_t count = (n + fan_out - 1) / fan_out;
  std::vector<std::vector<RefNeed>> groups;
  for (size_t g = 0; g < count; ++g) {
    const std::set<int> members(ordered.begin() + g * n / count, ordered.begin() + (g + 1) * n / count);
    std::vector<RefNeed>& group = groups.emplace_back();
    for (const RefNeed& need : needs) {
      std::vector<int> kept;
      for (int rank : need.ranks) {
        if (members.count(rank) > 0) kept.push_back(rank);
      }
      if (!kept.empty()) group.push_back(RefNeed{need.region, kept, need.carried});
    }
  }
  return groups;
}

void RefAddReads(uint32_t tensor, uint32_t chunk_index, const ChunkRecord& chunk, std::vector<RefNeed> needs,
                 const LoadPlanOptions& options, std::vector<RefCandidate>* out) {
  RefCandidate whole = RefRead(tensor, chunk_index, chunk, std::move(needs));
  const uint64_t block_size = chunk.bytes.block_size;
  uint64_t pieces = 1;
  if (whole.needers.size() >= 2 && options.split_bytes != 0 && whole.read.bytes / 2 >= options.split_bytes &&
      block_size % 4 == 0) {
    pieces = std::min<uint64_t>({whole.needers.size(), whole.read.bytes / options.split_bytes, whole.read.block_count});
  }
  if (pieces == 1) {
    out->push_back(std::move(whole));
    return;
  }
  uint64_t block = whole.read.first_block;
  for (uint64_t i = 0; i < pieces; ++i) {
    const uint64_t count = whole.read.block_count / pieces + (i < whole.read.block_count % pieces ? 1 : 0);
    const uint64_t end = std::min(chunk.bytes.byte_length, (block + count) * block_size);
    std::vector<RefNeed> clipped;
    for (const FlatPiece& flat : DecomposeFlatRange(chunk.box, block * block_size / 4, end / 4)) {
      for (const RefNeed& need : whole.needs) {
        if (std::optional<Box> part = Intersect(flat.box, need.region)) {
          clipped.push_back(RefNeed{*part, need.ranks, need.carried});
        }
      }
    }
    block += count;
    if (!clipped.empty()) out->push_back(RefRead(tensor, chunk_index, chunk, std::move(clipped)));
  }
}

auto RefKey(const ChunkRead& read) { return std::make_tuple(read.tensor, read.chunk, read.first_block); }

void RefChooseReaders(const std::map<int, std::string>& node_of, std::vector<RefCandidate>* candidates,
                      std::vector<uint64_t>* rank_bytes) {
  // Stable: the reads of one block range by several groups (RefFanOut) stay in their groups' order.
  std::stable_sort(candidates->begin(), candidates->end(), [](const RefCandidate& a, const RefCandidate& b) {
    if (a.read.bytes != b.read.bytes) return a.read.bytes > b.read.bytes;
    return RefKey(a.read) < RefKey(b.read);
  });
  std::map<std::string, uint64_t> node_bytes;
  for (RefCandidate& candidate : *candidates) {
    auto load = [&](int rank) {
      return std::make_tuple(node_bytes[node_of.at(rank)], node_of.at(rank), (*rank_bytes)[rank], rank);
    };
    int best = *candidate.needers.begin();
    for (int rank : candidate.needers) best = load(rank) < load(best) ? rank : best;
    candidate.read.reader = best;
    node_bytes[node_of.at(best)] += candidate.read.bytes;
    (*rank_bytes)[best] += candidate.read.bytes;
  }
}

LoadPlan RefPlan(const Manifest& manifest, const std::vector<LoadRequest>& requests, const LoadPlanOptions& options) {
  std::map<int, std::string> node_of;
  std::vector<std::map<Box, std::set<int>>> wanted(manifest.tensors.size());
  for (const LoadRequest& request : requests) {
    node_of[request.rank] = request.node;
    for (const RequestedBox& asked : request.boxes) {
      if (!asked.box.empty()) wanted[asked.tensor][asked.box].insert(request.rank);
    }
  }
  std::vector<RefCandidate> candidates;
  for (uint32_t t = 0; t < manifest.tensors.size(); ++t) {
    for (uint32_t c = 0; c < manifest.tensors[t].chunks.size(); ++c) {
      const ChunkRecord& chunk = manifest.tensors[t].chunks[c];
      std::vector<RefNeed> needs;
      for (const auto& [box, ranks] : wanted[t]) {
        if (std::optional<Box> region = Intersect(chunk.box, box)) {
          needs.push_back(RefNeed{*region, std::vector<int>(ranks.begin(), ranks.end())});
        }
      }
      for (std::vector<RefNeed>& group : RefGroups(chunk, std::move(needs))) {
        for (std::vector<RefNeed>& fanned : RefFanOut(std::move(group), options.fan_out)) {
          RefAddReads(t, c, chunk, std::move(fanned), options, &candidates);
        }
      }
    }
  }
  LoadPlan plan;
  plan.read_bytes_per_rank.assign(requests.size(), 0);
  plan.separate_bytes = options.separate_bytes;
  RefChooseReaders(node_of, &candidates, &plan.read_bytes_per_rank);
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const RefCandidate& a, const RefCandidate& b) { return RefKey(a.read) < RefKey(b.read); });
  for (uint32_t i = 0; i < candidates.size(); ++i) {
    const ChunkRead& read = candidates[i].read;
    plan.reads.push_back(read);
    for (const RefNeed& need : candidates[i].needs) {
      for (int rank : need.ranks) {
        Transfer transfer{i, rank, need.region, need.region.volume() * 4};
        (rank == read.reader ? plan.local_copies : plan.transfers).push_back(transfer);
      }
    }
  }
  std::stable_sort(plan.transfers.begin(), plan.transfers.end(), [&](const Transfer& a, const Transfer& b) {
    return std::make_pair(plan.reads[a.read].reader, a.consumer) <
           std::make_pair(plan.reads[b.read].reader, b.consumer);
  });
  return plan;
}

// ---- Random layouts ----

using Rng = std::mt19937_64;

uint64_t Uniform(Rng& rng, uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng); }

// How large a random layout grows: small ones cover the planner's cases many times over, large ones give the index
// of wanted boxes deep trees.
struct Scale {
  size_t min_ndim;
  int max_world;
  uint64_t max_extent;
  uint64_t max_parts;  // of a grid, per dimension
};
constexpr Scale kSmall{0, 12, 9, 4};
constexpr Scale kLarge{2, 128, 48, 10};

// Boxes tiling `shape` on a grid with random cuts; 1 part in the dimensions below `whole_below`, so that every box
// spans them whole (column splits).
std::vector<Box> RandomGrid(const Shape& shape, size_t whole_below, uint64_t max_parts, Rng& rng) {
  std::vector<Box> boxes{Box{}};
  for (size_t d = 0; d < shape.size(); ++d) {
    std::set<uint64_t> starts{0};
    const uint64_t parts = d < whole_below ? 1 : Uniform(rng, 1, std::min(shape[d], max_parts));
    while (starts.size() < parts) starts.insert(Uniform(rng, 1, shape[d] - 1));
    std::vector<Box> cut;
    for (const Box& box : boxes) {
      for (auto it = starts.begin(); it != starts.end(); ++it) {
        const uint64_t end = std::next(it) == starts.end() ? shape[d] : *std::next(it);
        Box longer = box;
        longer.offset.push_back(*it);
        longer.shape.push_back(end - *it);
        cut.push_back(longer);
      }
    }
    boxes = std::move(cut);
  }
  return boxes;
}

Box RandomBoxInside(const Shape& shape, Rng& rng) {
  Box box;
  for (uint64_t extent : shape) {
    const uint64_t begin = Uniform(rng, 0, extent - 1);
    box.offset.push_back(begin);
    box.shape.push_back(Uniform(rng, 1, extent - begin));
  }
  return box;
}

// What the ranks ask of one tensor: one of a grid split (rows or columns), the whole tensor, or random overlapping
// boxes; boxes of a grid go to 1 to 3 random ranks (replicas), and now and then a rank asks a box twice.
void AskRandomly(uint32_t tensor, const Shape& shape, uint64_t max_parts, Rng& rng,
                 std::vector<LoadRequest>* requests) {
  const int world = static_cast<int>(requests->size());
  auto ask = [&](int rank, const Box& box) { (*requests)[rank].boxes.push_back(RequestedBox{tensor, box}); };
  switch (Uniform(rng, 0, 3)) {
    case 0:
    case 1:
      for (const Box& box : RandomGrid(shape, Uniform(rng, 0, 1) == 0 ? 0 : shape.size() - 1, max_parts, rng)) {
        for (uint64_t replica = Uniform(rng, 1, 3); replica > 0; --replica) ask(Uniform(rng, 0, world - 1), box);
      }
      break;
    case 2:
      for (int rank = 0; rank < world; ++rank) {
        if (Uniform(rng, 0, 2) != 0) ask(rank, WholeBox(shape));
      }
      break;
    default:
      for (int rank = 0; rank < world; ++rank) ask(rank, RandomBoxInside(shape, rng));
  }
  const int twice = static_cast<int>(Uniform(rng, 0, world - 1));
  if (!(*requests)[twice].boxes.empty() && Uniform(rng, 0, 3) == 0) {
    (*requests)[twice].boxes.push_back((*requests)[twice].boxes.back());
  }
}

struct Layout {
  Manifest manifest;
  std::vector<LoadRequest> requests;
  LoadPlanOptions options;
};

// 1 to 4 tensors of 0 to 3 dimensions stored on random grids with block sizes that are and are not multiples of the
// element size; ranks on nodes with random names, so that ties go by name.
Layout RandomLayout(Rng& rng, const Scale& scale = kSmall) {
  Layout layout;
  const int world = static_cast<int>(Uniform(rng, 1, scale.max_world));
  layout.requests = World(world);
  for (LoadRequest& request : layout.requests)
    request.node = std::string(1, static_cast<char>('a' + Uniform(rng, 0, 3)));
  std::vector<TensorRecord> tensors;
  for (uint32_t t = 0, count = static_cast<uint32_t>(Uniform(rng, 1, 4)); t < count; ++t) {
    Shape shape(Uniform(rng, scale.min_ndim, 3));
    for (uint64_t& extent : shape) extent = Uniform(rng, 1, scale.max_extent);
    const uint64_t block_sizes[] = {4, 6, 8, 10, 16, 24, 64};
    const uint64_t block_size = block_sizes[Uniform(rng, 0, 6)];
    tensors.push_back(Stored("t" + std::to_string(t), shape, RandomGrid(shape, 0, scale.max_parts, rng), block_size));
    AskRandomly(t, shape, scale.max_parts, rng, &layout.requests);
  }
  layout.manifest = WithTensors(std::move(tensors));
  const uint64_t split_bytes[] = {0, 8, 32, 128, 64ull << 20};
  const uint64_t separate_bytes[] = {0, 16, 40, 100, 256ull << 10};
  layout.options.split_bytes = split_bytes[Uniform(rng, 0, 4)];
  layout.options.separate_bytes = separate_bytes[Uniform(rng, 0, 4)];
  const uint32_t fan_outs[] = {0, 1, 2, 3, 32};
  layout.options.fan_out = fan_outs[Uniform(rng, 0, 4)];
  std::shuffle(layout.requests.begin(), layout.requests.end(), rng);
  return layout;
}

LoadPlan Planned(const Layout& layout) {
  Result<LoadPlan> plan = PlanLoad(layout.manifest, layout.requests, layout.options);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  return plan.ok() ? std::move(plan).value() : LoadPlan{};
}

constexpr int kLayoutsPerSeed = 60;

class LoadPlanReferenceTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(LoadPlanReferenceTest, PlanMatchesTheBruteForceReference) {
  Rng rng(GetParam());
  for (int i = 0; i < kLayoutsPerSeed; ++i) {
    SCOPED_TRACE("layout " + std::to_string(i));
    const Layout layout = RandomLayout(rng);
    ExpectSamePlan(Planned(layout), RefPlan(layout.manifest, layout.requests, layout.options));
  }
}

TEST_P(LoadPlanReferenceTest, LargeLayoutsMatchTheBruteForceReference) {
  Rng rng(GetParam());
  for (int i = 0; i < 5; ++i) {
    SCOPED_TRACE("layout " + std::to_string(i));
    const Layout layout = RandomLayout(rng, kLarge);
    ExpectSamePlan(Planned(layout), RefPlan(layout.manifest, layout.requests, layout.options));
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, LoadPlanReferenceTest, ::testing::Values(1, 2, 3, 5, 8, 13, 21, 34));

// ---- Layouts that an index over one dimension would get wrong ----

void ExpectReferencePlan(const Manifest& manifest, const std::vector<LoadRequest>& requests) {
  ExpectSamePlan(Planned(Layout{manifest, requests, {}}), RefPlan(manifest, requests, {}));
}

TEST(LoadPlanReferenceLayoutTest, ColumnSplitsSpanningEveryRowFindTheirChunks) {
  const Shape shape{6, 64};
  std::vector<Box> columns;
  for (uint64_t c = 0; c < 64; c += 2) columns.push_back(Box{{0, c}, {6, 2}});
  std::vector<Box> tiles;
  for (uint64_t r = 0; r < 6; r += 3) {
    for (uint64_t c = 0; c < 64; c += 16) tiles.push_back(Box{{r, c}, {3, 16}});
  }
  std::vector<LoadRequest> requests = World(32, 4);
  for (int rank = 0; rank < 32; ++rank) requests[rank].boxes.push_back(RequestedBox{0, columns[rank]});
  ExpectReferencePlan(WithTensors({Stored("w", shape, tiles)}), requests);
}

TEST(LoadPlanReferenceLayoutTest, NestedBoxesOfOneTensorAreAllFound) {
  const Shape shape{8, 8};
  std::vector<Box> rows;
  for (uint64_t r = 0; r < 8; r += 2) rows.push_back(Box{{r, 0}, {2, 8}});
  std::vector<LoadRequest> requests = World(6);
  requests[0].boxes.push_back(RequestedBox{0, WholeBox(shape)});
  for (int rank = 1; rank < 5; ++rank) requests[rank].boxes.push_back(RequestedBox{0, Box{{0, 0}, {8, 2u * rank}}});
  requests[5].boxes.push_back(RequestedBox{0, Box{{7, 7}, {1, 1}}});
  ExpectReferencePlan(WithTensors({Stored("w", shape, rows)}), requests);
}

TEST(LoadPlanReferenceLayoutTest, ScalarsAreFoundBesideTensors) {
  std::vector<LoadRequest> requests = World(3);
  for (LoadRequest& request : requests) {
    request.boxes.push_back(RequestedBox{0, Box{}});
    request.boxes.push_back(RequestedBox{1, Box{{request.rank * 2ull}, {2}}});
  }
  ExpectReferencePlan(WithTensors({Stored("step", {}, {Box{}}), Stored("b", {6}, {Box{{0}, {4}}, Box{{4}, {2}}})}),
                      requests);
}

}  // namespace
}  // namespace ckpt::runtime

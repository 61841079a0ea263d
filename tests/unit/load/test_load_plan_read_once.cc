// Read once for every layout (issue #14, item 4): whatever the sizes of the pieces the ranks ask for, each stored
// block that anyone needs is read by exactly one rank, and the ranks get exactly their elements. The layouts are
// those of the multi-process test (mp_read-once-layouts in tests/integration/run.sh): a 1000 x 37 F64 matrix and a
// 1.5 M F32 vector saved in uneven row blocks, loaded in other uneven row blocks or split by columns.
#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "runtime/load/load_plan.h"
#include "tests/unit/load/load_plan_testing.h"

namespace ckpt::runtime {
namespace {

// Where each of `parts` uneven parts of [0, extent) begins, then `extent`: part i weighs 1 + (5 i + salt) % 7. The
// scenario program cuts its layouts the same way (UnevenCut in tests/integration/scenario_exchange.cc).
std::vector<uint64_t> UnevenCuts(uint64_t extent, int parts, int salt) {
  std::vector<uint64_t> weights;
  uint64_t total = 0;
  for (int i = 0; i < parts; ++i) total += weights.emplace_back(1 + (5 * i + salt) % 7);
  std::vector<uint64_t> cuts{0};
  uint64_t sum = 0;
  for (uint64_t weight : weights) cuts.push_back(extent * (sum += weight) / total);
  return cuts;
}

// The boxes between consecutive cuts of dimension `dim`, whole in the others.
std::vector<Box> Cut(const Shape& shape, size_t dim, const std::vector<uint64_t>& cuts) {
  std::vector<Box> boxes;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    Box box = WholeBox(shape);
    box.offset[dim] = cuts[i];
    box.shape[dim] = cuts[i + 1] - cuts[i];
    boxes.push_back(box);
  }
  return boxes;
}

struct ReadOnceLayout {
  int saved_ranks;
  int loaded_ranks;
  bool by_columns;      // the matrix is loaded split by columns rather than rows
  uint64_t block_size;  // the checksum block
};

void PrintTo(const ReadOnceLayout& p, std::ostream* os) {
  *os << p.saved_ranks << " -> " << p.loaded_ranks << (p.by_columns ? " by columns" : " by rows") << ", blocks of "
      << p.block_size << " B";
}

std::string LayoutName(const ::testing::TestParamInfo<ReadOnceLayout>& info) {
  const ReadOnceLayout& p = info.param;
  return std::to_string(p.saved_ranks) + "to" + std::to_string(p.loaded_ranks) + (p.by_columns ? "Columns" : "Rows") +
         "Block" + std::to_string(p.block_size);
}

const Shape kMatrix{1000, 37};
const Shape kVector{1500000};

Manifest SavedLayout(const ReadOnceLayout& p) {
  return WithTensors(
      {Stored("m", kMatrix, Cut(kMatrix, 0, UnevenCuts(kMatrix[0], p.saved_ranks, 0)), p.block_size, kF64),
       Stored("v", kVector, Cut(kVector, 0, UnevenCuts(kVector[0], p.saved_ranks, 0)), p.block_size, kF32)});
}

std::vector<LoadRequest> LoadedLayout(const ReadOnceLayout& p) {
  std::vector<LoadRequest> requests = World(p.loaded_ranks);
  const size_t dim = p.by_columns ? 1 : 0;
  const std::vector<Box> matrix = Cut(kMatrix, dim, UnevenCuts(kMatrix[dim], p.loaded_ranks, 4));
  const std::vector<Box> vector = Cut(kVector, 0, UnevenCuts(kVector[0], p.loaded_ranks, 4));
  for (int r = 0; r < p.loaded_ranks; ++r) {
    requests[r].boxes.push_back(RequestedBox{0, matrix[r]});
    requests[r].boxes.push_back(RequestedBox{1, vector[r]});
  }
  return requests;
}

// Calls fn(row-major index in `shape`) for every element of `box`.
template <typename Fn>
void ForEachElement(const Shape& shape, const Box& box, Fn fn) {
  ForEachRun(WholeBox(shape), WholeBox(shape), box, 1, [&](uint64_t offset, uint64_t, uint64_t count) {
    for (uint64_t i = 0; i < count; ++i) fn(offset + i);
  });
}

// How many times each (rank, tensor) gets each element of the tensor, after checking that every piece lies in the
// blocks its read covers.
using Counts = std::map<std::pair<int, uint32_t>, std::vector<int>>;

void Deliver(const Manifest& manifest, const LoadPlan& plan, const Transfer& piece, Counts* counts) {
  const ChunkRead& read = plan.reads[piece.read];
  const TensorRecord& tensor = manifest.tensors[read.tensor];
  const ChunkRecord& chunk = tensor.chunks[read.chunk];
  ASSERT_TRUE(Contains(chunk.box, piece.region)) << piece.region.ToString();
  const uint64_t begin = read.first_block * chunk.bytes.block_size;
  ForEachRun(chunk.box, piece.region, piece.region, DTypeSize(tensor.dtype),
             [&](uint64_t offset, uint64_t, uint64_t n) {
               EXPECT_GE(offset, begin) << "tensor " << tensor.key << ": a piece starts before its read";
               EXPECT_LE(offset + n, begin + read.bytes) << "tensor " << tensor.key << ": a piece ends after its read";
             });
  std::vector<int>& seen = (*counts)[{piece.consumer, read.tensor}];
  seen.resize(Volume(tensor.shape), 0);
  ForEachElement(tensor.shape, piece.region, [&](uint64_t i) { ++seen[i]; });
}

class LoadPlanReadOnceTest : public ::testing::TestWithParam<ReadOnceLayout> {};

// Read amplification 1.00: the ranks together read each stored block once, so exactly the stored bytes.
TEST_P(LoadPlanReadOnceTest, EveryStoredBlockIsReadByExactlyOneRank) {
  const Manifest manifest = SavedLayout(GetParam());
  Result<LoadPlan> plan = PlanLoad(manifest, LoadedLayout(GetParam()));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  std::map<std::pair<uint32_t, uint32_t>, std::vector<int>> reads_of_block;  // (tensor, chunk) -> per block
  uint64_t read_bytes = 0;
  for (const ChunkRead& read : plan->reads) {
    const StoredBytes& stored = manifest.tensors[read.tensor].chunks[read.chunk].bytes;
    std::vector<int>& blocks = reads_of_block[{read.tensor, read.chunk}];
    blocks.resize(stored.block_checksums.size(), 0);
    for (uint64_t b = read.first_block; b < read.first_block + read.block_count; ++b) ++blocks.at(b);
    read_bytes += read.bytes;
  }
  uint64_t stored_bytes = 0;
  for (uint32_t t = 0; t < manifest.tensors.size(); ++t) {
    for (uint32_t c = 0; c < manifest.tensors[t].chunks.size(); ++c) {
      const StoredBytes& stored = manifest.tensors[t].chunks[c].bytes;
      stored_bytes += stored.byte_length;
      const std::vector<int> once(stored.block_checksums.size(), 1);
      EXPECT_EQ(reads_of_block[std::make_pair(t, c)], once)
          << "tensor " << manifest.tensors[t].key << " chunk " << c << ": times each block is read";
    }
  }
  EXPECT_EQ(read_bytes, stored_bytes);
  uint64_t per_rank = 0;
  for (uint64_t bytes : plan->read_bytes_per_rank) per_rank += bytes;
  EXPECT_EQ(per_rank, stored_bytes);
}

TEST_P(LoadPlanReadOnceTest, EveryRankGetsEachOfItsElementsOnce) {
  const Manifest manifest = SavedLayout(GetParam());
  const std::vector<LoadRequest> requests = LoadedLayout(GetParam());
  Result<LoadPlan> plan = PlanLoad(manifest, requests);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  Counts got;
  for (const Transfer& piece : plan->transfers) {
    EXPECT_NE(piece.consumer, plan->reads[piece.read].reader) << "a reader sends to itself";
    Deliver(manifest, *plan, piece, &got);
  }
  for (const Transfer& piece : plan->local_copies) {
    EXPECT_EQ(piece.consumer, plan->reads[piece.read].reader);
    Deliver(manifest, *plan, piece, &got);
  }
  Counts asked;
  for (const LoadRequest& request : requests) {
    for (const RequestedBox& box : request.boxes) {
      std::vector<int>& seen = asked[{request.rank, box.tensor}];
      seen.resize(Volume(manifest.tensors[box.tensor].shape), 0);
      ForEachElement(manifest.tensors[box.tensor].shape, box.box, [&](uint64_t i) { ++seen[i]; });
    }
  }
  EXPECT_EQ(got, asked);
}

// 1 MiB blocks are what a save writes: every piece of the matrix is smaller than a block. 4 KiB blocks cut the
// pieces so that they meet inside blocks; 4100-byte blocks are not a multiple of the element size.
INSTANTIATE_TEST_SUITE_P(Layouts, LoadPlanReadOnceTest,
                         ::testing::Values(ReadOnceLayout{3, 5, true, 1 << 20}, ReadOnceLayout{4, 3, false, 1 << 20},
                                           ReadOnceLayout{2, 7, false, 1 << 20}, ReadOnceLayout{3, 5, true, 4096},
                                           ReadOnceLayout{4, 3, false, 4096}, ReadOnceLayout{2, 7, false, 4096},
                                           ReadOnceLayout{3, 5, true, 4100}, ReadOnceLayout{4, 3, false, 4100},
                                           ReadOnceLayout{2, 7, false, 4100}),
                         LayoutName);

}  // namespace
}  // namespace ckpt::runtime

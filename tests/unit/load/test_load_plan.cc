#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/load/load_plan.h"
#include "tests/unit/load/load_plan_testing.h"

namespace ckpt::runtime {
namespace {

// Boxes that cut `shape` into `parts` slabs along `dim`, the first ones one longer when it does not divide.
std::vector<Box> Slabs(const Shape& shape, size_t dim, uint64_t parts) {
  std::vector<Box> boxes;
  uint64_t start = 0;
  for (uint64_t i = 0; i < parts; ++i) {
    Box box = WholeBox(shape);
    box.offset[dim] = start;
    box.shape[dim] = shape[dim] / parts + (i < shape[dim] % parts ? 1 : 0);
    start += box.shape[dim];
    boxes.push_back(box);
  }
  return boxes;
}

void AskEverywhere(std::vector<LoadRequest>* requests, uint32_t tensor, const Box& box) {
  for (auto& request : *requests) request.boxes.push_back(RequestedBox{tensor, box});
}

// Rank r asks for boxes[r].
void AskOnePerRank(std::vector<LoadRequest>* requests, uint32_t tensor, const std::vector<Box>& boxes) {
  for (size_t r = 0; r < boxes.size(); ++r) (*requests)[r].boxes.push_back(RequestedBox{tensor, boxes[r]});
}

LoadPlan Plan(const Manifest& manifest, const std::vector<LoadRequest>& requests, const LoadPlanOptions& options = {}) {
  Result<LoadPlan> plan = PlanLoad(manifest, requests, options);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  return plan.ok() ? std::move(plan).value() : LoadPlan{};
}

uint64_t Sum(const std::vector<uint64_t>& values) {
  uint64_t sum = 0;
  for (uint64_t v : values) sum += v;
  return sum;
}

uint64_t StoredBytesOf(const TensorRecord& tensor) {
  uint64_t sum = 0;
  for (const ChunkRecord& chunk : tensor.chunks) sum += chunk.bytes.byte_length;
  return sum;
}

// ---- Painting elements ----

// Calls fn(row-major index in `shape`) for every element of `box`.
template <typename Fn>
void ForEachElement(const Shape& shape, const Box& box, Fn fn) {
  if (box.empty()) return;
  Shape index = box.offset;
  for (;;) {
    uint64_t flat = 0;
    for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
    fn(flat);
    size_t d = index.size();
    for (; d > 0; --d) {
      if (++index[d - 1] < box.offset[d - 1] + box.shape[d - 1]) break;
      index[d - 1] = box.offset[d - 1];
    }
    if (d == 0) return;
  }
}

// For each (rank, tensor): how many times each element of the tensor is asked for or delivered.
using Coverage = std::map<std::pair<int, uint32_t>, std::vector<int>>;

void Paint(const Manifest& manifest, int rank, uint32_t tensor, const Box& box, Coverage* coverage) {
  const Shape& shape = manifest.tensors[tensor].shape;
  std::vector<int>& counts = (*coverage)[{rank, tensor}];
  counts.resize(Volume(shape), 0);
  ForEachElement(shape, box, [&](uint64_t i) { ++counts[i]; });
}

Coverage Needed(const Manifest& manifest, const std::vector<LoadRequest>& requests) {
  Coverage needed;
  for (const auto& request : requests) {
    for (const auto& asked : request.boxes) Paint(manifest, request.rank, asked.tensor, asked.box, &needed);
  }
  return needed;
}

// The transfer's region lies in its read's chunk and in the blocks the read covers.
void ExpectInsideRead(const Manifest& manifest, const LoadPlan& plan, const Transfer& transfer) {
  const ChunkRead& read = plan.reads[transfer.read];
  const ChunkRecord& chunk = manifest.tensors[read.tensor].chunks[read.chunk];
  ASSERT_TRUE(Contains(chunk.box, transfer.region)) << transfer.region.ToString();
  const uint64_t begin = read.first_block * chunk.bytes.block_size;
  ForEachRun(chunk.box, transfer.region, transfer.region, 4, [&](uint64_t offset, uint64_t, uint64_t n) {
    EXPECT_GE(offset, begin);
    EXPECT_LE(offset + n, begin + read.bytes);
  });
  EXPECT_EQ(transfer.bytes, transfer.region.volume() * 4);
}

Coverage Delivered(const Manifest& manifest, const LoadPlan& plan) {
  Coverage delivered;
  for (const Transfer& transfer : plan.transfers) {
    EXPECT_NE(transfer.consumer, plan.reads[transfer.read].reader) << "a reader sends to itself";
    ExpectInsideRead(manifest, plan, transfer);
    Paint(manifest, transfer.consumer, plan.reads[transfer.read].tensor, transfer.region, &delivered);
  }
  for (const Transfer& copy : plan.local_copies) {
    EXPECT_EQ(copy.consumer, plan.reads[copy.read].reader);
    ExpectInsideRead(manifest, plan, copy);
    Paint(manifest, copy.consumer, plan.reads[copy.read].tensor, copy.region, &delivered);
  }
  return delivered;
}

// Every rank gets every element it asked for exactly once, and nothing else.
void ExpectExactCoverage(const Coverage& needed, const Coverage& delivered) {
  for (const auto& [who, counts] : needed) {
    auto it = delivered.find(who);
    ASSERT_NE(it, delivered.end()) << "rank " << who.first << " gets nothing of tensor " << who.second;
    EXPECT_EQ(it->second, counts) << "rank " << who.first << ", tensor " << who.second;
  }
  for (const auto& [who, counts] : delivered) {
    EXPECT_TRUE(needed.count(who)) << "rank " << who.first << " gets tensor " << who.second << " unasked";
  }
}

// ---- Request encoding ----

Manifest CodecManifest() {
  return WithTensors({Stored("w", {8, 6}, Slabs({8, 6}, 0, 2)), Stored("step", {}, {Box{}})});
}

LoadRequest SampleRequest() {
  LoadRequest request;
  request.rank = 2;
  request.node = "host-b";
  request.boxes = {RequestedBox{0, Box{{4, 0}, {4, 6}}}, RequestedBox{1, Box{}}, RequestedBox{0, Box{{0, 2}, {8, 1}}}};
  return request;
}

TEST(LoadRequestCodecTest, RoundTrips) {
  const LoadRequest request = SampleRequest();
  Result<LoadRequest> decoded = DecodeLoadRequest(EncodeLoadRequest(request), 2, CodecManifest());
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(decoded->rank, 2);
  EXPECT_EQ(decoded->node, "host-b");
  ASSERT_EQ(decoded->boxes.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(decoded->boxes[i].tensor, request.boxes[i].tensor);
    EXPECT_EQ(decoded->boxes[i].box, request.boxes[i].box);
  }
}

Status DecodeWithBox(const RequestedBox& box) {
  LoadRequest request = SampleRequest();
  request.boxes.push_back(box);
  return DecodeLoadRequest(EncodeLoadRequest(request), 2, CodecManifest()).status();
}

TEST(LoadRequestCodecTest, RejectsTensorIndexOutOfRange) {
  const Status status = DecodeWithBox(RequestedBox{2, Box{}});
  EXPECT_EQ(status.code(), Code::kCorrupt);
  EXPECT_NE(status.message().find("tensor index 2 is out of range"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("rank 2"), std::string::npos) << status.message();
}

TEST(LoadRequestCodecTest, RejectsBoxOutsideTensor) {
  const Status status = DecodeWithBox(RequestedBox{0, Box{{6, 0}, {4, 6}}});
  EXPECT_EQ(status.code(), Code::kCorrupt);
  EXPECT_NE(status.message().find("[6:10, 0:6] lies outside tensor 'w'"), std::string::npos) << status.message();
}

TEST(LoadRequestCodecTest, RejectsBoxOffsetsThatWrapAround) {
  EXPECT_EQ(DecodeWithBox(RequestedBox{0, Box{{UINT64_MAX, 0}, {2, 6}}}).code(), Code::kCorrupt);
}

TEST(LoadRequestCodecTest, RejectsDimensionCountOfAnotherTensor) {
  EXPECT_EQ(DecodeWithBox(RequestedBox{1, Box{{0}, {1}}}).code(), Code::kCorrupt);
  EXPECT_EQ(DecodeWithBox(RequestedBox{0, Box{{0, 0}, {1}}}).code(), Code::kCorrupt);
}

TEST(LoadRequestCodecTest, RejectsEveryTruncation) {
  const std::string bytes = EncodeLoadRequest(SampleRequest());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_EQ(DecodeLoadRequest(bytes.substr(0, n), 2, CodecManifest()).status().code(), Code::kCorrupt) << n;
  }
}

TEST(LoadRequestCodecTest, RejectsTrailingBytes) {
  EXPECT_EQ(DecodeLoadRequest(EncodeLoadRequest(SampleRequest()) + "x", 2, CodecManifest()).status().code(),
            Code::kCorrupt);
}

TEST(LoadRequestCodecTest, RejectsAnotherRanksRequest) {
  const Status status = DecodeLoadRequest(EncodeLoadRequest(SampleRequest()), 3, CodecManifest()).status();
  EXPECT_EQ(status.code(), Code::kCorrupt);
  EXPECT_NE(status.message().find("from rank 3 claims rank 2"), std::string::npos) << status.message();
}

TEST(LoadRequestCodecTest, RejectsBoxCountBeyondTheMessage) {
  LoadRequest request = SampleRequest();
  request.boxes.clear();
  std::string bytes = EncodeLoadRequest(request);
  bytes.replace(bytes.size() - 4, 4, std::string("\xff\xff\xff\x00", 4));
  EXPECT_EQ(DecodeLoadRequest(bytes, 2, CodecManifest()).status().code(), Code::kCorrupt);
}

// ---- Replicated requests ----

TEST(LoadPlanReplicatedTest, ReadsEveryChunkExactlyOnce) {
  const Manifest manifest = WithTensors({Stored("w", {40, 6}, Slabs({40, 6}, 0, 10))});
  std::vector<LoadRequest> requests = World(4);
  AskEverywhere(&requests, 0, WholeBox({40, 6}));
  const LoadPlan plan = Plan(manifest, requests);
  std::set<uint32_t> chunks;
  for (const ChunkRead& read : plan.reads) EXPECT_TRUE(chunks.insert(read.chunk).second) << read.chunk;
  EXPECT_EQ(chunks.size(), 10u);
  EXPECT_EQ(Sum(plan.read_bytes_per_rank), StoredBytesOf(manifest.tensors[0]));  // read amplification 1.0
}

TEST(LoadPlanReplicatedTest, SpreadsReadsAcrossRanksWithinOneChunk) {
  const Manifest manifest = WithTensors({Stored("w", {40, 6}, Slabs({40, 6}, 0, 10))});
  std::vector<LoadRequest> requests = World(4);
  AskEverywhere(&requests, 0, WholeBox({40, 6}));
  const LoadPlan plan = Plan(manifest, requests);
  const auto [least, most] = std::minmax_element(plan.read_bytes_per_rank.begin(), plan.read_bytes_per_rank.end());
  EXPECT_GT(*least, 0u);
  EXPECT_LE(*most - *least, 4u * 6 * 4);  // one chunk: 4 rows of 6 floats
}

TEST(LoadPlanReplicatedTest, EveryRankGetsExactlyItsNeeds) {
  const Manifest manifest = WithTensors({Stored("w", {40, 6}, Slabs({40, 6}, 0, 10))});
  std::vector<LoadRequest> requests = World(4);
  AskEverywhere(&requests, 0, WholeBox({40, 6}));
  const LoadPlan plan = Plan(manifest, requests);
  ExpectExactCoverage(Needed(manifest, requests), Delivered(manifest, plan));
  EXPECT_EQ(plan.transfers.size(), 10u * 3);
  EXPECT_EQ(plan.local_copies.size(), 10u);
}

TEST(LoadPlanReplicatedTest, IdenticalBoxesAskedTwiceAreServedOnce) {
  const Manifest manifest = WithTensors({Stored("w", {8, 6}, Slabs({8, 6}, 0, 2))});
  std::vector<LoadRequest> requests = World(2);
  AskEverywhere(&requests, 0, WholeBox({8, 6}));
  AskEverywhere(&requests, 0, WholeBox({8, 6}));
  const LoadPlan plan = Plan(manifest, requests);
  EXPECT_EQ(plan.transfers.size(), 2u);
  EXPECT_EQ(plan.local_copies.size(), 2u);
}

TEST(LoadPlanReplicatedTest, SplitsALargeChunkAmongItsNeeders) {
  const Manifest manifest = WithTensors({Stored("w", {64, 16}, {WholeBox({64, 16})})});
  std::vector<LoadRequest> requests = World(4);
  AskEverywhere(&requests, 0, WholeBox({64, 16}));
  const LoadPlan plan = Plan(manifest, requests, LoadPlanOptions{1024});
  ASSERT_EQ(plan.reads.size(), 4u);
  EXPECT_EQ(plan.read_bytes_per_rank, std::vector<uint64_t>(4, 1024));
  for (size_t i = 1; i < plan.reads.size(); ++i) {
    EXPECT_EQ(plan.reads[i].first_block, plan.reads[i - 1].first_block + plan.reads[i - 1].block_count);
  }
  ExpectExactCoverage(Needed(manifest, requests), Delivered(manifest, plan));
}

TEST(LoadPlanReplicatedTest, SplitPiecesSkipBlocksNobodyNeeds) {
  const Manifest manifest = WithTensors({Stored("w", {64, 16}, {WholeBox({64, 16})})});
  std::vector<LoadRequest> requests = World(2);
  requests[0].boxes.push_back(RequestedBox{0, Box{{0, 0}, {2, 16}}});
  requests[1].boxes.push_back(RequestedBox{0, Box{{62, 0}, {2, 16}}});
  const LoadPlan plan = Plan(manifest, requests, LoadPlanOptions{1024});
  EXPECT_EQ(Sum(plan.read_bytes_per_rank), 4u * 16 * 4);
  EXPECT_TRUE(plan.transfers.empty());
  ExpectExactCoverage(Needed(manifest, requests), Delivered(manifest, plan));
}

// ---- Fan-out ----

// The ranks each rank sends tensor data to or receives it from in `plan`.
std::map<int, std::set<int>> Partners(const LoadPlan& plan) {
  std::map<int, std::set<int>> partners;
  for (const Transfer& transfer : plan.transfers) {
    const int reader = plan.reads[transfer.read].reader;
    partners[reader].insert(transfer.consumer);
    partners[transfer.consumer].insert(reader);
  }
  return partners;
}

size_t MostPartners(const LoadPlan& plan) {
  size_t most = 0;
  for (const auto& [rank, partners] : Partners(plan)) most = std::max(most, partners.size());
  return most;
}

// A one-block tensor that each of 100 ranks asks for whole, planned under `fan_out`; exact coverage checked.
LoadPlan PlanOneBlockEveryRankNeeds(uint32_t fan_out) {
  const Manifest manifest = WithTensors({Stored("w", {8, 6}, {WholeBox({8, 6})})});
  std::vector<LoadRequest> requests = World(100);
  AskEverywhere(&requests, 0, WholeBox({8, 6}));
  LoadPlanOptions options;
  options.fan_out = fan_out;
  LoadPlan plan = Plan(manifest, requests, options);
  ExpectExactCoverage(Needed(manifest, requests), Delivered(manifest, plan));
  return plan;
}

// A tensor replicated over thousands of data-parallel ranks must not make its reader send to every one of them:
// each rank's data transport holds an endpoint per rank it exchanges with.
TEST(LoadPlanFanOutTest, ABlockMoreRanksNeedThanTheFanOutIsReadOncePerGroupOfThem) {
  const LoadPlan plan = PlanOneBlockEveryRankNeeds(32);
  ASSERT_EQ(plan.reads.size(), 4u);  // 100 ranks in 4 groups of 25
  std::set<int> readers;
  for (const ChunkRead& read : plan.reads) readers.insert(read.reader);
  EXPECT_EQ(readers.size(), 4u);
  // Each group is 25 ranks consecutive in rank order, its reader one of them.
  for (const auto& [rank, partners] : Partners(plan)) {
    for (int partner : partners) EXPECT_EQ(partner / 25, rank / 25) << rank << " exchanges with " << partner;
  }
  EXPECT_EQ(MostPartners(plan), 24u);
}

TEST(LoadPlanFanOutTest, WithoutAFanOutEveryBlockIsReadOnceAndSentToEveryRank) {
  const LoadPlan plan = PlanOneBlockEveryRankNeeds(0);
  ASSERT_EQ(plan.reads.size(), 1u);
  EXPECT_EQ(MostPartners(plan), 99u);
}

// A large replicated chunk is first grouped, then each group's read is split among its ranks: 64 ranks read the
// chunk twice, each group's 32 ranks a 32nd of it each.
TEST(LoadPlanFanOutTest, EachGroupSplitsALargeChunkAmongItsOwnRanks) {
  const Manifest manifest = WithTensors({Stored("w", {64, 16}, {WholeBox({64, 16})})});
  std::vector<LoadRequest> requests = World(64);
  AskEverywhere(&requests, 0, WholeBox({64, 16}));
  LoadPlanOptions options;
  options.split_bytes = 128;
  options.fan_out = 32;
  const LoadPlan plan = Plan(manifest, requests, options);
  ASSERT_EQ(plan.reads.size(), 64u);
  EXPECT_EQ(plan.read_bytes_per_rank, std::vector<uint64_t>(64, 128));
  EXPECT_EQ(Sum(plan.read_bytes_per_rank), 2 * StoredBytesOf(manifest.tensors[0]));
  EXPECT_EQ(MostPartners(plan), 31u);
  ExpectExactCoverage(Needed(manifest, requests), Delivered(manifest, plan));
}

// Blocks that no more ranks need than the fan-out are read once, however large the world: 128 ranks as 16
// data-parallel replicas of 8, rank r asking for chunk r % 8, so that 16 ranks need each chunk.
TEST(LoadPlanFanOutTest, BlocksNoMoreRanksNeedThanTheFanOutAreReadOnce) {
  const Manifest manifest = WithTensors({Stored("w", {64, 16}, Slabs({64, 16}, 0, 8))});
  std::vector<LoadRequest> requests = World(128);
  for (int r = 0; r < 128; ++r) requests[r].boxes.push_back(RequestedBox{0, Slabs({64, 16}, 0, 8)[r % 8]});
  LoadPlanOptions options;
  options.fan_out = 32;
  const LoadPlan plan = Plan(manifest, requests, options);
  EXPECT_EQ(plan.reads.size(), 8u);
  EXPECT_EQ(Sum(plan.read_bytes_per_rank), StoredBytesOf(manifest.tensors[0]));
  EXPECT_EQ(MostPartners(plan), 15u);
  ExpectExactCoverage(Needed(manifest, requests), Delivered(manifest, plan));
}

// ---- Resharding ----

struct Reshard {
  uint64_t saved_parts;
  size_t saved_dim;
  uint64_t loaded_parts;
  size_t loaded_dim;
};

class LoadPlanReshardTest : public ::testing::TestWithParam<Reshard> {};

// The blocks of its chunk that `transfer`'s region spans: [first, end).
std::pair<uint64_t, uint64_t> BlocksOf(const Manifest& manifest, const LoadPlan& plan, const Transfer& transfer) {
  const ChunkRecord& chunk = manifest.tensors[0].chunks[plan.reads[transfer.read].chunk];
  uint64_t begin = UINT64_MAX, end = 0;
  ForEachRun(chunk.box, transfer.region, transfer.region, 4, [&](uint64_t offset, uint64_t, uint64_t n) {
    begin = std::min(begin, offset);
    end = std::max(end, offset + n);
  });
  return {begin / chunk.bytes.block_size, (end + chunk.bytes.block_size - 1) / chunk.bytes.block_size};
}

// Every rank gets exactly its elements; every read serves its reader; the reads of one chunk are disjoint, so each
// stored byte is read once (a block that two ranks' rows share is read by one of them, which sends the other its
// part: issue #14).
TEST_P(LoadPlanReshardTest, CoversEveryRankExactlyAndReadsEachBlockOnce) {
  const Reshard p = GetParam();
  const Shape shape{30, 20};
  const Manifest manifest = WithTensors({Stored("w", shape, Slabs(shape, p.saved_dim, p.saved_parts))});
  std::vector<LoadRequest> requests = World(static_cast<int>(p.loaded_parts));
  AskOnePerRank(&requests, 0, Slabs(shape, p.loaded_dim, p.loaded_parts));
  const LoadPlan plan = Plan(manifest, requests);
  ExpectExactCoverage(Needed(manifest, requests), Delivered(manifest, plan));
  std::map<uint32_t, std::vector<const ChunkRead*>> reads_of_chunk;
  for (const ChunkRead& read : plan.reads) {
    const Box& chunk = manifest.tensors[0].chunks[read.chunk].box;
    EXPECT_TRUE(Intersect(chunk, requests[read.reader].boxes[0].box)) << "reader does not need chunk " << read.chunk;
    reads_of_chunk[read.chunk].push_back(&read);
  }
  for (auto& [chunk, reads] : reads_of_chunk) {
    for (size_t i = 1; i < reads.size(); ++i) {
      EXPECT_GE(reads[i]->first_block, reads[i - 1]->first_block + reads[i - 1]->block_count)
          << "chunk " << chunk << ": two reads share a block";
    }
  }
  EXPECT_EQ(Sum(plan.read_bytes_per_rank), StoredBytesOf(manifest.tensors[0]));  // read amplification 1.0
  if (p.saved_dim == 0 && p.loaded_dim == 0) {
    // Row slabs: every rank reads its own rows itself, but for a block it shares with the rank before it.
    for (const Transfer& transfer : plan.transfers) {
      const auto [first, end] = BlocksOf(manifest, plan, transfer);
      EXPECT_EQ(end, first + 1) << "a rank is sent more than the part of one shared block";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, LoadPlanReshardTest,
                         ::testing::Values(Reshard{4, 0, 3, 0}, Reshard{4, 1, 3, 1}, Reshard{4, 0, 3, 1},
                                           Reshard{2, 0, 4, 0}, Reshard{2, 1, 4, 1}, Reshard{2, 1, 4, 0},
                                           Reshard{3, 0, 5, 0}, Reshard{3, 1, 5, 1}, Reshard{3, 0, 5, 1}));

TEST(LoadPlanTest, ReadsOnlyTheBlocksOfTheNeededRows) {
  const Manifest manifest = WithTensors({Stored("w", {16, 16}, {WholeBox({16, 16})})});
  std::vector<LoadRequest> requests = World(1);
  requests[0].boxes.push_back(RequestedBox{0, Box{{4, 0}, {2, 16}}});
  const LoadPlan plan = Plan(manifest, requests);
  ASSERT_EQ(plan.reads.size(), 1u);
  EXPECT_EQ(plan.reads[0].first_block, 4u);  // one 64-byte block per row of 16 floats
  EXPECT_EQ(plan.reads[0].block_count, 2u);
  EXPECT_EQ(plan.reads[0].bytes, 128u);
}

TEST(LoadPlanTest, ScalarTensorIsReadOnceAndSent) {
  const Manifest manifest = WithTensors({Stored("step", {}, {Box{}})});
  std::vector<LoadRequest> requests = World(2);
  AskEverywhere(&requests, 0, Box{});
  const LoadPlan plan = Plan(manifest, requests);
  ASSERT_EQ(plan.reads.size(), 1u);
  EXPECT_EQ(plan.reads[0].bytes, 4u);
  ASSERT_EQ(plan.transfers.size(), 1u);
  EXPECT_EQ(plan.transfers[0].bytes, 4u);
}

TEST(LoadPlanTest, RankNeedingNothingReadsAndReceivesNothing) {
  const Manifest manifest = WithTensors({Stored("w", {12, 4}, Slabs({12, 4}, 0, 3))});
  std::vector<LoadRequest> requests = World(3);
  requests[0].boxes.push_back(RequestedBox{0, WholeBox({12, 4})});
  requests[2].boxes.push_back(RequestedBox{0, WholeBox({12, 4})});
  const LoadPlan plan = Plan(manifest, requests);
  EXPECT_EQ(plan.read_bytes_per_rank[1], 0u);
  EXPECT_TRUE(IncomingBatches(plan, 1).empty());
  EXPECT_TRUE(OutgoingBatches(plan, 1).empty());
  ExpectExactCoverage(Needed(manifest, requests), Delivered(manifest, plan));
}

TEST(LoadPlanTest, TensorNobodyNeedsIsNotRead) {
  const Manifest manifest =
      WithTensors({Stored("a", {8, 4}, Slabs({8, 4}, 0, 2)), Stored("b", {8, 4}, Slabs({8, 4}, 0, 2))});
  std::vector<LoadRequest> requests = World(2);
  AskEverywhere(&requests, 1, WholeBox({8, 4}));
  const LoadPlan plan = Plan(manifest, requests);
  ASSERT_EQ(plan.reads.size(), 2u);
  for (const ChunkRead& read : plan.reads) EXPECT_EQ(read.tensor, 1u);
}

TEST(LoadPlanTest, BalancesNodesBeforeRanks) {
  const Manifest manifest = WithTensors({Stored("w", {16, 4}, Slabs({16, 4}, 0, 4))});
  std::vector<LoadRequest> requests = World(4);
  for (int r = 0; r < 4; ++r) requests[r].node = r < 3 ? "a" : "b";
  AskEverywhere(&requests, 0, WholeBox({16, 4}));
  const LoadPlan plan = Plan(manifest, requests);
  const uint64_t chunk = 4 * 4 * 4;
  EXPECT_EQ(plan.read_bytes_per_rank, (std::vector<uint64_t>{chunk, chunk, 0, 2 * chunk}));
}

TEST(LoadPlanTest, SamePlanWhateverTheOrderOfRequests) {
  const Shape shape{30, 20};
  const Manifest manifest = WithTensors({Stored("a", shape, Slabs(shape, 0, 3)), Stored("b", shape, Slabs(shape, 1, 4)),
                                         Stored("c", {5}, Slabs({5}, 0, 5))});
  std::vector<LoadRequest> requests = World(6, 2);
  AskOnePerRank(&requests, 0, Slabs(shape, 1, 6));
  AskOnePerRank(&requests, 1, Slabs(shape, 0, 6));
  AskEverywhere(&requests, 2, WholeBox({5}));
  const LoadPlan reference = Plan(manifest, requests);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 5; ++trial) {
    std::shuffle(requests.begin(), requests.end(), rng);
    ExpectSamePlan(reference, Plan(manifest, requests));
  }
}

TEST(LoadPlanTest, RefusesRequestsThatAreNotOnePerRank) {
  const Manifest manifest = WithTensors({Stored("w", {8, 4}, Slabs({8, 4}, 0, 2))});
  std::vector<LoadRequest> requests = World(2);
  requests[1].rank = 0;
  const Status status = PlanLoad(manifest, requests).status();
  EXPECT_EQ(status.code(), Code::kInvalidArgument);
  EXPECT_NE(status.message().find("two requests claim this rank"), std::string::npos) << status.message();
}

TEST(LoadPlanTest, RefusesBoxOutsideTensor) {
  const Manifest manifest = WithTensors({Stored("w", {8, 4}, Slabs({8, 4}, 0, 2))});
  std::vector<LoadRequest> requests = World(2);
  requests[1].boxes.push_back(RequestedBox{0, Box{{0, 0}, {9, 4}}});
  EXPECT_EQ(PlanLoad(manifest, requests).status().code(), Code::kInvalidArgument);
}

TEST(LoadPlanTest, RefusesChunkWithoutBlockSize) {
  Manifest manifest = WithTensors({Stored("w", {8, 4}, Slabs({8, 4}, 0, 2))});
  manifest.tensors[0].chunks[1].bytes.block_size = 0;
  std::vector<LoadRequest> requests = World(1);
  AskEverywhere(&requests, 0, WholeBox({8, 4}));
  EXPECT_EQ(PlanLoad(manifest, requests).status().code(), Code::kCorrupt);
}

// ---- Batches ----

// Transfers of at least `separate_bytes` travel alone; "b" is 30 x 20 floats (2400 bytes) per replica.
LoadPlan MixedPlan(Manifest* manifest, uint64_t separate_bytes = 1 << 20) {
  const Shape shape{30, 20};
  // "c" holds one float per chunk, so that a batch packs pieces smaller than the alignment.
  *manifest = WithTensors({Stored("a", shape, Slabs(shape, 0, 3)), Stored("b", shape, Slabs(shape, 1, 2)),
                           Stored("c", {15}, Slabs({15}, 0, 15))});
  std::vector<LoadRequest> requests = World(5);
  AskOnePerRank(&requests, 0, Slabs(shape, 1, 5));
  AskEverywhere(&requests, 1, WholeBox(shape));
  AskEverywhere(&requests, 2, WholeBox({15}));
  LoadPlanOptions options;
  options.separate_bytes = separate_bytes;
  return Plan(*manifest, requests, options);
}

TEST(LoadPlanBatchesTest, ReaderAndConsumerAgreeOnLayout) {
  for (uint64_t separate_bytes : {uint64_t{1} << 20, uint64_t{1000}}) {
    Manifest manifest;
    const LoadPlan plan = MixedPlan(&manifest, separate_bytes);
    size_t pairs = 0;
    for (int reader = 0; reader < 5; ++reader) {
      for (const PeerBatch& out : OutgoingBatches(plan, reader)) {
        ++pairs;
        const std::vector<PeerBatch> incoming = IncomingBatches(plan, out.peer);
        auto in = std::find_if(incoming.begin(), incoming.end(), [&](const PeerBatch& b) { return b.peer == reader; });
        ASSERT_NE(in, incoming.end());
        EXPECT_EQ(in->packed, out.packed);
        EXPECT_EQ(in->offsets, out.offsets);
        EXPECT_EQ(in->packed_bytes, out.packed_bytes);
        EXPECT_EQ(in->separate, out.separate);
      }
    }
    size_t incoming_pairs = 0;
    for (int consumer = 0; consumer < 5; ++consumer) incoming_pairs += IncomingBatches(plan, consumer).size();
    EXPECT_EQ(pairs, incoming_pairs);
    EXPECT_GT(pairs, 0u);
  }
}

TEST(LoadPlanBatchesTest, PiecesAreAlignedDisjointAndCoverEveryTransfer) {
  for (uint64_t separate_bytes : {uint64_t{1} << 20, uint64_t{1000}}) {
    Manifest manifest;
    const LoadPlan plan = MixedPlan(&manifest, separate_bytes);
    size_t listed = 0;
    for (int rank = 0; rank < 5; ++rank) {
      for (const PeerBatch& batch : OutgoingBatches(plan, rank)) {
        uint64_t end = 0;
        for (size_t i = 0; i < batch.packed.size(); ++i) {
          EXPECT_EQ(batch.offsets[i] % kTransferAlignment, 0u);
          EXPECT_GE(batch.offsets[i], end);
          end = batch.offsets[i] + plan.transfers[batch.packed[i]].bytes;
        }
        EXPECT_EQ(batch.packed_bytes, end);
        listed += batch.packed.size() + batch.separate.size();
      }
    }
    EXPECT_EQ(listed, plan.transfers.size());
  }
}

TEST(LoadPlanBatchesTest, LargeTransfersTravelAloneAndSmallOnesArePacked) {
  Manifest manifest;
  const LoadPlan plan = MixedPlan(&manifest, 1000);
  size_t separate = 0;
  for (int rank = 0; rank < 5; ++rank) {
    for (const PeerBatch& batch : OutgoingBatches(plan, rank)) {
      for (size_t index : batch.packed) EXPECT_LT(plan.transfers[index].bytes, 1000u);
      for (size_t index : batch.separate) EXPECT_GE(plan.transfers[index].bytes, 1000u);
      separate += batch.separate.size();
    }
  }
  EXPECT_GT(separate, 0u);
  for (int rank = 0; rank < 5; ++rank) {
    for (const PeerBatch& batch : OutgoingBatches(MixedPlan(&manifest), rank)) EXPECT_TRUE(batch.separate.empty());
  }
}

}  // namespace
}  // namespace ckpt::runtime

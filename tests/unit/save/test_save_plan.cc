#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/save/save_plan.h"

namespace ckpt::runtime {
namespace {

constexpr int32_t kF32 = static_cast<int32_t>(DType::kF32);
constexpr int32_t kBF16 = static_cast<int32_t>(DType::kBF16);

TensorShardDesc Shard(const std::string& key, const Shape& global, const Shape& offset, const Shape& shape,
                      int32_t dtype = kF32) {
  return TensorShardDesc{key, dtype, global, Box{offset, shape}, {}};
}

TensorShardDesc Whole(const std::string& key, const Shape& global, int32_t dtype = kF32) {
  return Shard(key, global, Shape(global.size(), 0), global, dtype);
}

// `ranks` descriptors with no shards; rank r sits on node "node<r / ranks_per_node>".
std::vector<RankDescriptor> World(int ranks, int ranks_per_node = 1) {
  std::vector<RankDescriptor> all(ranks);
  for (int r = 0; r < ranks; ++r) {
    all[r].rank = r;
    all[r].node = "node" + std::to_string(r / ranks_per_node);
  }
  return all;
}

void AddEverywhere(std::vector<RankDescriptor>* all, const TensorShardDesc& shard) {
  for (auto& desc : *all) desc.tensors.push_back(shard);
}

// The statuses of the coverage check as run by every rank of the world.
std::vector<Status> CheckOnEveryRank(const std::vector<RankDescriptor>& all) {
  std::vector<Status> statuses;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) statuses.push_back(ValidateCoverage(all, r));
  return statuses;
}

void ExpectAccepted(const std::vector<RankDescriptor>& all) {
  for (const Status& status : CheckOnEveryRank(all)) EXPECT_TRUE(status.ok()) << status.message();
}

// The message of the only rank that rejects, which must be the checker of `key`.
std::string RejectionOf(const std::vector<RankDescriptor>& all, const std::string& key) {
  const std::vector<Status> statuses = CheckOnEveryRank(all);
  const int checker = KeyChecker(key, static_cast<int>(all.size()));
  for (int r = 0; r < static_cast<int>(statuses.size()); ++r) {
    if (r == checker) {
      EXPECT_EQ(statuses[r].code(), Code::kMismatch);
    } else {
      EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].message();
    }
  }
  return statuses[checker].message();
}

// ---- Descriptor encoding ----

RankDescriptor SampleDescriptor() {
  RankDescriptor desc;
  desc.rank = 3;
  desc.node = "host-a";
  desc.tensors.push_back(Shard("layer.0.w", {8, 6}, {4, 0}, {4, 6}));
  desc.tensors.back().replica_id = {1, 0};
  desc.tensors.push_back(Whole("step", {}, static_cast<int32_t>(DType::kI64)));
  desc.objects.push_back(ObjectShardDesc{"rng", {4}, {3}, 5000});
  return desc;
}

TEST(RankDescriptorTest, RoundTrips) {
  const RankDescriptor desc = SampleDescriptor();
  auto decoded = DecodeRankDescriptor(EncodeRankDescriptor(desc), 3);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(decoded->rank, 3);
  EXPECT_EQ(decoded->node, "host-a");
  ASSERT_EQ(decoded->tensors.size(), 2u);
  EXPECT_EQ(decoded->tensors[0].key, "layer.0.w");
  EXPECT_EQ(decoded->tensors[0].global_shape, (Shape{8, 6}));
  EXPECT_EQ(decoded->tensors[0].box, (Box{{4, 0}, {4, 6}}));
  EXPECT_EQ(decoded->tensors[0].replica_id, (std::vector<uint32_t>{1, 0}));
  EXPECT_EQ(decoded->tensors[1].dtype, static_cast<int32_t>(DType::kI64));
  ASSERT_EQ(decoded->objects.size(), 1u);
  EXPECT_EQ(decoded->objects[0].index, (Shape{3}));
  EXPECT_EQ(decoded->objects[0].size, 5000u);
}

TEST(RankDescriptorTest, RefusesEveryTruncation) {
  const std::string bytes = EncodeRankDescriptor(SampleDescriptor());
  for (size_t length = 0; length < bytes.size(); ++length) {
    auto decoded = DecodeRankDescriptor(std::string_view(bytes).substr(0, length), 3);
    ASSERT_FALSE(decoded.ok()) << "length " << length;
    EXPECT_EQ(decoded.status().code(), Code::kCorrupt);
    EXPECT_NE(decoded.status().message().find("rank 3"), std::string::npos) << decoded.status().message();
  }
}

TEST(RankDescriptorTest, RefusesTrailingBytes) {
  auto decoded = DecodeRankDescriptor(EncodeRankDescriptor(SampleDescriptor()) + "x", 3);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("trailing"), std::string::npos) << decoded.status().message();
}

TEST(RankDescriptorTest, RefusesMoreThanEightDimensions) {
  RankDescriptor desc;
  desc.tensors.push_back(Whole("big", Shape(9, 1)));
  auto decoded = DecodeRankDescriptor(EncodeRankDescriptor(desc), 0);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("tensor 'big' global shape has 9 dimensions, at most 8"), std::string::npos)
      << decoded.status().message();
}

TEST(RankDescriptorTest, RefusesBoxOfAnotherRank) {
  RankDescriptor desc;
  desc.tensors.push_back(Shard("w", {8, 8}, {0}, {8}));
  auto decoded = DecodeRankDescriptor(EncodeRankDescriptor(desc), 0);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), Code::kCorrupt);
}

TEST(RankDescriptorTest, RefusesUnknownDtype) {
  RankDescriptor desc;
  desc.tensors.push_back(Whole("w", {4}, 99));
  auto decoded = DecodeRankDescriptor(EncodeRankDescriptor(desc), 0);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("dtype 99"), std::string::npos) << decoded.status().message();
}

TEST(RankDescriptorTest, RefusesObjectIndexOfAnotherRank) {
  RankDescriptor desc;
  desc.objects.push_back(ObjectShardDesc{"o", {2, 2}, {1}, 4});
  EXPECT_FALSE(DecodeRankDescriptor(EncodeRankDescriptor(desc), 0).ok());
}

TEST(RankDescriptorTest, RefusesDescriptorClaimingAnotherRank) {
  auto decoded = DecodeRankDescriptor(EncodeRankDescriptor(SampleDescriptor()), 2);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("claim rank 3"), std::string::npos) << decoded.status().message();
}

TEST(RankDescriptorTest, RefusesHugeShardCount) {
  std::string bytes = EncodeRankDescriptor(RankDescriptor{});
  // The tensor count follows the rank (4 bytes) and the empty node name (8 bytes).
  std::fill(bytes.begin() + 12, bytes.begin() + 16, '\xff');
  auto decoded = DecodeRankDescriptor(bytes, 0);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("count"), std::string::npos) << decoded.status().message();
}

TEST(RankDescriptorTest, SurvivesGarbageAndCorruption) {
  std::mt19937_64 rng(5);
  const std::string valid = EncodeRankDescriptor(SampleDescriptor());
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes = valid;
    if (trial % 2 == 0) {
      bytes.resize(rng() % 200);
      for (auto& c : bytes) c = static_cast<char>(rng());
    } else {
      for (int flips = 0; flips < 3; ++flips) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    auto decoded = DecodeRankDescriptor(bytes, 3);
    if (!decoded.ok()) {
      EXPECT_EQ(decoded.status().code(), Code::kCorrupt);
    }
  }
}

// ---- Key checker ----

TEST(KeyCheckerTest, IsFnv1aModuloWorld) {
  // FNV-1a of "" is its offset basis, 14695981039346656037.
  EXPECT_EQ(KeyChecker("", 1000), 37);
  EXPECT_EQ(KeyChecker("anything", 1), 0);
}

TEST(KeyCheckerTest, SpreadsKeysOverAllRanks) {
  std::vector<int> keys_per_rank(8, 0);
  for (int i = 0; i < 1000; ++i) ++keys_per_rank[KeyChecker("layers." + std::to_string(i) + ".weight", 8)];
  for (int count : keys_per_rank) EXPECT_GT(count, 60);
}

// ---- Coverage ----

TEST(CoverageTest, AcceptsTensorParallelTimesDataParallel) {
  // TP=2 splits the columns; DP=2 replicates each TP shard.
  auto all = World(4);
  for (int r = 0; r < 4; ++r) {
    const uint64_t tp = r % 2;
    all[r].tensors.push_back(Shard("w", {8, 6}, {0, 3 * tp}, {8, 3}));
    all[r].tensors.push_back(Shard("b", {8}, {4 * tp}, {4}));
  }
  ExpectAccepted(all);
}

TEST(CoverageTest, AcceptsUnevenSplit) {
  auto all = World(3);
  all[0].tensors.push_back(Shard("w", {10, 3}, {0, 0}, {4, 3}));
  all[1].tensors.push_back(Shard("w", {10, 3}, {4, 0}, {3, 3}));
  all[2].tensors.push_back(Shard("w", {10, 3}, {7, 0}, {3, 3}));
  ExpectAccepted(all);
}

TEST(CoverageTest, AcceptsFlattenedPieces) {
  // A distributed optimizer's flat ranges of a 5x7 tensor, each split into regular boxes.
  auto all = World(3);
  const uint64_t bounds[] = {0, 11, 23, 35};
  for (int r = 0; r < 3; ++r) {
    for (const FlatPiece& piece : DecomposeFlatRange(WholeBox({5, 7}), bounds[r], bounds[r + 1])) {
      all[r].tensors.push_back(Shard("exp_avg", {5, 7}, piece.box.offset, piece.box.shape));
    }
  }
  ExpectAccepted(all);
}

TEST(CoverageTest, AcceptsScalarsAndEmptyTensors) {
  auto all = World(2);
  AddEverywhere(&all, Whole("step", {}));
  AddEverywhere(&all, Whole("nothing", {0, 4}));
  ExpectAccepted(all);
}

TEST(CoverageTest, RejectsGap) {
  auto all = World(2);
  all[0].tensors.push_back(Shard("w", {10, 4}, {0, 0}, {4, 4}));
  all[1].tensors.push_back(Shard("w", {10, 4}, {5, 0}, {5, 4}));
  const std::string message = RejectionOf(all, "w");
  EXPECT_NE(message.find("tensor 'w'"), std::string::npos) << message;
  EXPECT_NE(message.find("4 of 40 elements"), std::string::npos) << message;
}

TEST(CoverageTest, RejectsOverlapNamingBoxesAndRanks) {
  auto all = World(3);
  all[0].tensors.push_back(Shard("w", {10, 4}, {0, 0}, {6, 4}));
  all[1].tensors.push_back(Shard("w", {10, 4}, {0, 0}, {6, 4}));
  all[2].tensors.push_back(Shard("w", {10, 4}, {4, 0}, {6, 4}));
  const std::string message = RejectionOf(all, "w");
  EXPECT_NE(message.find("tensor 'w': box [0:6, 0:4] on ranks 0, 1 overlaps box [4:10, 0:4] on rank 2"),
            std::string::npos)
      << message;
}

TEST(CoverageTest, RejectsOverlapAlongALaterDimension) {
  auto all = World(3);
  all[0].tensors.push_back(Shard("w", {4, 12}, {0, 0}, {4, 4}));
  all[1].tensors.push_back(Shard("w", {4, 12}, {0, 4}, {4, 5}));
  all[2].tensors.push_back(Shard("w", {4, 12}, {0, 8}, {4, 4}));
  const std::string message = RejectionOf(all, "w");
  EXPECT_NE(message.find("[0:4, 4:9] on rank 1 overlaps box [0:4, 8:12] on rank 2"), std::string::npos) << message;
}

TEST(CoverageTest, RejectsBoxOutOfBounds) {
  auto all = World(2);
  all[0].tensors.push_back(Shard("w", {8}, {0}, {4}));
  all[1].tensors.push_back(Shard("w", {8}, {4}, {5}));
  const std::string message = RejectionOf(all, "w");
  EXPECT_NE(message.find("box [4:9] on rank 1 lies outside the global shape [8]"), std::string::npos) << message;
}

TEST(CoverageTest, RejectsDtypeMismatchNamingRanks) {
  auto all = World(4);
  for (int r = 0; r < 4; ++r) all[r].tensors.push_back(Whole("w", {4}, r == 2 ? kBF16 : kF32));
  const std::string message = RejectionOf(all, "w");
  EXPECT_NE(message.find("tensor 'w': dtype F32 on rank 0 but BF16 on rank 2"), std::string::npos) << message;
}

TEST(CoverageTest, RejectsGlobalShapeMismatchNamingRanks) {
  auto all = World(2);
  all[0].tensors.push_back(Shard("w", {8, 4}, {0, 0}, {4, 4}));
  all[1].tensors.push_back(Shard("w", {8, 5}, {4, 0}, {4, 5}));
  const std::string message = RejectionOf(all, "w");
  EXPECT_NE(message.find("tensor 'w': global shape [8, 4] on rank 0 but [8, 5] on rank 1"), std::string::npos)
      << message;
}

TEST(CoverageTest, OnlyTheCheckerRankReportsAKey) {
  // RejectionOf fails if any rank other than the key's checker reports it.
  auto all = World(5);
  all[0].tensors.push_back(Shard("only.half", {8}, {0}, {4}));
  RejectionOf(all, "only.half");
}

TEST(CoverageTest, ListsAtMostFiveProblems) {
  auto all = World(1);
  for (int i = 0; i < 8; ++i) all[0].tensors.push_back(Shard("w" + std::to_string(i), {8}, {0}, {4}));
  const Status status = ValidateCoverage(all, 0);
  EXPECT_NE(status.message().find("found 8 problems"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("and 3 more"), std::string::npos) << status.message();
  EXPECT_EQ(status.message().find("'w5'"), std::string::npos) << status.message();
}

TEST(CoverageTest, RejectsDescriptorsOutOfRankOrder) {
  auto all = World(2);
  std::swap(all[0], all[1]);
  EXPECT_EQ(ValidateCoverage(all, 0).code(), Code::kMismatch);
}

TEST(CoverageTest, RejectsKeyThatIsBothTensorAndObject) {
  auto all = World(2);
  all[0].tensors.push_back(Whole("x", {4}));
  all[1].objects.push_back(ObjectShardDesc{"x", {}, {}, 8});
  const std::string message = RejectionOf(all, "x");
  EXPECT_NE(message.find("key 'x' is a tensor on rank 0 and an object on rank 1"), std::string::npos) << message;
}

TEST(CoverageTest, AcceptsCompleteObjectGrid) {
  auto all = World(2);
  for (uint64_t cell = 0; cell < 4; ++cell) {
    all[cell % 2].objects.push_back(ObjectShardDesc{"rng", {2, 2}, {cell / 2, cell % 2}, 100});
  }
  all[1].objects.push_back(ObjectShardDesc{"rng", {2, 2}, {0, 0}, 100});
  ExpectAccepted(all);
}

TEST(CoverageTest, RejectsMissingObjectCell) {
  auto all = World(2);
  all[0].objects.push_back(ObjectShardDesc{"rng", {3}, {0}, 100});
  all[1].objects.push_back(ObjectShardDesc{"rng", {3}, {2}, 100});
  const std::string message = RejectionOf(all, "rng");
  EXPECT_NE(message.find("object 'rng': 1 of 3 cells are held by no rank, the first [1]"), std::string::npos)
      << message;
}

TEST(CoverageTest, RejectsObjectReplicasOfDifferentSizes) {
  auto all = World(2);
  all[0].objects.push_back(ObjectShardDesc{"cfg", {}, {}, 100});
  all[1].objects.push_back(ObjectShardDesc{"cfg", {}, {}, 120});
  const std::string message = RejectionOf(all, "cfg");
  EXPECT_NE(message.find("100 bytes on rank 0 but 120 on rank 1"), std::string::npos) << message;
}

TEST(CoverageTest, RejectsObjectGridMismatch) {
  auto all = World(2);
  all[0].objects.push_back(ObjectShardDesc{"rng", {2}, {0}, 8});
  all[1].objects.push_back(ObjectShardDesc{"rng", {3}, {1}, 8});
  const std::string message = RejectionOf(all, "rng");
  EXPECT_NE(message.find("grid [2] on rank 0 but [3] on rank 1"), std::string::npos) << message;
}

// ---- Planning ----

uint64_t TotalBytes(const SavePlan& plan) {
  uint64_t total = 0;
  for (const auto& item : plan.items) total += item.bytes;
  return total;
}

// Every tensor item lies inside a box its writer holds, and bytes_per_rank adds up the items.
void ExpectConsistentPlan(const std::vector<RankDescriptor>& all, const SavePlan& plan) {
  std::vector<uint64_t> per_rank(all.size(), 0);
  for (const auto& item : plan.items) {
    per_rank[item.writer] += item.bytes;
    if (item.is_object) continue;
    const auto& held = all[item.writer].tensors;
    EXPECT_TRUE(std::any_of(held.begin(), held.end(),
                            [&](const TensorShardDesc& t) { return t.key == item.key && Contains(t.box, item.box); }))
        << item.key << " " << item.box.ToString() << " on rank " << item.writer;
  }
  EXPECT_EQ(per_rank, plan.bytes_per_rank);
}

TEST(PlanSaveTest, WritesAReplicatedTensorOnce) {
  auto all = World(4);
  AddEverywhere(&all, Whole("w", {100, 10}));
  const SavePlan plan = PlanSave(all, {});
  ASSERT_EQ(plan.items.size(), 1u);
  EXPECT_EQ(TotalBytes(plan), 4000u);
  ExpectConsistentPlan(all, plan);
}

TEST(PlanSaveTest, EachTensorParallelShardIsWrittenByAHolder) {
  auto all = World(4);
  for (int r = 0; r < 4; ++r) all[r].tensors.push_back(Shard("w", {8, 6}, {0, 3 * uint64_t(r % 2)}, {8, 3}));
  const SavePlan plan = PlanSave(all, {});
  EXPECT_EQ(plan.items.size(), 2u);
  EXPECT_EQ(TotalBytes(plan), 8u * 6 * 4);
  ExpectConsistentPlan(all, plan);
}

TEST(PlanSaveTest, BalancesReplicatedTensorsWithinOneItem) {
  auto all = World(4);
  for (auto& desc : all) {
    for (uint64_t i = 0; i < 8; ++i) desc.tensors.push_back(Whole("t" + std::to_string(i), {100 + 37 * i}));
  }
  const SavePlan plan = PlanSave(all, {});
  ASSERT_EQ(plan.items.size(), 8u);
  uint64_t largest = 0;
  for (const auto& item : plan.items) largest = std::max(largest, item.bytes);
  const auto [least, most] = std::minmax_element(plan.bytes_per_rank.begin(), plan.bytes_per_rank.end());
  EXPECT_LE(*most - *least, largest);
  EXPECT_GT(*least, 0u);
  ExpectConsistentPlan(all, plan);
}

uint64_t NodeBytes(const std::vector<RankDescriptor>& all, const SavePlan& plan, const std::string& node) {
  uint64_t bytes = 0;
  for (const auto& desc : all) {
    if (desc.node == node) bytes += plan.bytes_per_rank[desc.rank];
  }
  return bytes;
}

TEST(PlanSaveTest, BalancesNodesFirst) {
  auto all = World(4, 2);
  for (int i = 0; i < 6; ++i) AddEverywhere(&all, Whole("t" + std::to_string(i), {256}));
  const SavePlan plan = PlanSave(all, {});
  EXPECT_EQ(NodeBytes(all, plan, "node0"), NodeBytes(all, plan, "node1"));
}

TEST(PlanSaveTest, BalancesNodesOfUnequalRankCounts) {
  // Three ranks on node0 and one on node1: balancing ranks alone would put three quarters on node0.
  auto all = World(4, 3);
  for (int i = 0; i < 8; ++i) AddEverywhere(&all, Whole("t" + std::to_string(i), {256}));
  const SavePlan plan = PlanSave(all, {});
  EXPECT_EQ(NodeBytes(all, plan, "node0"), NodeBytes(all, plan, "node1"));
}

TEST(PlanSaveTest, SplitsALargeReplicatedTensorAmongItsHolders) {
  auto all = World(4);
  AddEverywhere(&all, Whole("embedding", {16384, 16384}));  // 1 GiB of F32; only the shape is needed
  const SavePlan plan = PlanSave(all, SavePlanOptions{64ull << 20});
  ASSERT_EQ(plan.items.size(), 4u);
  std::vector<int> writers;
  uint64_t next_row = 0;
  std::vector<WriteItem> by_row = plan.items;
  std::sort(by_row.begin(), by_row.end(), [](const auto& a, const auto& b) { return a.box < b.box; });
  for (const auto& item : by_row) {
    writers.push_back(item.writer);
    EXPECT_EQ(item.bytes, 256ull << 20);
    EXPECT_EQ(item.box, (Box{{next_row, 0}, {4096, 16384}}));
    next_row += 4096;
  }
  std::sort(writers.begin(), writers.end());
  EXPECT_EQ(writers, (std::vector<int>{0, 1, 2, 3}));
}

TEST(PlanSaveTest, DoesNotSplitABoxWithOneHolder) {
  auto all = World(4);
  for (int r = 0; r < 4; ++r) {
    all[r].tensors.push_back(Shard("w", {4 * 8192, 8192}, {8192 * uint64_t(r), 0}, {8192, 8192}));
  }
  const SavePlan plan = PlanSave(all, SavePlanOptions{1 << 20});
  EXPECT_EQ(plan.items.size(), 4u);
  ExpectConsistentPlan(all, plan);
}

TEST(PlanSaveTest, WritesAReplicatedObjectCellOnce) {
  auto all = World(3);
  for (auto& desc : all) desc.objects.push_back(ObjectShardDesc{"cfg", {}, {}, 77});
  const SavePlan plan = PlanSave(all, {});
  ASSERT_EQ(plan.items.size(), 1u);
  EXPECT_TRUE(plan.items[0].is_object);
  EXPECT_EQ(plan.items[0].bytes, 77u);
}

TEST(PlanSaveTest, KeepsOneItemForATensorWithNoElements) {
  auto all = World(2);
  AddEverywhere(&all, Whole("nothing", {0, 4}));
  const SavePlan plan = PlanSave(all, {});
  ASSERT_EQ(plan.items.size(), 1u);
  EXPECT_EQ(plan.items[0].key, "nothing");
  EXPECT_EQ(plan.items[0].bytes, 0u);
}

// A world with TP x DP tensors, flattened optimizer pieces, replicated tensors and objects.
std::vector<RankDescriptor> MixedWorld() {
  auto all = World(8, 4);
  for (int r = 0; r < 8; ++r) {
    const uint64_t tp = r % 4;
    for (int layer = 0; layer < 5; ++layer) {
      all[r].tensors.push_back(Shard("l" + std::to_string(layer) + ".w", {64, 32}, {16 * tp, 0}, {16, 32}));
    }
    for (const FlatPiece& piece : DecomposeFlatRange(WholeBox({9, 13}), r * 117 / 8, (r + 1) * 117 / 8)) {
      all[r].tensors.push_back(Shard("opt", {9, 13}, piece.box.offset, piece.box.shape));
    }
    all[r].tensors.push_back(Whole("norm", {512}));
    all[r].objects.push_back(ObjectShardDesc{"rng", {8}, {uint64_t(r)}, 64});
    all[r].objects.push_back(ObjectShardDesc{"cfg", {}, {}, 300});
  }
  return all;
}

auto ItemTuple(const WriteItem& item) {
  return std::tie(item.writer, item.is_object, item.key, item.box, item.index, item.bytes);
}

TEST(PlanSaveTest, MixedWorldIsCoveredAndConsistent) {
  const auto all = MixedWorld();
  ExpectAccepted(all);
  const SavePlan plan = PlanSave(all, {});
  ExpectConsistentPlan(all, plan);
  EXPECT_EQ(TotalBytes(plan), 5u * 64 * 32 * 4 + 9 * 13 * 4 + 512 * 4 + 8 * 64 + 300);
}

TEST(PlanSaveTest, ItemsAreSortedByWriterThenKind) {
  const SavePlan plan = PlanSave(MixedWorld(), {});
  for (size_t i = 1; i < plan.items.size(); ++i) {
    const WriteItem& a = plan.items[i - 1];
    const WriteItem& b = plan.items[i];
    EXPECT_LT(std::tie(a.writer, a.is_object, a.key, a.box, a.index),
              std::tie(b.writer, b.is_object, b.key, b.box, b.index));
  }
}

TEST(PlanSaveTest, IsIndependentOfDescriptorOrderWithinRanks) {
  const auto all = MixedWorld();
  auto shuffled = all;
  std::mt19937_64 rng(9);
  for (auto& desc : shuffled) {
    std::shuffle(desc.tensors.begin(), desc.tensors.end(), rng);
    std::shuffle(desc.objects.begin(), desc.objects.end(), rng);
  }
  const SavePlan expected = PlanSave(all, {});
  const SavePlan actual = PlanSave(shuffled, {});
  ASSERT_EQ(actual.items.size(), expected.items.size());
  for (size_t i = 0; i < expected.items.size(); ++i) {
    EXPECT_EQ(ItemTuple(actual.items[i]), ItemTuple(expected.items[i]));
  }
  EXPECT_EQ(actual.bytes_per_rank, expected.bytes_per_rank);
}

}  // namespace
}  // namespace ckpt::runtime

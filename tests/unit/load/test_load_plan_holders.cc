// Loads from a memory copy that no node holds whole: the table of which nodes hold which data files
// (runtime/format/file_holders.h) and the planner's readers limited to it (LoadPlanOptions::holders).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/format/file_holders.h"
#include "runtime/load/load_plan.h"
#include "tests/unit/load/load_plan_testing.h"

namespace ckpt::runtime {
namespace {

FileHolders MakeHolders(std::vector<FileHolders::Node> nodes, int world, uint32_t files) {
  Result<FileHolders> holders = FileHolders::Make(std::move(nodes), world, files);
  EXPECT_TRUE(holders.ok()) << holders.status().message();
  return holders.ok() ? std::move(holders).value() : FileHolders{};
}

TEST(FileHoldersTest, AnswersWhoHoldsWhatAndRoundTripsAsRuns) {
  const FileHolders holders = MakeHolders({{{1, 0}, {5, 0, 1, 2}}, {{3, 2}, {2, 3}}, {{4}, {}}}, 6, 7);
  EXPECT_TRUE(holders.Holds(1, 5));
  EXPECT_TRUE(holders.Holds(0, 2));
  EXPECT_TRUE(holders.Holds(3, 2));
  EXPECT_FALSE(holders.Holds(2, 0));
  EXPECT_FALSE(holders.Holds(4, 0));
  EXPECT_FALSE(holders.Holds(5, 0)) << "rank 5 is on no node of the table";
  EXPECT_EQ(holders.NodeOf(5), -1);
  EXPECT_EQ(holders.NodeOf(4), 2);
  EXPECT_EQ(holders.NodesHolding(2), (std::vector<uint32_t>{0, 1}));
  EXPECT_TRUE(holders.NodesHolding(7).empty()) << "a file index past the table's";
  EXPECT_EQ(holders.Unheld(), (std::vector<uint32_t>{4, 6}));

  const std::string encoded = holders.Encode();
  Result<FileHolders> decoded = FileHolders::Decode(encoded, 6, 7);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  ASSERT_EQ(decoded->nodes().size(), 3u);
  EXPECT_EQ(decoded->nodes()[0].ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(decoded->nodes()[0].files, (std::vector<uint32_t>{0, 1, 2, 5}));
  EXPECT_EQ(decoded->digest(), holders.digest());
  // Runs, not values: a node of 1000 consecutive files costs one run.
  std::vector<uint32_t> many(1000);
  for (uint32_t i = 0; i < many.size(); ++i) many[i] = i;
  EXPECT_LT(MakeHolders({{{0}, many}}, 1, 1000).Encode().size(), 64u);
}

TEST(FileHoldersTest, RefusesARankOnTwoNodesOrOutsideTheJobAndAFileOutsideTheManifest) {
  EXPECT_EQ(FileHolders::Make({{{0}, {}}, {{0}, {}}}, 2, 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(FileHolders::Make({{{2}, {}}}, 2, 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(FileHolders::Make({{{0}, {1}}}, 2, 1).status().code(), Code::kInvalidArgument);
}

TEST(FileHoldersTest, DecodeRefusesEveryTruncationAndRunsBeyondTheJob) {
  const std::string encoded = MakeHolders({{{0, 1}, {0, 2}}, {{2}, {1}}}, 3, 3).Encode();
  for (size_t n = 0; n < encoded.size(); ++n) {
    EXPECT_EQ(FileHolders::Decode(encoded.substr(0, n), 3, 3).status().code(), Code::kCorrupt) << n;
  }
  EXPECT_EQ(FileHolders::Decode(encoded + "x", 3, 3).status().code(), Code::kCorrupt);
  EXPECT_EQ(FileHolders::Decode(encoded, 2, 3).status().code(), Code::kCorrupt) << "rank 2 in a job of 2";
  EXPECT_EQ(FileHolders::Decode(encoded, 3, 2).status().code(), Code::kCorrupt) << "file 2 of 2";
}

// Tensor "w" of 16 x 4 F32 in `chunks` row slabs of one 64-byte block each, stored in `files` files in order (the
// first chunks in file 0).
Manifest SpreadOverFiles(uint64_t chunks, uint32_t files) {
  std::vector<Box> boxes;
  for (uint64_t c = 0; c < chunks; ++c) boxes.push_back(Box{{c * (16 / chunks), 0}, {16 / chunks, 4}});
  Manifest manifest = WithTensors({Stored("w", {16, 4}, boxes)});
  manifest.files.clear();
  for (uint32_t f = 0; f < files; ++f)
    manifest.files.push_back(DataFileRecord{"data/" + std::to_string(f) + "-0.bin", 1 << 20});
  for (uint64_t c = 0; c < chunks; ++c)
    manifest.tensors[0].chunks[c].bytes.file_index = static_cast<uint32_t>(c * files / chunks);
  return manifest;
}

// Every element each rank asked for arrives once (read by its reader or sent to it), and each chunk is read once.
void ExpectServedOnce(const Manifest& manifest, const std::vector<LoadRequest>& requests, const LoadPlan& plan) {
  std::map<std::pair<int, uint64_t>, int> delivered;  // (rank, element of "w") -> times
  auto paint = [&](int rank, const Box& region) {
    for (uint64_t r = region.offset[0]; r < region.offset[0] + region.shape[0]; ++r) {
      for (uint64_t c = region.offset[1]; c < region.offset[1] + region.shape[1]; ++c) ++delivered[{rank, r * 4 + c}];
    }
  };
  for (const Transfer& t : plan.transfers) paint(t.consumer, t.region);
  for (const Transfer& t : plan.local_copies) paint(t.consumer, t.region);
  for (const LoadRequest& request : requests) {
    for (const RequestedBox& asked : request.boxes) {
      for (uint64_t r = asked.box.offset[0]; r < asked.box.offset[0] + asked.box.shape[0]; ++r) {
        for (uint64_t c = asked.box.offset[1]; c < asked.box.offset[1] + asked.box.shape[1]; ++c) {
          EXPECT_EQ((delivered[{request.rank, r * 4 + c}]), 1) << "rank " << request.rank << ", row " << r;
        }
      }
    }
  }
  std::set<uint32_t> chunks;
  for (const ChunkRead& read : plan.reads) EXPECT_TRUE(chunks.insert(read.chunk).second) << "chunk " << read.chunk;
  (void)manifest;
}

TEST(LoadPlanHoldersTest, EachChunkIsReadByANeedingRankWhoseNodeHoldsItsFile) {
  const Manifest manifest = SpreadOverFiles(4, 2);
  std::vector<LoadRequest> requests = World(4, 2);
  for (LoadRequest& request : requests) request.boxes.push_back(RequestedBox{0, WholeBox({16, 4})});
  const FileHolders holders = MakeHolders({{{0, 1}, {0}}, {{2, 3}, {1}}}, 4, 2);
  LoadPlanOptions options;
  options.holders = &holders;
  Result<LoadPlan> plan = PlanLoad(manifest, requests, options);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  for (const ChunkRead& read : plan->reads) {
    const uint32_t file = manifest.tensors[0].chunks[read.chunk].bytes.file_index;
    EXPECT_TRUE(holders.Holds(read.reader, file)) << "rank " << read.reader << " reads chunk " << read.chunk;
  }
  ExpectServedOnce(manifest, requests, *plan);
  // Without the table, a node reads chunks whose file it lacks.
  Result<LoadPlan> unconstrained = PlanLoad(manifest, requests, LoadPlanOptions{});
  ASSERT_TRUE(unconstrained.ok());
  bool outside = false;
  for (const ChunkRead& read : unconstrained->reads) {
    outside |= !holders.Holds(read.reader, manifest.tensors[0].chunks[read.chunk].bytes.file_index);
  }
  EXPECT_TRUE(outside) << "the test's layout does not tell the two plans apart";
}

TEST(LoadPlanHoldersTest, ARankOfANodeThatHoldsTheFileReadsWhatOnlyAReplacedNodeNeedsAndSendsIt) {
  // Ranks 0 and 1 are on a replaced node that holds no data file; ranks 2 and 3 on the node that holds both.
  const Manifest manifest = SpreadOverFiles(4, 2);
  std::vector<LoadRequest> requests = World(4, 2);
  for (int r = 0; r < 4; ++r) requests[r].boxes.push_back(RequestedBox{0, Box{{4ull * r, 0}, {4, 4}}});
  const FileHolders holders = MakeHolders({{{0, 1}, {}}, {{2, 3}, {0, 1}}}, 4, 2);
  LoadPlanOptions options;
  options.holders = &holders;
  Result<LoadPlan> plan = PlanLoad(manifest, requests, options);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->reads.size(), 4u);
  for (const ChunkRead& read : plan->reads) EXPECT_GE(read.reader, 2) << "chunk " << read.chunk;
  // The two chunks the replaced node needs go one to each holding rank, and travel whole.
  EXPECT_EQ(plan->read_bytes_per_rank, (std::vector<uint64_t>{0, 0, 2 * 64, 2 * 64}));
  uint64_t sent_to_replaced = 0;
  for (const Transfer& t : plan->transfers) sent_to_replaced += t.consumer < 2 ? t.bytes : 0;
  EXPECT_EQ(sent_to_replaced, 2u * 64);
  ExpectServedOnce(manifest, requests, *plan);
}

TEST(LoadPlanHoldersTest, AFileNoNodeHoldsFailsThePlanNamingTheFileAndTensor) {
  const Manifest manifest = SpreadOverFiles(2, 2);
  std::vector<LoadRequest> requests = World(2, 1);
  for (LoadRequest& request : requests) request.boxes.push_back(RequestedBox{0, WholeBox({16, 4})});
  const FileHolders holders = MakeHolders({{{0}, {0}}, {{1}, {0}}}, 2, 2);
  LoadPlanOptions options;
  options.holders = &holders;
  Result<LoadPlan> plan = PlanLoad(manifest, requests, options);
  ASSERT_EQ(plan.status().code(), Code::kNotFound);
  EXPECT_NE(plan.status().message().find("'data/1-0.bin' (of tensor 'w')"), std::string::npos)
      << plan.status().message();
}

}  // namespace
}  // namespace ckpt::runtime

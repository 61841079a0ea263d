// CheckReplicas (runtime/save/replica_check.h): the replicas that every rank checksummed against the written copy,
// and what the refusal says when they differ.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/save/replica_check.h"

namespace ckpt::runtime {
namespace {

constexpr uint64_t kBlock = 1 << 20;

WrittenItem Tensor(const std::string& key, std::vector<uint64_t> sums) {
  WrittenItem item;
  item.key = key;
  item.box = Box{{0, 0}, {1024, 1024}};
  item.bytes.byte_length = sums.size() * kBlock;
  item.bytes.block_size = kBlock;
  item.bytes.block_checksums = std::move(sums);
  return item;
}

// `ranks` reports; the copy of `key` on rank `writer` is written, the others are replicas, rank r's with `sums[r]`.
std::vector<WriterReport> Copies(const std::string& key, int writer, const std::vector<std::vector<uint64_t>>& sums) {
  std::vector<WriterReport> reports(sums.size());
  for (size_t r = 0; r < sums.size(); ++r) {
    (static_cast<int>(r) == writer ? reports[r].items : reports[r].replicas).push_back(Tensor(key, sums[r]));
  }
  return reports;
}

const std::vector<uint64_t> kGood = {11, 12, 13, 14};
const std::vector<uint64_t> kBlock2Flipped = {11, 12, 99, 14};

std::string Refusal(const std::vector<WriterReport>& reports) {
  const Status status = CheckReplicas(reports);
  EXPECT_EQ(status.code(), Code::kCorrupt) << status.message();
  return status.message();
}

TEST(ReplicaCheckTest, EqualCopiesPass) { EXPECT_TRUE(CheckReplicas(Copies("w", 1, {kGood, kGood, kGood})).ok()); }

TEST(ReplicaCheckTest, ReportsWithoutReplicasPass) {
  std::vector<WriterReport> reports(2);
  reports[0].items.push_back(Tensor("w", kGood));
  EXPECT_TRUE(CheckReplicas(reports).ok());
}

TEST(ReplicaCheckTest, AFlippedReplicaIsNamedWithItsBlockAgainstTheMajority) {
  const std::string message = Refusal(Copies("w", 0, {kGood, kGood, kBlock2Flipped}));
  EXPECT_NE(message.find("tensor 'w' box [0:1024, 0:1024]: block 2 of 4 (1048576 bytes each) differs: ranks 0 "
                         "(written) and 1 agree (the most copies); rank 2 differs from them"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("not committed"), std::string::npos) << message;
}

TEST(ReplicaCheckTest, AWrittenCopyOutvotedByTheReplicasIsNamedAsTheOneThatDiffers) {
  const std::string message = Refusal(Copies("w", 1, {kGood, kBlock2Flipped, kGood}));
  EXPECT_NE(message.find("ranks 0 and 2 agree (the most copies); rank 1 (written) differs from them"),
            std::string::npos)
      << message;
}

TEST(ReplicaCheckTest, TwoCopiesThatDifferHaveNoMajority) {
  const std::string message = Refusal(Copies("w", 0, {kGood, {21, 12, 13, 24}}));
  EXPECT_NE(message.find("blocks 0, 3 of 4 (1048576 bytes each) differ between rank 0 (written) and rank 1, with no "
                         "majority to tell which copy is right"),
            std::string::npos)
      << message;
}

TEST(ReplicaCheckTest, ACopyOfAnotherLengthDiffersInEveryBlock) {
  const std::string message = Refusal(Copies("w", 0, {kGood, kGood, {11, 12, 13}}));
  EXPECT_NE(message.find("blocks 0, 1, 2, 3 of 4"), std::string::npos) << message;
}

TEST(ReplicaCheckTest, ObjectsAreNamedByTheirCell) {
  std::vector<WriterReport> reports = Copies("rng", 0, {{5}, {6}});
  for (WriterReport& report : reports) {
    for (auto* list : {&report.items, &report.replicas}) {
      for (WrittenItem& item : *list) {
        item.is_object = true;
        item.box = Box{};
        item.index = {3};
      }
    }
  }
  EXPECT_NE(Refusal(reports).find("object 'rng' cell [3]: block 0 of 1"), std::string::npos);
}

TEST(ReplicaCheckTest, ManyDifferingItemsAreCounted) {
  std::vector<WriterReport> reports(2);
  for (int i = 0; i < 6; ++i) {
    reports[0].items.push_back(Tensor("t" + std::to_string(i), kGood));
    reports[1].replicas.push_back(Tensor("t" + std::to_string(i), kBlock2Flipped));
  }
  const std::string message = Refusal(reports);
  EXPECT_NE(message.find("tensor 't3'"), std::string::npos) << message;
  EXPECT_EQ(message.find("tensor 't4'"), std::string::npos) << message;
  EXPECT_NE(message.find("and 2 more items"), std::string::npos) << message;
}

TEST(ReplicaCheckTest, AReplicaOfAnItemNobodyWroteIsAnInternalError) {
  std::vector<WriterReport> reports(2);
  reports[1].replicas.push_back(Tensor("ghost", kGood));
  const Status status = CheckReplicas(reports);
  EXPECT_EQ(status.code(), Code::kInternal);
  EXPECT_NE(status.message().find("rank 1 checked its replica of tensor 'ghost'"), std::string::npos)
      << status.message();
}

}  // namespace
}  // namespace ckpt::runtime

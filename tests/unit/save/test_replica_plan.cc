// CKPT_SAVE_CHECK_REPLICAS in the plan: every holder of an item other than its writer is given the item to check,
// through the partitioned exchange too, and nobody is given one without the flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/save/save_partition.h"
#include "runtime/save/save_plan.h"

namespace ckpt::runtime {
namespace {

constexpr int32_t kF32 = static_cast<int32_t>(DType::kF32);

std::vector<RankDescriptor> World(int ranks) {
  std::vector<RankDescriptor> all(ranks);
  for (int r = 0; r < ranks; ++r) {
    all[r].rank = r;
    all[r].node = "node" + std::to_string(r);
  }
  return all;
}

// Three ranks: "w" replicated on all, "half" on ranks 0 and 1 only, "own" split by rows, object "cfg" on all.
std::vector<RankDescriptor> DataParallelWorld() {
  std::vector<RankDescriptor> all = World(3);
  for (auto& desc : all) {
    desc.tensors.push_back(TensorShardDesc{"w", kF32, {64, 8}, Box{{0, 0}, {64, 8}}, {}});
    desc.tensors.push_back(TensorShardDesc{"own", kF32, {3, 4}, Box{{uint64_t(desc.rank), 0}, {1, 4}}, {}});
    desc.objects.push_back(ObjectShardDesc{"cfg", {}, {}, 9});
  }
  for (int r = 0; r < 2; ++r) all[r].tensors.push_back(TensorShardDesc{"half", kF32, {5}, Box{{0}, {5}}, {}});
  all[2].tensors.push_back(TensorShardDesc{"half", kF32, {5}, Box{{0}, {0}}, {}});
  return all;
}

SavePlanOptions WithChecks() {
  SavePlanOptions options;
  options.replica_checks = true;
  return options;
}

const WriteItem& ItemOf(const SavePlan& plan, const std::string& key) {
  return *std::find_if(plan.items.begin(), plan.items.end(), [&](const WriteItem& i) { return i.key == key; });
}

TEST(ReplicaPlanTest, EveryHolderButTheWriterChecksEachReplicatedItem) {
  const SavePlan plan = PlanSave(DataParallelWorld(), WithChecks());
  std::vector<std::pair<std::string, int>> checks;
  for (const ReplicaCheck& check : plan.replicas) {
    EXPECT_NE(check.holder, check.item.writer) << check.item.key;
    EXPECT_EQ(check.item.writer, ItemOf(plan, check.item.key).writer) << check.item.key;
    checks.emplace_back(check.item.key, check.holder);
  }
  std::vector<std::pair<std::string, int>> expected;
  for (const std::string key : {"w", "cfg"}) {
    for (int holder = 0; holder < 3; ++holder) {
      if (holder != ItemOf(plan, key).writer) expected.emplace_back(key, holder);
    }
  }
  expected.emplace_back("half", ItemOf(plan, "half").writer == 0 ? 1 : 0);
  std::sort(checks.begin(), checks.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(checks, expected);  // "own" has one holder per box: nothing to check
}

TEST(ReplicaPlanTest, NoReplicaIsCheckedWithoutTheFlag) {
  EXPECT_TRUE(PlanSave(DataParallelWorld(), {}).replicas.empty());
}

TEST(ReplicaPlanTest, EachSlabOfASplitTensorIsCheckedByItsOtherHolders) {
  std::vector<RankDescriptor> all = World(2);
  for (auto& desc : all)
    desc.tensors.push_back(TensorShardDesc{"big", kF32, {1024, 1024}, Box{{0, 0}, {1024, 1024}}, {}});
  SavePlanOptions options = WithChecks();
  options.split_bytes = 1 << 20;  // 4 MiB: two slabs, one per holder
  const SavePlan plan = PlanSave(all, options);
  ASSERT_EQ(plan.items.size(), 2u);
  ASSERT_EQ(plan.replicas.size(), 2u);
  for (const ReplicaCheck& check : plan.replicas) {
    EXPECT_EQ(check.holder, 1 - check.item.writer);
    EXPECT_EQ(check.item.bytes, 2u << 20);
  }
  EXPECT_NE(plan.replicas[0].item.box, plan.replicas[1].item.box);
}

TEST(ReplicaPlanTest, TheExchangeGivesEachHolderItsReplicasToCheck) {
  const std::vector<RankDescriptor> all = DataParallelWorld();
  const int world = static_cast<int>(all.size());
  // Every owner plans its keys and routes; each rank merges what reached it.
  std::vector<std::vector<std::string>> to(world, std::vector<std::string>(world));
  for (int owner = 0; owner < world; ++owner) {
    std::vector<RankDescriptor> owned = World(world);
    for (int r = 0; r < world; ++r) {
      for (const TensorShardDesc& t : all[r].tensors) {
        if (KeyChecker(t.key, world) == owner) owned[r].tensors.push_back(t);
      }
      for (const ObjectShardDesc& o : all[r].objects) {
        if (KeyChecker(o.key, world) == owner) owned[r].objects.push_back(o);
      }
    }
    SavePlanOptions options = WithChecks();
    options.rotation = owner;
    const std::vector<std::string> routed = RouteWriteItems(PlanSave(owned, options), owned, owner);
    for (int r = 0; r < world; ++r) to[r][owner] = routed[r];
  }
  size_t checks = 0;
  for (int r = 0; r < world; ++r) {
    ManifestSkeleton skeleton;
    Result<SavePlan> mine = MergeWriteItems(to[r], r, r == 0 ? &skeleton : nullptr);
    ASSERT_TRUE(mine.ok()) << mine.status().message();
    for (const ReplicaCheck& check : mine->replicas) {
      EXPECT_EQ(check.holder, r);
      EXPECT_NE(check.item.writer, r);
      const auto& held = all[r];
      const bool holds = std::any_of(held.tensors.begin(), held.tensors.end(),
                                     [&](const TensorShardDesc& t) { return t.key == check.item.key; }) ||
                         std::any_of(held.objects.begin(), held.objects.end(),
                                     [&](const ObjectShardDesc& o) { return o.key == check.item.key; });
      EXPECT_TRUE(holds) << check.item.key << " on rank " << r;
    }
    checks += mine->replicas.size();
  }
  EXPECT_EQ(checks, 2u + 2u + 1u);  // "w" and "cfg" by two holders each, "half" by one
}

TEST(ReplicaPlanTest, AReplicaToCheckAgainstTheRanksOwnCopyIsRefused) {
  std::vector<RankDescriptor> all = World(2);
  for (auto& desc : all) desc.tensors.push_back(TensorShardDesc{"w", kF32, {4}, Box{{0}, {4}}, {}});
  SavePlan plan = PlanSave(all, WithChecks());
  ASSERT_EQ(plan.replicas.size(), 1u);
  plan.replicas[0].item.writer = plan.replicas[0].holder;  // as a corrupt message would say
  const std::vector<std::string> routed = RouteWriteItems(plan, all, 0);
  std::vector<std::string> incoming(2);
  const int holder = plan.replicas[0].holder;
  incoming[0] = routed[holder];
  const Result<SavePlan> merged = MergeWriteItems(incoming, holder, nullptr);
  EXPECT_EQ(merged.status().code(), Code::kCorrupt);
  EXPECT_NE(merged.status().message().find("check its replica of 'w' against rank " + std::to_string(holder)),
            std::string::npos)
      << merged.status().message();
}

}  // namespace
}  // namespace ckpt::runtime

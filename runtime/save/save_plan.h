// Save planning, pure computation: the coverage check of shard descriptors (runtime/core/descriptor.h) and the
// deterministic choice of who writes which unique box. Each key's owner runs them over the descriptors that every
// rank sent it for its keys (runtime/save/save_partition.h); the same descriptors give the same plan on any rank.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "runtime/core/box.h"
#include "runtime/core/descriptor.h"

namespace ckpt::runtime {

// Checks every tensor and object key whose KeyChecker is `checker_rank`, over all ranks' descriptors: the same dtype
// and global shape on every rank, boxes inside the global shape, and unique boxes that tile it exactly (identical
// boxes on several ranks are replicas; any other overlap is an error, as is a gap); objects with the same grid
// everywhere, every cell present, replicas of a cell of equal size. kMismatch naming the key, the boxes and the
// ranks concerned (at most a few problems are listed, with a count of the rest).
Status ValidateCoverage(const std::vector<RankDescriptor>& all, int checker_rank);

// One unit of writing: a whole unique box (or a slab of one, when a large replicated box is split so that its
// holders share the writing), or one object cell.
struct WriteItem {
  bool is_object = false;
  std::string key;
  Box box;      // tensors: the box to write, inside a box the writer holds
  Shape index;  // objects: the grid cell
  uint64_t bytes = 0;
  int writer = 0;
};

struct SavePlanOptions {
  // A replicated box of at least 2 * split_bytes is cut into min(holders, bytes / split_bytes) slabs along its
  // first dimension long enough, so that several holders write it.
  uint64_t split_bytes = 64ull << 20;
  // Ties in the writers' balancing go to the first node and rank in rank order starting here: owners that plan
  // their keys apart (runtime/save/save_partition.h) each start at their own rank, so that they do not all favour the
  // same holders.
  int rotation = 0;
  // CKPT_SAVE_CHECK_REPLICAS: the plan also lists, for every holder of an item other than its writer, the item it
  // checks (SavePlan::replicas).
  bool replica_checks = false;
};

// The order of items within one writer's list.
bool WriteItemLess(const WriteItem& a, const WriteItem& b);

// An item that a holder other than its writer checksums in its own copy (SavePlanOptions::replica_checks).
struct ReplicaCheck {
  WriteItem item;  // writer: the rank that writes it
  int holder = 0;
};

struct SavePlan {
  std::vector<WriteItem> items;          // sorted by (writer, is_object, key, box/index)
  std::vector<uint64_t> bytes_per_rank;  // world_size entries
  std::vector<ReplicaCheck> replicas;    // sorted by (holder, is_object, key, box/index); empty unless asked
};

// Deduplicates replicas and chooses each item's writer among its holders by greedy byte balancing: items in
// decreasing size; the holders' node with the fewest bytes so far, then that node's holder with the fewest bytes
// (ties: SavePlanOptions::rotation). Expects descriptors that passed ValidateCoverage.
SavePlan PlanSave(const std::vector<RankDescriptor>& all, const SavePlanOptions& options);

}  // namespace ckpt::runtime

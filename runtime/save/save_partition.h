// The save's planning protocol, partitioned by key so that no rank handles every rank's descriptors (issue #12):
//   1. each rank sends the shards of each key only to the key's owner (KeyChecker), in one all-to-all;
//   2. each owner checks the coverage of its keys (ValidateCoverage), deduplicates them and chooses their writers
//      (PlanSave), and in a second all-to-all sends each writer its own write items (and, for replica checks, each
//      other holder the items it checks), and rank 0 the records the manifest needs (every key's dtype and global
//      shape, or grid); the check's outcome travels with them (WithStatus, agreement.h), so a failed check is every
//      rank's error without a round of its own;
//   3. each rank merges what the owners sent into its plan: its own items (and replicas) only.
// Rank 0 also learns every rank's node (each rank sends it a message in step 1, empty of shards if need be), so the
// manifest can count nodes. What a rank sends and receives grows with its own shards and keys, not with the job.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/format/manifest.h"
#include "runtime/save/save_plan.h"

namespace ckpt::runtime {

// What the commit needs besides the write reports: every tensor and object of the save (chunks and pieces empty)
// and the number of nodes that held them. Rank 0 only.
struct ManifestSkeleton {
  std::vector<TensorRecord> tensors;  // sorted by key
  std::vector<ObjectRecord> objects;  // sorted by key
  uint32_t node_count = 0;
};

// Step 1, sender: this rank's descriptor split by owner, one message per rank (empty where it owns nothing of it;
// never empty for rank 0).
std::vector<std::string> PartitionDescriptor(const RankDescriptor& mine, int world_size);

// Step 1, owner `owner`: the messages received, by sending rank, decoded into one descriptor per rank (empty where
// a rank sent nothing). kCorrupt naming the sender for a malformed message, or one holding a key `owner` does not
// own.
Result<std::vector<RankDescriptor>> DecodeOwnedDescriptors(const std::vector<std::string>& incoming, int owner);

// Step 2, owner: its plan's items by writer, and to rank 0 the records of its keys and (rank 0 itself) the node
// count of `owned`.
std::vector<std::string> RouteWriteItems(const SavePlan& owned_plan, const std::vector<RankDescriptor>& owned,
                                         int owner);

// Step 3: this rank's plan from the owners' messages (items sorted as PlanSave sorts them, bytes_per_rank holding
// this rank's bytes at its index, replicas its own to check); on rank 0 also the skeleton. kCorrupt naming the owner
// for a malformed message, an item for another writer, or a replica to check against this rank's own copy.
Result<SavePlan> MergeWriteItems(const std::vector<std::string>& incoming, int rank, ManifestSkeleton* skeleton);

}  // namespace ckpt::runtime

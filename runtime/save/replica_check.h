// CKPT_SAVE_CHECK_REPLICAS, at rank 0 before the commit: the block checksums that every holder of a replicated item
// computed over its own copy, compared with those of the copy that was written. Data parallelism keeps identical
// copies of the same weights on many ranks; one that silently differs (a flipped bit in one GPU's memory, a replica
// that missed an update) would otherwise become the checkpoint unnoticed whenever its rank is the one that writes.
#pragma once

#include <vector>

#include "common/status.h"
#include "runtime/save/write_report.h"

namespace ckpt::runtime {

// Ok when every replica that `reports` (one per rank) carries equals the written copy of its item. Otherwise
// kCorrupt naming, for each item that differs (a few, then a count of the rest), the tensor's box or the object's
// cell, the blocks that differ, and which ranks agree with which, the writer marked; where three or more copies
// exist, the copies that differ from the most common one are the suspects. kInternal for a replica of an item that
// no report wrote.
Status CheckReplicas(const std::vector<WriterReport>& reports);

}  // namespace ckpt::runtime

// Where a load reads from: the memory tier's copy of a checkpoint when the job's node agents hold it, else storage. A
// copy need not be whole on any node: with a data plane between the ranks, each rank reads from its own node's copy the
// data files that node holds, and the load's exchange carries the bytes to the ranks that need them, so that restoring
// after a node was replaced, or across more nodes than replicas, moves each byte once instead of making every node's
// copy whole.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/agent/agent_protocol.h"
#include "common/status.h"
#include "runtime/core/context.h"
#include "runtime/format/file_holders.h"
#include "runtime/format/manifest.h"
#include "runtime/memtier/memory_attachment.h"

namespace ckpt::runtime {

struct CopyChoice {
  std::string dir;  // the checkpoint directory to read: the storage path, or this node's memory copy
  bool from_memory = false;
  // Some node holds only part of the data files: ShareHoldings runs before the load reads.
  bool partial = false;
  std::optional<coll::agent::MemoryCheckpoint> record;  // this node's agent's record of its copy (memory only)
};

// Collective where the job has an identity (the memory tier needs one); without one, storage and no collective.
// The memory copy is read when every rank's node holds it whole, or, with a data plane between the ranks, when every
// node holds at least its MANIFEST (a node that holds nothing fetches that from its peers) and the nodes' copies
// together hold every data file (ShareHoldings checks). Without a data plane, each node's agent makes its copy whole
// from its peers' first. Otherwise, and whenever that fails, storage: rank 0 warns why.
Result<CopyChoice> ChooseCopy(Context& ctx, MemoryAttachment& memory, const std::string& path);

// Collective, after a partial CopyChoice, on every rank with the copy's manifest (null where this rank could not open
// it: `opened` says why). `read_alone` lists the data files (manifest indices) this rank reads by itself, outside
// the exchange: its object pieces and the common bytes. Each node's agent fetches those of its ranks' that the node
// lacks, and every rank gets the same table of which nodes hold which data files (LoadPlanOptions::holders). Fails
// on every rank alike, naming what is missing, where some data file is held by no node.
Result<std::shared_ptr<const FileHolders>> ShareHoldings(Context& ctx, MemoryAttachment& memory,
                                                         const CopyChoice& choice, const Manifest* manifest,
                                                         const Status& opened, const std::vector<uint32_t>& read_alone);

// Collective, after a load of `choice` (from the memory tier) succeeded on every rank. The copy's records name the
// nodes of the job that saved it, whose agents persist it together when the trainers die; after a node was replaced,
// or on another number of nodes, some of those are gone and no persist could commit. So each node's agent learns its
// place in this job and the data files it writes, each file given to one of the nodes that hold it (`holders`, or
// every node when null: each holds the whole copy), in turn, under a save id rank 0 chooses. An agent that has
// persisted the checkpoint keeps it as it is. Fails only where the ranks cannot agree; an agent that refuses is a
// warning.
Status ReassignCopy(Context& ctx, MemoryAttachment& memory, const CopyChoice& choice, const Manifest& manifest,
                    const FileHolders* holders);

}  // namespace ckpt::runtime

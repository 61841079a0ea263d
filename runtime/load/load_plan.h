// The read-once load's plan: from the boxes of stored tensors that ranks want, which rank reads which stored blocks,
// so that every needed stored byte is read once for the whole job, and which pieces each reader copies for itself or
// sends to which rank. Pure computation: no I/O, no messages. Each tensor's owner plans the requests it received for
// its tensors and cuts the plan into rounds (runtime/load/load_partition.h); runtime/load/exchange_load.h runs it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/status.h"
#include "runtime/core/box.h"
#include "runtime/format/file_holders.h"
#include "runtime/format/manifest.h"

namespace ckpt::runtime {

// A box that a rank wants of a stored tensor, in the tensor's global coordinates.
struct RequestedBox {
  uint32_t tensor = 0;  // index into Manifest::tensors
  Box box;              // inside the tensor's shape
};

struct LoadRequest {
  int rank = 0;
  std::string node;  // ranks on the same host share a node name; reads are balanced over nodes first
  std::vector<RequestedBox> boxes;
};

// Compact encoding for one message to a tensor's owner: about 5 + 16 * ndim bytes per box.
std::string EncodeLoadRequest(const LoadRequest& request);

// Checks every length against what is left and every box against `manifest`. kCorrupt naming `from_rank` for a
// truncated message, trailing bytes, a rank other than `from_rank`, a tensor index out of range, a box whose
// dimension count is not its tensor's, or a box outside its tensor's shape.
Result<LoadRequest> DecodeLoadRequest(std::string_view bytes, int from_rank, const Manifest& manifest);

// One stored range read by one rank: blocks [first_block, first_block + block_count) of a chunk. Whole checksum
// blocks are read, so that each can be verified. The reads of one chunk never share a block: each stored block that
// anyone needs is read by exactly one rank, whatever the size of the pieces, unless more than
// LoadPlanOptions::fan_out ranks need it (then once per group of them). A chunk is read as one block range per
// group of overlapping needs (regions that ranks need alone are read apart, by those ranks, but for a block two of
// them share: one of them reads it and sends the other its part), and a large range needed by several ranks is cut
// into several, read by different ranks (LoadPlanOptions::split_bytes).
struct ChunkRead {
  uint32_t tensor = 0;  // index into Manifest::tensors
  uint32_t chunk = 0;   // index into TensorRecord::chunks
  int reader = 0;
  uint64_t first_block = 0;
  uint64_t block_count = 0;
  uint64_t bytes = 0;  // what the blocks hold: block_count blocks, the chunk's last block possibly short
};

// A region of a tensor (global coordinates) that the reader of `read` hands to `consumer`. Every element of the
// region lies in the read's blocks and inside at least one of the consumer's requested boxes.
struct Transfer {
  uint32_t read = 0;  // index into LoadPlan::reads
  int consumer = 0;
  Box region;
  uint64_t bytes = 0;  // region volume times the element size
};

struct LoadPlanOptions {
  // A chunk whose needed bytes reach 2 * split_bytes and that several ranks need is read as min(needing ranks,
  // bytes / split_bytes) block ranges, so that one large replicated chunk does not fall on a single reader. Only
  // when the block size is a multiple of the element size (true of every power-of-two block size), so that no
  // element straddles two reads. 0 never splits. At 16 MiB rather than 64, a 64 MiB tensor that 3 ranks load whole
  // beside their thirds of the others (bench/run's reshard load, 512 MiB) is read by all three instead of one: the
  // slowest rank's load took 0.30-0.37 s instead of 0.36-0.48 on the RAM disk.
  uint64_t split_bytes = 16ull << 20;
  // A block range that more ranks need is read once per group of at most this many of them (consecutive in rank
  // order), so that no reader sends a region to, and no consumer receives from, a number of ranks that grows with
  // the world: a tensor replicated over 8,192 data-parallel ranks is read 256 times, each read sent to 31 ranks, not
  // once and sent to 8,191 (each rank's data transport holds an endpoint, a socket over TCP, per rank it exchanges
  // with). 0: no bound.
  uint32_t fan_out = 32;
  // A transfer of at least this many bytes travels as a message of its own rather than packed with the pair's
  // small transfers: its reader keeps one copy for every rank it goes to, and the receiver can take it straight
  // into its destination. 0: every transfer travels alone.
  uint64_t separate_bytes = 256ull << 10;
  // Ties in the readers' balancing go to the first node and rank in their orders starting here (0: lower node name,
  // lower rank): owners that plan their tensors apart (runtime/load/load_partition.h) each start at their own rank, so
  // that they do not all favour the same readers.
  int rotation = 0;
  // Where set, a read's reader is a rank whose node holds the read's data file: a needing one where any does, else
  // any rank of a node that holds it (which then sends every byte it reads). A file no node holds fails the plan.
  // Null: every rank can read every file.
  const FileHolders* holders = nullptr;
};

struct LoadPlan {
  std::vector<ChunkRead> reads;  // sorted by (tensor, chunk, first_block)
  // What readers send to other ranks: sorted by (reader, consumer), then by read, each group contiguous.
  std::vector<Transfer> transfers;
  // What readers keep for themselves (consumer == reader), copied in place rather than sent; sorted by read.
  std::vector<Transfer> local_copies;
  std::vector<uint64_t> read_bytes_per_rank;  // one entry per rank
  uint64_t separate_bytes = 0;                // LoadPlanOptions::separate_bytes of the planning
};

// Computes the plan from every rank's request, in any order; every rank computes the same plan from the same
// requests. For each read, the needing ranks are those whose boxes meet its blocks (a read of several blocks goes
// only to the ranks of its group: one that needs just a part of its last block, left to it by the group after, is
// sent that part); its reader is chosen among them by greedy byte balancing, largest reads first (ties: lower
// tensor, chunk, block): the needing ranks' node with the fewest bytes read so far, then that node's rank with the
// fewest (ties: LoadPlanOptions::rotation). A rank that needs nothing reads nothing (unless LoadPlanOptions::holders
// leaves no needing rank able to read); a chunk nobody needs is not read.
// Identical boxes asked twice by one rank are served once. Expects a manifest that passed DecodeManifest;
// kInvalidArgument if the requests' ranks are not 0..n-1 once each, or a box is not inside its tensor; kCorrupt if a
// requested tensor's records are inconsistent.
Result<LoadPlan> PlanLoad(const Manifest& manifest, const std::vector<LoadRequest>& requests,
                          const LoadPlanOptions& options = {});

inline constexpr uint64_t kTransferAlignment = 16;  // the largest element size: typed copies stay aligned

// The order of LoadPlan::reads: tensor, chunk, first block.
std::tuple<uint32_t, uint32_t, uint64_t> ReadOrder(const ChunkRead& read);

// What a transfer takes in a send or receive buffer: its bytes when it travels alone, else with its alignment
// padding in the packed buffer.
uint64_t TransferBufferBytes(const LoadPlan& plan, const Transfer& transfer);

// What travels between `rank` and one peer in a plan: the pair's small transfers packed in one contiguous buffer
// (`packed`, in plan order, each at `offsets[i]` aligned to kTransferAlignment; `packed_bytes` is the buffer's size,
// 0 when nothing is packed), then each large transfer (at least LoadPlan::separate_bytes) as a message of its own
// (`separate`, in plan order). Messages of a pair go in that order: the packed buffer first, if any. Indices are into
// LoadPlan::transfers. The reader's OutgoingBatches and the consumer's IncomingBatches agree for their pair, so each
// side computes it alone. Batches are sorted by peer.
struct PeerBatch {
  int peer = 0;
  std::vector<size_t> packed;
  std::vector<uint64_t> offsets;
  uint64_t packed_bytes = 0;
  std::vector<size_t> separate;
};
std::vector<PeerBatch> OutgoingBatches(const LoadPlan& plan, int rank);  // `rank` reads and sends
std::vector<PeerBatch> IncomingBatches(const LoadPlan& plan, int rank);  // `rank` receives

}  // namespace ckpt::runtime

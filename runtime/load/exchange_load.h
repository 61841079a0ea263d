// The read-once load: every needed stored byte is read by one of the ranks that need it, which copies its own share in
// place and sends every other rank exactly the sub-boxes it asked for: small ones packed into one message per pair of
// ranks and round, large ones as messages of their own, sent from one copy and received in place where they land
// contiguously. Rounds bound the memory each rank holds in flight.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/core/box.h"
#include "runtime/core/context.h"
#include "runtime/format/manifest.h"
#include "runtime/load/load_agreement.h"
#include "runtime/load/load_partition.h"
#include "runtime/load/load_plan.h"

namespace ckpt::runtime {

// A destination this rank registered: the row-major buffer `dst` of `box` (of manifest tensor `tensor`), clipped to
// what the checkpoint stores.
struct LocalPiece {
  uint32_t tensor = 0;
  Box box;
  Box wanted;
  char* dst = nullptr;
  int device = -1;  // the CUDA device holding `dst`; -1: host memory
};

// This rank's request in the form every rank plans from.
LoadRequest MakeLoadRequest(int rank, const std::string& node, const std::vector<LocalPiece>& pieces);

// What the load did on this rank.
struct ExchangeCounters {
  uint64_t bytes_read = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t exchange_ns = 0;  // in the transport's exchanges
  uint64_t rounds = 0;       // the load's rounds, the same on every rank
  // The host memory its exchange buffers took: regions of the staging arena, and memory committed for the load.
  uint64_t arena_buffer_bytes = 0;
  uint64_t committed_buffer_bytes = 0;
};

// How a load's pieces travel: over `transport`, packed in host memory (device = -1) or in device memory of `device`
// (NCCL, every destination on that device).
struct ExchangePlane {
  coll::Transport* transport = nullptr;
  int device = -1;
};

// This rank's rounds of the last read-once load's plan, reused when the same requests meet the same checkpoint.
// Kept between loads beside the context (the C API's context object owns it).
struct LoadPlanCache {
  uint64_t key = 0;  // 0: none
  std::shared_ptr<const std::vector<LoadPlan>> rounds;
  std::string checkpoint_id;  // of the checkpoint the plan reads
};

// Not collective, before the load's first step: decodes the records of the chunks `rank` (this rank) reads in the
// plan `cache` holds, where that plan was made for `manifest`'s checkpoint, so that a load reusing it (which it learns
// only from that step) reads from decoded chunks, and so that a failure to decode them is this rank's failure in that
// step.
Status DecodeChunksOfCachedPlan(int rank, const LoadPlanCache& cache, const Manifest& manifest,
                                const ChunkDecoder& decode_chunks);

// The transfers of `view` that take no round memory on `rank` (runtime/load/load_partition.h: Bufferless), as a round
// of the exchange lays them out: a large transfer (LoadPlan::separate_bytes) that `rank` receives whole into one of
// its `pieces` in the memory the plane moves (host memory where `device` is -1, else that CUDA device's), in one
// contiguous run, or where `scatter` (the plane's transport scatters transfers) in a bounded number of runs of a
// wider piece; or one it sends from where a local copy of the same read put the whole region, so; or, in host memory
// where `scatter`, a small transfer of a region it sends another consumer too, whose one copy both pairs' packed
// messages are gathered from. Depends on the pieces' boxes and devices, not on where their memory lies.
Bufferless BufferlessTransfers(const LoadPlan& view, int rank, const Manifest& manifest,
                               const std::vector<LocalPiece>& pieces, int device, bool scatter);

// Collective over `plane`, the same on every rank. `mine` is this rank's request; `verdict` the load's agreed start
// (runtime/load/load_agreement.h): the plan is made by the tensors' owners (runtime/load/load_partition.h), who decode
// the chunks of the tensors they own with `decode_chunks` (readers the records of the chunks they read), unless every
// rank holds it already (DecodeChunksOfCachedPlan). `holders`, where set, limits each read to the ranks whose node
// holds its file (LoadPlanOptions::holders). The plan made is kept in `plans`. After each round, `filled` is told how
// many bytes of this rank's pieces it filled.
Result<ExchangeCounters> ExchangeLoad(Context& ctx, LoadPlanCache& plans, const ExchangePlane& plane,
                                      const std::string& path, const Manifest& manifest,
                                      const ChunkDecoder& decode_chunks, const LoadRequest& mine,
                                      const LoadVerdict& verdict, const FileHolders* holders,
                                      const std::vector<LocalPiece>& pieces,
                                      const std::function<void(uint64_t)>& filled);

}  // namespace ckpt::runtime

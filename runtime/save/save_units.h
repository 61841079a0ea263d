// The units of a rank's share of a save (the plan's items it writes and, on rank 0, the common entries too large to
// inline): where each one's bytes come from, where they lie in this rank's data files, and the windows in which the
// files are written. Shared by the two ways of writing them: staged in the arena for the I/O workers
// (runtime/save/save_stager.h), or in place from the state's buffers (runtime/save/in_place_writer.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"
#include "gpu/device_copy.h"
#include "io/checksum.h"
#include "io/file_jobs.h"
#include "runtime/core/box.h"
#include "runtime/core/state.h"
#include "runtime/format/manifest.h"
#include "runtime/save/cow_snapshot.h"
#include "runtime/save/save_plan.h"
#include "runtime/save/save_stager.h"
#include "runtime/save/save_ticket.h"

namespace ckpt::runtime::staging {

// Units start at 4 KiB boundaries of their files, and arena regions span whole 4 KiB pages, as direct I/O needs.
inline constexpr uint64_t kChunkAlignment = 4096;

inline uint64_t AlignUp(uint64_t value, uint64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

// Where a unit's bytes come from: a box inside a row-major buffer (tensors), or plain bytes (objects, common).
struct Source {
  const char* base = nullptr;  // the buffer holding src_box, or the bytes
  Box src_box;
  Box box;                  // the unit's box inside src_box (tensors)
  size_t element_size = 0;  // 0: plain bytes
  bool contiguous = true;   // box's bytes are one run inside the buffer, starting at base
  int device = -1;          // the CUDA device holding the buffer; -1: host memory
  // A copy-on-write save's host sources: read through this snapshot of the buffers at the call, as its span `span`
  // (runtime/save/cow_snapshot.h). Null: read the buffer itself.
  cow::Snapshot* snapshot = nullptr;
  size_t span = 0;
  int32_t dtype = 0;      // tensors: CKPT_DTYPE_*
  bool compress = false;  // tensors: the shard asks for compression (CKPT_SHARD_COMPRESS)
};

// One thing to store: an item of the plan or a common entry; `target` is its index in the report (see Target).
struct Unit {
  Source source;
  uint64_t bytes = 0;
  size_t target = 0;
  uint32_t file = 0;
  uint64_t file_offset = 0;
  // 0: stored as it is; else compressed (io/block_codec.h), its elements' bytes grouped by this many.
  uint32_t byte_groups = 0;
};

// A stretch of one file that one write job covers: its segments, the piece of a unit each holds, and that unit.
struct Window {
  std::vector<io::FileSegment> segments;  // arena offsets relative to the window's start until staged
  std::vector<StagedPiece> pieces;
  std::vector<const Unit*> sources;
  uint64_t file_begin = 0;
  uint64_t file_end = 0;
};

// The report entry that a unit's `target` names: an item's, or past the items, a stored common entry's.
StoredBytes& Target(SaveTicket& ticket, size_t target);

// The span of its buffer that a host unit reads (first to last byte), and the runs it reads there, for a
// copy-on-write snapshot; `name` names the unit in messages.
cow::SpanRequest SpanOf(const Unit& unit, std::string name);

// Where the bytes of a plan's item lie in this rank's state.
Result<Source> ItemSource(const State& state, const WriteItem& item);

// Adds the unit of `item` with its report entry (the block size is set once all units are collected).
Status AddItemUnit(const State& state, const WriteItem& item, SaveTicket& ticket, std::vector<Unit>& units);

// The units this rank stores, with the report entries they fill (CKPT_SAVE_INCREMENTAL: runtime/save/incremental_units.h).
Result<std::vector<Unit>> CollectUnits(const State& state, const SavePlan& plan, const StagingSettings& settings,
                                       SaveTicket& ticket);

// CKPT_SAVE_CHECK_REPLICAS: the replicas this rank checks (plan.replicas), as units whose `target` indexes
// ticket.report.replicas, entries it adds (block_size and byte_length set, checksums to come).
Result<std::vector<Unit>> CollectReplicaUnits(const State& state, const SavePlan& plan, const StagingSettings& settings,
                                              SaveTicket& ticket);

// Hands `consume` a unit's row-major bytes in order, read where they are: in place from host memory, through a bounce
// buffer from device memory or a copy-on-write snapshot (which fails where the buffer went away).
Status ReadUnit(const Source& s, uint64_t bytes, const std::function<void(const char*, uint64_t)>& consume);

// The block checksums of a unit's row-major bytes, read as ReadUnit reads them.
Result<std::vector<uint64_t>> ChecksumUnit(const Source& s, uint64_t bytes, uint64_t block_size);

// Spreads the units over one file per worker, largest first onto the lightest file, and gives each its offset.
std::vector<std::vector<Unit*>> LayOutFiles(std::vector<Unit>& units, int file_count);

// Cuts a file's units into windows of at most `cap` bytes; a unit larger than the room left is cut at a multiple
// of the block size, so the checksums of its pieces concatenate into the unit's.
std::vector<Window> CutWindows(const std::vector<Unit*>& file, uint64_t cap, uint64_t block_size);

// Copies bytes [begin, begin + length) of the unit's row-major bytes to `out`: from host memory past the cache
// (io::StreamingCopy; a worker reads the arena next, windows later), fed to `checksummer` as they are copied where
// one is given, or queued on `device_copies` from device memory (the caller waits for those; never checksummed), or
// read through the source's copy-on-write snapshot, which fails where the buffer went away during the save.
Status CopyUnitRange(const Source& s, uint64_t begin, uint64_t length, char* out, gpu::DeviceCopier& device_copies,
                     io::BlockChecksummer* checksummer = nullptr);

}  // namespace ckpt::runtime::staging

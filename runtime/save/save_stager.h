// Staging: this rank's share of a save is laid out into one data file per I/O worker (runtime/save/save_units.h),
// copied into the staging arena window by window, and each window handed to the file's worker. When the arena is
// full, the stager first absorbs its own oldest completed windows, so a state larger than the arena streams through
// it. With CKPT_SAVE_IN_PLACE, this process writes the files itself instead (runtime/save/in_place_writer.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "io/staging_arena.h"
#include "io/worker_pool.h"
#include "runtime/format/manifest.h"
#include "runtime/core/state.h"
#include "runtime/save/incremental_base.h"
#include "runtime/save/save_plan.h"
#include "runtime/save/save_ticket.h"
#include "runtime/save/write_fault_handler.h"

namespace ckpt::runtime {

struct StagingSettings {
  int rank = 0;
  uint64_t block_size = 1ull << 20;
  uint64_t inline_common_max = 64 << 10;
  std::chrono::milliseconds timeout{300000};
  // The folder of the data files in the save's temporary directory (DataDirectoryOf).
  std::string data_directory = kDataDirName;
  // Called with this rank's byte count and data files (names inside the save's data/ directory, which exists by
  // then, and sizes) before anything is written: a memory-tier save reserves them with the node's agent, and writes
  // nothing when refused. Empty: none.
  std::function<Status(uint64_t bytes, const std::vector<std::string>& files, const std::vector<uint64_t>& sizes)>
      reserve;
  // CKPT_SAVE_IN_PLACE: this rank writes its files itself, from the state's buffers where they allow it (the
  // rest through the arena), with executors of this tuning; null: the I/O workers write windows staged in the arena.
  const io::IoTuning* in_place = nullptr;
  // A memory-tier save: the workers' copies into the agent's memory are handed out once staging ends (or earlier,
  // when the arena must make room). They are copies in memory, like the staging itself, with no device to keep
  // busy meanwhile: started at once, they only take cores and memory bandwidth from the copy the caller waits for
  // (1 GiB on two cores: ckpt_save blocked 122-185 ms instead of 94-122).
  bool writes_after_staging = false;
  // A memory-tier save: a data file already at its path (one the agent recycled when reserving) is written over,
  // its pages reused, instead of refused.
  bool overwrite_existing_files = false;
  // CKPT_SAVE_COPY_ON_WRITE: the host buffers are write-protected through this handler and staged on a thread of
  // their own (SaveTicket::stage_later); null: staged within the call.
  WriteFaultHandler* copy_on_write = nullptr;
  // CKPT_SAVE_CHECK_REPLICAS without copy-on-write, a save staged at the call to storage: the buffers of the
  // replicas this rank checks are write-protected through this handler and checksummed after the call, on the
  // thread of SaveTicket::stage_later; null: checksummed during the call, beside the staging.
  WriteFaultHandler* replica_protection = nullptr;
  // CKPT_SAVE_INCREMENTAL: the block digests of the tensor boxes this rank writes are reported, and against `base`
  // (null: none) the rows equal to the base's are referred to instead of written (runtime/save/incremental_units.h).
  bool record_digests = false;
  IncrementalBase* base = nullptr;
  // CKPT_SAVE_CHECK_REPLICAS: the plan lists replicas to check, which an incremental save's slabs must still be
  // compared with (WriterReport::split_items).
  bool replica_checks = false;
  // Which units are compressed: none (a save in place, to a memory tier or to object storage), the tensors whose
  // shards ask (CKPT_SHARD_COMPRESS), or all (CKPT_SAVE_COMPRESS). A save with any compressed unit lays its files
  // out as the workers write them (io::WriteJob::codec).
  enum class Compression { kNone, kShardsAsking, kAll };
  Compression compression = Compression::kNone;
  // Where a copy-on-write save says why it copies some buffers at the call after all.
  std::function<void(const std::string&)> note;
};

// Stages the plan's items that `settings.rank` writes (and, on rank 0, the common entries too large to inline)
// into files under `ticket.commit.tmp_dir`, filling ticket.report and ticket.pending. Returns once every byte is
// in the arena or written (in place: written and durable, nothing pending): the caller's buffers may change
// afterwards. With settings.copy_on_write, returns once the host buffers are write-protected (device memory, which
// cannot be, makes the whole save stage at the call), leaving ticket.stage_later to stage them, which the caller
// starts. The replicas this rank checks (plan.replicas) are checksummed into ticket.report.replicas: after the call
// where their buffers are write-protected (settings.copy_on_write or settings.replica_protection; on
// ticket.stage_later too), else during it.
Status StageSave(const State& state, const SavePlan& plan, const StagingSettings& settings, io::StagingArena& arena,
                 io::WorkerPool& workers, SaveTicket& ticket);

// Waits for the oldest window in flight, releases its arena region, and records its checksums (or its failure).
void AbsorbOldest(io::StagingArena& arena, SaveTicket& ticket);

}  // namespace ckpt::runtime

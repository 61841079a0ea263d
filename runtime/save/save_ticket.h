// One save in flight: what the training thread hands to the background thread, and what the request observes.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "io/claim.h"
#include "io/file_jobs.h"
#include "io/staging_arena.h"
#include "runtime/core/progress.h"
#include "runtime/format/manifest.h"
#include "runtime/memtier/memory_tier.h"
#include "runtime/save/save_partition.h"
#include "runtime/save/save_plan.h"
#include "runtime/save/write_report.h"

namespace ckpt::runtime {

// One segment of a staged window: `length` bytes of item `item`, from byte `item_offset` of its row-major bytes.
struct StagedPiece {
  size_t item = 0;
  uint64_t item_offset = 0;
  uint64_t length = 0;
};

// A window of one data file in flight: the worker's answer, the arena region to release, what it holds.
struct PendingWrite {
  std::future<Result<io::WriteResult>> result;
  io::ArenaRegion region;
  std::vector<StagedPiece> pieces;
  bool finishes_file = false;  // the file's last job: answered once the whole file is durable
  // Per piece, the block checksums computed while staging it; empty: the worker's result carries them.
  std::vector<std::vector<uint64_t>> staged_checksums;
  // A compressed layout (io::WriteJob::codec): the worker says where the pieces went, and the file's last job its
  // size, which goes to report.files[report_file].
  bool compressed = false;
  uint32_t report_file = 0;
};

// Everything the commit needs that the state may no longer hold once ckpt_save has returned.
struct CommitInputs {
  std::string path;
  std::string tmp_dir;
  io::Claim
      claim;  // rank 0: its claim on tmp_dir (runtime/format/save_directory.h), released once committed or abandoned
  std::string save_id;
  int world_size = 1;
  std::shared_ptr<const ManifestSkeleton> skeleton;  // rank 0: agreed (or cached) at plan time
  std::vector<std::pair<std::string, std::string>> metadata;
  std::vector<CommonRecord> inline_common;  // rank 0
  // A memory checkpoint is announced to the node's agent with the data files the node's ranks wrote: by rank 0 once
  // committed, before any rank learns the outcome, and across nodes by every node's leader once the save is whole
  // everywhere (runtime/save/memory_commit.h). Its failure fails the save, and the node's committed directory (in
  // memory, never on storage) is removed.
  std::function<Status(const std::vector<std::string>& own_files)> announce;
  // Across nodes, every rank once the save succeeded: waits until its node's agent holds the checkpoint and its
  // node's files have their replicas on other nodes (none asked: held is enough), so that the request completes
  // then and a trainer that dies right after leaves every node's agent holding it; a replica that could not be
  // made is a warning, since the checkpoint is whole on every node. Empty: nothing to wait for.
  std::function<void()> await_replicas;
  // Rank 0, once committed (the manager's latest pointer and retention); reports its own problems, since the
  // checkpoint stands whatever happens there.
  std::function<void()> after_commit;
  // Rank 0, once every data file is durable, right before the MANIFEST is written: may add files of its own to the
  // directory the commit publishes (`dir`: the temporary directory, or the step's URL on object storage), which
  // then commit with the checkpoint (the manager's step record). Its failure fails the save.
  std::function<Status(const std::string& dir)> before_commit;
  // Rank 0, a manager's incremental save: its pin on the base step (SaveSettings::base_pin), released with the claim.
  std::shared_ptr<void> base_pin;
  // A memory-tier save: the node's agent this rank reserved with (held until the save ends, whatever the context
  // attaches to meanwhile), and the temporary directory's name the bytes were reserved under, released by every
  // rank once the save has finished. Null and empty: a save to storage.
  std::shared_ptr<MemoryTier> memory_tier;
  std::string memory_reservation;
  // A memory-tier save: this rank's node among the job's; across several, the commit is runtime/save/memory_commit.h's.
  MemoryNodes memory_nodes;
  // A memory-tier save: the storage path the memory checkpoint at `path` stands for, which messages name.
  std::string storage_path;
};

// When the save reached each point, in NowNs() nanoseconds; 0 until it does. Atomic: ckpt_request_stats_get reads
// them from any thread while the save runs.
struct SaveMarks {
  std::atomic<int64_t> called{0};   // ckpt_save was entered
  std::atomic<int64_t> planned{0};  // every rank agreed on the plan
  // This rank's bytes are in the arena (or written, in place), and the replicas it checks checksummed.
  std::atomic<int64_t> staged{0};
  // ckpt_save returned: when staged, but for a copy-on-write save, which stages in the background from then on, and
  // one whose write-protected replicas are checksummed from then on.
  std::atomic<int64_t> returned{0};
  // A copy-on-write save's whose writes stage after the call: set before `returned`.
  std::atomic<bool> stages_in_background{false};
  std::atomic<int64_t> durable{0};  // every write of this rank was answered (its files synced)
  std::atomic<int64_t> finished{0};
};

// A snapshot of what the save has done on this rank (ckpt_request_stats). Durations of a phase still running count
// until now, those of a phase not reached 0.
struct SaveStats {
  uint64_t state_bytes = 0;
  uint64_t bytes_to_write = 0;
  uint64_t bytes_staged = 0;
  uint64_t bytes_written = 0;
  uint64_t bytes_committed = 0;
  uint64_t files_written = 0;
  bool committed = false;
  uint64_t planning_ns = 0;
  uint64_t staging_ns = 0;
  uint64_t blocking_ns = 0;
  uint64_t writing_ns = 0;
  uint64_t committing_ns = 0;
  uint64_t total_ns = 0;
};

class SaveTicket {
 public:
  // Marks the save finished with `status`; wakes waiters.
  void Finish(Status status);
  // kInProgress until finished.
  Status Test() const;
  // Blocks until finished or `timeout` (0: no limit) passes; then as Test.
  Status Wait(std::chrono::milliseconds timeout) const;
  // Safe from any thread at any time.
  SaveStats Stats() const;

  CommitInputs commit;
  WriterReport report;               // this rank's files and items; checksums filled as writes complete
  std::deque<PendingWrite> pending;  // oldest first
  Status failure;                    // the first local failure, if any
  // Set by the calling thread before ckpt_save returns the request.
  uint64_t state_bytes = 0;     // tensor and object bytes the state registered
  uint64_t bytes_to_write = 0;  // this rank's share of the plan (and rank 0's common entries stored in files)
  // Counted by whichever thread stages or absorbs writes, read by Stats from any thread.
  std::atomic<uint64_t> bytes_staged{0};
  std::atomic<uint64_t> bytes_written{0};
  std::atomic<uint64_t> files_written{0};
  std::atomic<uint64_t> bytes_stored{0};  // a compressed layout's: what bytes_written took in its files
  SaveMarks marks;
  // The caller's progress callback: the calling thread's until the ticket is queued, then the save thread's.
  ProgressReporter progress;
  // A copy-on-write save (runtime/save/write_fault_handler.h), or replicas write-protected to be checksummed after
  // the call: its staging, which StageSave prepares and the caller starts on `staging` once the save is handed to
  // the executor, which joins it before finalizing. It sets marks.staged (MarkStaged) when done; nothing else of the
  // ticket is touched by the caller meanwhile.
  std::function<void()> stage_later;
  std::thread staging;
  // Sets marks.staged and wakes AwaitStaged.
  void MarkStaged();
  // Blocks until marks.staged is set.
  void AwaitStaged() const;

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable finished_;
  mutable std::condition_variable staged_;
  bool done_ = false;
  Status status_;
};

// The INFO line of a committed save: this rank's bytes and where its time went.
std::string DescribeSave(const SaveTicket& ticket);

// A finished memory-tier save gives its reservation back (rank 0's became the memory checkpoint's own bytes at the
// commit, and releasing it then changes nothing at the agent); `warn` hears why it could not. Nothing for a save to
// storage, or when the agent died.
void ReleaseMemoryReservation(const SaveTicket& ticket, const std::function<void(const std::string&)>& warn);

}  // namespace ckpt::runtime

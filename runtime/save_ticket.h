// One save in flight: what the training thread hands to the background thread, and what the request observes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "io/file_jobs.h"
#include "io/staging_arena.h"
#include "runtime/manifest.h"
#include "runtime/save_plan.h"
#include "runtime/write_report.h"

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
};

// Everything the commit needs that the state may no longer hold once ckpt_save has returned.
struct CommitInputs {
  std::string path;
  std::string tmp_dir;
  UniqueFd claim;  // rank 0: its claim on tmp_dir (runtime/save_directory.h), released once committed or abandoned
  std::string save_id;
  int world_size = 1;
  std::vector<RankDescriptor> descriptors;  // agreed (or cached) at plan time
  std::vector<std::pair<std::string, std::string>> metadata;
  std::vector<CommonRecord> inline_common;  // rank 0
  // Rank 0, once committed (the manager's latest pointer and retention); reports its own problems, since the
  // checkpoint stands whatever happens there.
  std::function<void()> after_commit;
};

class SaveTicket {
 public:
  // Marks the save finished with `status`; wakes waiters.
  void Finish(Status status);
  // kInProgress until finished.
  Status Test() const;
  // Blocks until finished or `timeout` (0: no limit) passes; then as Test.
  Status Wait(std::chrono::milliseconds timeout) const;

  CommitInputs commit;
  WriterReport report;               // this rank's files and items; checksums filled as writes complete
  std::deque<PendingWrite> pending;  // oldest first
  Status failure;                    // the first local failure, if any
  uint64_t bytes_staged = 0;
  uint64_t bytes_written = 0;

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable finished_;
  bool done_ = false;
  Status status_;
};

}  // namespace ckpt::runtime

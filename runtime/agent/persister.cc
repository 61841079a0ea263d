#include "runtime/agent/persister.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "io/confined_open.h"
#include "io/file_io.h"
#include "runtime/manager.h"
#include "runtime/save_directory.h"

namespace ckpt::agent {
namespace {

// copy_file_range moves this much per call: large enough that the calls cost nothing next to the copy, small
// enough that a stop request waits for one piece at most a second or so.
constexpr size_t kCopyPieceBytes = size_t{1} << 30;
// The buffer of the read/write fallback.
constexpr size_t kFallbackBufferBytes = size_t{8} << 20;
// Data files copied at once: each rank writes one per I/O worker, so a node's checkpoint has several.
constexpr size_t kCopyThreads = 8;

// The read/write copy of bytes [done, size), for file systems between which the kernel refuses to copy.
Status CopyThroughBuffer(int in, io::File& out, uint64_t done, uint64_t size, const std::string& from) {
  std::vector<char> buffer(static_cast<size_t>(std::min<uint64_t>(kFallbackBufferBytes, size - done)));
  while (done < size) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buffer.size(), size - done));
    const ssize_t got = pread(in, buffer.data(), want, static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return io::ErrnoStatus(errno, "cannot read " + Quoted(from));
    if (got == 0) return Corrupt(Quoted(from) + " shrank while it was being persisted");
    RETURN_IF_ERROR(out.WriteAt(buffer.data(), static_cast<size_t>(got), done));
    done += static_cast<uint64_t>(got);
  }
  return Status::Ok();
}

// Copies `size` bytes of `in` into `out`, inside the kernel where it can.
Status CopyContents(int in, io::File& out, uint64_t size, const std::string& from) {
  uint64_t done = 0;
  while (done < size) {
    loff_t in_offset = static_cast<loff_t>(done), out_offset = static_cast<loff_t>(done);
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kCopyPieceBytes, size - done));
    const ssize_t got = copy_file_range(in, &in_offset, out.fd(), &out_offset, want, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
      return CopyThroughBuffer(in, out, done, size, from);
    }
    if (got < 0) return io::ErrnoStatus(errno, "cannot copy " + Quoted(from) + " to " + Quoted(out.path()));
    if (got == 0) return Corrupt(Quoted(from) + " shrank while it was being persisted");
    done += static_cast<uint64_t>(got);
  }
  return Status::Ok();
}

// Copies the file `name` beneath `from_root` (a regular file reached without links) to `to`, durably. Returns its
// size.
Result<uint64_t> CopyFile(const std::string& from_root, const std::string& name, const std::string& to) {
  ASSIGN_OR_RETURN(int raw_in, io::OpenBeneath(from_root, name, O_RDONLY));
  UniqueFd in(raw_in);
  struct stat st;
  if (fstat(in.get(), &st) != 0) return io::ErrnoStatus(errno, "cannot inspect " + Quoted(from_root + "/" + name));
  ASSIGN_OR_RETURN(io::File out, io::File::CreateNew(to));
  RETURN_IF_ERROR(CopyContents(in.get(), out, static_cast<uint64_t>(st.st_size), from_root + "/" + name));
  RETURN_IF_ERROR(out.Sync());
  RETURN_IF_ERROR(out.Close());
  return static_cast<uint64_t>(st.st_size);
}

// Copies the data files `names` (beneath `source`/data) into `target_data`, several at once: one file's copy
// leaves most of the storage's bandwidth unused (a page-cache copy and a sync at a time). Returns their bytes.
Result<uint64_t> CopyDataFiles(const std::string& source, const std::vector<std::string>& names,
                               const std::string& target_data) {
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> bytes{0};
  std::mutex failure_mutex;
  Status failure;
  auto copy_files = [&] {
    for (size_t i = next++; i < names.size(); i = next++) {
      Result<uint64_t> copied = CopyFile(source, "data/" + names[i], io::JoinPath(target_data, names[i]));
      if (copied.ok()) {
        bytes += *copied;
        continue;
      }
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (failure.ok()) failure = copied.status();
      next = names.size();  // the others stop after their current file
    }
  };
  std::vector<std::thread> copiers;
  for (size_t t = 1; t < std::min(names.size(), kCopyThreads); ++t) copiers.emplace_back(copy_files);
  copy_files();
  for (std::thread& copier : copiers) copier.join();
  RETURN_IF_ERROR(failure);
  return bytes.load();
}

// Copies the checkpoint `source` into the directory `target`: data/*.bin first, the MANIFEST that makes it a
// checkpoint last, then syncs both directories. Only names this process listed are opened, and only data files.
Result<uint64_t> CopyCheckpoint(const std::string& source, const std::string& target) {
  const std::string target_data = io::JoinPath(target, "data");
  RETURN_IF_ERROR(io::MakeDirectories(target_data));
  ASSIGN_OR_RETURN(std::vector<std::string> names, io::ListDirectory(io::JoinPath(source, "data")));
  for (const std::string& name : names) {
    if (name.size() <= 4 || name.compare(name.size() - 4, 4, ".bin") != 0) {
      return Corrupt("the memory checkpoint " + Quoted(source) + " holds " + Quoted("data/" + name) +
                     ", which is no data file; it is not persisted");
    }
  }
  ASSIGN_OR_RETURN(uint64_t bytes, CopyDataFiles(source, names, target_data));
  ASSIGN_OR_RETURN(uint64_t manifest, CopyFile(source, "MANIFEST", io::JoinPath(target, "MANIFEST")));
  RETURN_IF_ERROR(io::SyncDirectory(target_data));
  RETURN_IF_ERROR(io::SyncDirectory(target));
  return bytes + manifest;
}

// Moves the manager's `latest` to the persisted step, never back past a newer step. Returns why it could not, or
// an empty string.
std::string PublishStep(const MemoryCheckpoint& c) {
  Result<std::unique_ptr<runtime::CheckpointManager>> manager = runtime::CheckpointManager::Open(c.manager_root, {});
  if (!manager.ok()) return manager.status().message();
  if (!(*manager)->IsCommitted(c.step)) {
    return "the manager " + Quoted(c.manager_root) + " has no committed step " + std::to_string(c.step) + " at " +
           Quoted((*manager)->StepPath(c.step)) + ", so `latest` was not moved";
  }
  Result<std::optional<uint64_t>> latest = (*manager)->Latest();
  if (!latest.ok()) return latest.status().message();
  if (latest->has_value() && **latest > c.step) return "";
  Status published = (*manager)->PublishLatest(c.step);
  // kInvalidArgument: `latest` names a newer step, which must stay.
  return published.ok() || published.code() == Code::kInvalidArgument ? "" : published.message();
}

bool IsCommittedDirectory(const std::string& path) {
  return io::IsDirectory(path) && io::PathExists(io::JoinPath(path, "MANIFEST"));
}

}  // namespace

Result<PersistReport> PersistCheckpoint(const std::string& memory_dir, const MemoryCheckpoint& checkpoint) {
  PersistReport report;
  const std::string& target = checkpoint.storage_path;
  if (target.empty())
    return InvalidArgument("the memory checkpoint " + Quoted(checkpoint.name) + " has no storage path");
  if (IsCommittedDirectory(target)) {
    report.found_committed = true;
  } else {
    const std::string save_id = runtime::NewSaveId();
    ASSIGN_OR_RETURN(UniqueFd claim, runtime::ClaimSaveDirectory(target, save_id));
    const std::string temporary = runtime::TemporaryDirectory(target, save_id);
    Result<uint64_t> copied = CopyCheckpoint(io::JoinPath(memory_dir, checkpoint.name), temporary);
    Status committed = copied.status();
    if (committed.ok()) committed = io::RenameNoReplace(temporary, target);
    if (committed.ok()) committed = io::SyncDirectory(io::ParentDirectory(target));
    if (!committed.ok()) {
      (void)io::RemoveTree(temporary);  // gone already if the rename was done and only the sync failed
      return committed;
    }
    report.bytes = *copied;
  }
  if (!checkpoint.manager_root.empty()) report.publish_error = PublishStep(checkpoint);
  return report;
}

Persister::Persister(MemoryStore& store, LogFn log) : store_(store), log_(std::move(log)) {
  thread_ = std::thread([this] { Loop(); });
}

Persister::~Persister() { Stop(); }

void Persister::Enqueue(MemoryCheckpoint checkpoint) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return;
  queue_.push_back(std::move(checkpoint));
  wake_.notify_one();
}

bool Persister::Busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_one_ || !queue_.empty();
}

void Persister::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    queue_.clear();
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void Persister::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    MemoryCheckpoint checkpoint = std::move(queue_.front());
    queue_.pop_front();
    running_one_ = true;
    lock.unlock();
    RunOne(checkpoint);
    lock.lock();
    running_one_ = false;
  }
}

void Persister::RunOne(const MemoryCheckpoint& checkpoint) {
  const std::string what = Quoted(checkpoint.name) + " to " + Quoted(checkpoint.storage_path);
  log_("persist started: " + what);
  const auto start = std::chrono::steady_clock::now();
  Result<PersistReport> report = Internal("the persist of " + what + " did not run");
  // This thread's boundary: an exception (an allocation that failed) fails this persist, not the agent.
  if (std::optional<Status> thrown =
          ExceptionIn("persisting " + what, [&] { report = PersistCheckpoint(store_.directory(), checkpoint); })) {
    report = *thrown;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!report.ok()) {
    log_("persist failed: " + what + ": " + report.status().message());
    store_.FinishPersist(checkpoint.name, report.status().message(), "");
    return;
  }
  char timing[64];
  std::snprintf(timing, sizeof timing, "%.3f s", seconds);
  log_(report->found_committed
           ? "persist finished: " + what + " was committed already; left untouched"
           : "persist finished: " + what + ", " + std::to_string(report->bytes) + " bytes in " + timing);
  if (!report->publish_error.empty()) log_("persist: " + report->publish_error);
  store_.FinishPersist(checkpoint.name, "", report->publish_error);
}

}  // namespace ckpt::agent

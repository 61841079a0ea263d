#include "agent/persister.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/os_error.h"
#include "io/claimed_directory.h"
#include "io/confined_open.h"
#include "io/durable_publish.h"
#include "io/file_io.h"
#include "io/file_jobs.h"
#include "io/file_mapping.h"
#include "io/object_storage.h"
#include "runtime/format/manifest.h"
#include "runtime/format/save_directory.h"
#include "runtime/manager/manager.h"

namespace ckpt::agent {
namespace {

// copy_file_range moves this much per call: large enough that the calls cost nothing next to the copy, small
// enough that a stop request waits for one piece at most a second or so.
constexpr size_t kCopyPieceBytes = size_t{1} << 30;
// The buffer of the read/write fallback.
constexpr size_t kFallbackBufferBytes = size_t{8} << 20;
// Data files copied at once: each rank writes one per I/O worker, so a node's checkpoint has several.
constexpr size_t kCopyThreads = 8;

// O_DIRECT writes: offsets, lengths and the buffer aligned to this (the page size, a multiple of every block size
// ext4 and XFS use), and this much per write.
constexpr size_t kDirectAlignment = 4096;
constexpr size_t kDirectPieceBytes = size_t{8} << 20;

// Reads exactly `size` bytes of `in` at `offset`.
Status ReadExactly(int in, char* data, size_t size, uint64_t offset, const std::string& from) {
  while (size > 0) {
    const ssize_t got = pread(in, data, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return OsError("cannot read " + Quoted(from), errno);
    if (got == 0) return Corrupt(Quoted(from) + " shrank while it was being persisted");
    data += got;
    offset += static_cast<uint64_t>(got);
    size -= static_cast<size_t>(got);
  }
  return Status::Ok();
}

// The read/write copy of bytes [done, size), for file systems between which the kernel refuses to copy.
Status CopyThroughBuffer(int in, io::File& out, uint64_t done, uint64_t size, const std::string& from) {
  std::vector<char> buffer(static_cast<size_t>(std::min<uint64_t>(kFallbackBufferBytes, size - done)));
  while (done < size) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buffer.size(), size - done));
    RETURN_IF_ERROR(ReadExactly(in, buffer.data(), want, done, from));
    RETURN_IF_ERROR(out.WriteAt(buffer.data(), want, done));
    done += want;
  }
  return Status::Ok();
}

// Copies `size` bytes of `in` into `out` through an aligned buffer with O_DIRECT writes, which skip the page cache:
// a buffered copy fills a page-cache page for every 4 KiB, which writeback then copies again. Measured with 8 files
// of 128 MiB at once: 0.46-0.52 s buffered against 0.32-0.35 s direct on the RAM-backed disk, 0.76-0.94 s against
// 0.54-0.67 s on the virtio disk. The bytes past the last aligned block go through `out`. Returns false, having
// written nothing, where the target takes no direct writes.
Result<bool> CopyDirect(int in, io::File& out, uint64_t size, const std::string& from) {
  const uint64_t aligned_end = size / kDirectAlignment * kDirectAlignment;
  if (aligned_end == 0) return false;
  // A second open file description of the same file, never a path that could have changed since. Where it cannot
  // be had (tmpfs refuses O_DIRECT with EINVAL; a system without /proc), the ordinary copy serves.
  UniqueFd direct(open(("/proc/self/fd/" + std::to_string(out.fd())).c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC));
  if (!direct.valid()) return false;
  std::unique_ptr<char, decltype(&free)> buffer(
      static_cast<char*>(std::aligned_alloc(kDirectAlignment, kDirectPieceBytes)), &free);
  if (buffer == nullptr) return NoSpace("no memory for a buffer to persist " + Quoted(from));
  for (uint64_t done = 0; done < aligned_end;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kDirectPieceBytes, aligned_end - done));
    RETURN_IF_ERROR(ReadExactly(in, buffer.get(), want, done, from));
    ssize_t wrote = -1;
    do {
      wrote = pwrite(direct.get(), buffer.get(), want, static_cast<off_t>(done));
    } while (wrote < 0 && errno == EINTR);
    if (wrote < 0 && errno == EINVAL && done == 0) return false;  // an alignment the device refuses
    if (wrote < 0) return OsError("cannot write " + Quoted(out.path()), errno);
    // A short direct write leaves the rest of the piece, perhaps unaligned, to the ordinary descriptor.
    const size_t written = static_cast<size_t>(wrote);
    if (written < want) RETURN_IF_ERROR(out.WriteAt(buffer.get() + written, want - written, done + written));
    done += want;
  }
  if (aligned_end < size) {
    const size_t tail = static_cast<size_t>(size - aligned_end);
    RETURN_IF_ERROR(ReadExactly(in, buffer.get(), tail, aligned_end, from));
    RETURN_IF_ERROR(out.WriteAt(buffer.get(), tail, aligned_end));
  }
  return true;
}

// Copies `size` bytes of `in` into `out`: direct where the target allows, else inside the kernel where it can.
Status CopyContents(int in, io::File& out, uint64_t size, const std::string& from) {
  ASSIGN_OR_RETURN(const bool copied, CopyDirect(in, out, size, from));
  if (copied) return Status::Ok();
  uint64_t done = 0;
  while (done < size) {
    loff_t in_offset = static_cast<loff_t>(done), out_offset = static_cast<loff_t>(done);
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kCopyPieceBytes, size - done));
    const ssize_t got = copy_file_range(in, &in_offset, out.fd(), &out_offset, want, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
      return CopyThroughBuffer(in, out, done, size, from);
    }
    if (got < 0) return OsError("cannot copy " + Quoted(from) + " to " + Quoted(out.path()), errno);
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
  if (fstat(in.get(), &st) != 0) return OsError("cannot inspect " + Quoted(from_root + "/" + name), errno);
  ASSIGN_OR_RETURN(io::File out, io::File::CreateNew(to));
  RETURN_IF_ERROR(CopyContents(in.get(), out, static_cast<uint64_t>(st.st_size), from_root + "/" + name));
  RETURN_IF_ERROR(out.Sync());
  RETURN_IF_ERROR(out.Close());
  return static_cast<uint64_t>(st.st_size);
}

// Uploads the file `name` beneath `from_root` (a regular file reached without links) as the object at the URL `to`,
// straight from its mapping: the object appears whole when its upload completes. Returns its size.
Result<uint64_t> UploadFile(const std::string& from_root, const std::string& name, const std::string& to) {
  const std::string from = from_root + "/" + name;
  ASSIGN_OR_RETURN(int raw_in, io::OpenBeneath(from_root, name, O_RDONLY));
  UniqueFd in(raw_in);
  struct stat st;
  if (fstat(in.get(), &st) != 0) return OsError("cannot inspect " + Quoted(from), errno);
  const auto size = static_cast<uint64_t>(st.st_size);
  ASSIGN_OR_RETURN(io::FileMapping mapping, io::FileMapping::Map(in.get(), from, 0, size));
  ASSIGN_OR_RETURN(std::unique_ptr<io::FileJobExecutor> uploader,
                   io::FileJobExecutor::CreateForCallerMemory(io::IoTuning{}));
  io::WriteJob job;
  job.path = to;
  job.create = true;
  job.finish = true;
  job.final_size = size;
  job.compute_checksums = false;
  if (size > 0) job.segments.push_back(io::FileSegment{0, 0, size});
  RETURN_IF_ERROR(uploader->WriteFrom(job, {mapping.data()}).status());
  return size;
}

// Copies the file `name` beneath `from_root` to `to`: a file, or an object where `to` is an object storage URL.
Result<uint64_t> Transfer(const std::string& from_root, const std::string& name, const std::string& to) {
  return io::IsObjectStorePath(to) ? UploadFile(from_root, name, to) : CopyFile(from_root, name, to);
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
      Result<uint64_t> copied = Transfer(source, "data/" + names[i], io::JoinPath(target_data, names[i]));
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

// The names in `source`/data, every one a data file. Only names this process listed are opened.
Result<std::vector<std::string>> DataFileNames(const std::string& source) {
  ASSIGN_OR_RETURN(std::vector<std::string> names, io::ListDirectory(io::JoinPath(source, "data")));
  for (const std::string& name : names) {
    if (name.size() <= 4 || name.compare(name.size() - 4, 4, ".bin") != 0) {
      return Corrupt("the memory checkpoint " + Quoted(source) + " holds " + Quoted("data/" + name) +
                     ", which is no data file; it is not persisted");
    }
  }
  return names;
}

// Copies the checkpoint `source` into the directory `target`: data/*.bin first, the MANIFEST that makes it a
// checkpoint last, each file synced.
Result<uint64_t> CopyCheckpoint(const std::string& source, const std::string& target) {
  const std::string target_data = io::JoinPath(target, "data");
  RETURN_IF_ERROR(io::MakeDirectories(target_data));
  ASSIGN_OR_RETURN(const std::vector<std::string> names, DataFileNames(source));
  ASSIGN_OR_RETURN(uint64_t bytes, CopyDataFiles(source, names, target_data));
  ASSIGN_OR_RETURN(uint64_t manifest, CopyFile(source, "MANIFEST", io::JoinPath(target, "MANIFEST")));
  return bytes + manifest;
}

// Uploads the checkpoint `source` to object storage as a save would write it (runtime/format/save_directory.h):
// its data objects under `target`/data/<save_id>/, then the MANIFEST, its file names moved there, created only if
// absent: the commit.
Result<uint64_t> UploadCheckpoint(const std::string& source, const std::string& target, const std::string& save_id) {
  const std::string data_directory = runtime::DataDirectoryOf(target, save_id);
  ASSIGN_OR_RETURN(const std::vector<std::string> names, DataFileNames(source));
  ASSIGN_OR_RETURN(uint64_t bytes, CopyDataFiles(source, names, io::JoinPath(target, data_directory)));
  ASSIGN_OR_RETURN(const std::string held,
                   io::ReadWholeFile(source, runtime::kManifestName, runtime::kMaxManifestBytes));
  ASSIGN_OR_RETURN(runtime::Manifest manifest,
                   runtime::DecodeManifest(held, io::JoinPath(source, runtime::kManifestName)));
  // Each is "data/<name>" (DecodeManifest checks it): the same name under the save's own folder.
  for (runtime::DataFileRecord& file : manifest.files) {
    file.name = data_directory + file.name.substr(std::string(runtime::kDataDirName).size());
  }
  ASSIGN_OR_RETURN(const std::string encoded, runtime::EncodeManifest(manifest));
  RETURN_IF_ERROR(io::CreateObjectExclusive(io::JoinPath(target, runtime::kManifestName), encoded));
  return bytes + encoded.size();
}

// Persists the checkpoint of one node to object storage, where nothing can be renamed: its objects go where they
// stay, under a folder of their own, so that a persist that fails, or races another to the same path, removes
// only its own.
Result<uint64_t> PersistToObjectStore(const std::string& source, const std::string& target) {
  const std::string save_id = runtime::NewSaveId();
  ASSIGN_OR_RETURN(io::Claim claim, runtime::ClaimSaveDirectory(target, save_id));
  Result<uint64_t> uploaded = UploadCheckpoint(source, target, save_id);
  if (!uploaded.ok()) (void)io::RemoveTree(runtime::UncommittedSaveFiles(target, save_id));
  return uploaded;
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

// How often a node waiting for another (its claim, its files, its commit) looks again.
constexpr std::chrono::milliseconds kPeerPollInterval{20};

std::string DoneMarker(uint32_t node_index) { return ".done-" + std::to_string(node_index); }

// Polls `ready` until it holds or `wait` has passed.
bool AwaitCondition(const std::function<bool()>& ready, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (!ready()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kPeerPollInterval);
  }
  return true;
}

// Copies this node's own data files of `checkpoint` into `temporary`/data and syncs them.
Result<uint64_t> CopyOwnFiles(const std::string& source, const MemoryCheckpoint& checkpoint,
                              const std::string& temporary) {
  const std::string target_data = io::JoinPath(temporary, "data");
  RETURN_IF_ERROR(io::MakeDirectories(target_data));
  for (const std::string& name : checkpoint.own_files) {
    if (name.empty() || name[0] == '.' || name.find('/') != std::string::npos || name.size() <= 4 ||
        name.compare(name.size() - 4, 4, ".bin") != 0) {
      return Corrupt("the memory checkpoint " + Quoted(source) + " lists " + Quoted(name) +
                     " as its own, which is no data file; it is not persisted");
    }
  }
  ASSIGN_OR_RETURN(uint64_t bytes, CopyDataFiles(source, checkpoint.own_files, target_data));
  RETURN_IF_ERROR(io::SyncDirectory(target_data));
  return bytes;
}

// Node 0 of a checkpoint spanning nodes: claims the temporary named after the memory save, copies its own files,
// waits for every other node's marker (their files are then durable in it), and commits with the MANIFEST.
Result<uint64_t> CommitAcrossNodes(const std::string& source, const MemoryCheckpoint& checkpoint,
                                   const std::string& temporary, std::chrono::milliseconds peer_wait) {
  const std::string& target = checkpoint.storage_path;
  ASSIGN_OR_RETURN(io::Claim claim, runtime::ClaimSaveDirectory(target, checkpoint.save_id));
  Result<uint64_t> copied = CopyOwnFiles(source, checkpoint, temporary);
  Status committed = copied.status();
  std::vector<uint32_t> missing;
  auto all_done = [&] {
    missing.clear();
    for (uint32_t n = 1; n < checkpoint.node_count; ++n) {
      if (!io::PathExists(io::JoinPath(temporary, DoneMarker(n)))) missing.push_back(n);
    }
    return missing.empty();
  };
  if (committed.ok() && !AwaitCondition(all_done, peer_wait)) {
    std::string nodes;
    for (uint32_t n : missing) nodes += (nodes.empty() ? "" : ", ") + std::to_string(n);
    committed = Timeout("node(s) " + nodes + " of " + std::to_string(checkpoint.node_count) +
                        " did not persist their files within " + std::to_string(peer_wait.count() / 1000) +
                        " s (their agents' logs say why); nothing was committed");
  }
  for (uint32_t n = 1; committed.ok() && n < checkpoint.node_count; ++n) {
    committed = io::RemoveTree(io::JoinPath(temporary, DoneMarker(n)));
  }
  if (committed.ok()) {
    // Every node's marker is in, but a node that held the wrong files (one that replaced a lost node) may have
    // written fewer than the manifest lists: nothing incomplete is ever committed.
    Result<std::vector<std::string>> missing = runtime::MissingDataFiles(source, temporary);
    committed = missing.status();
    if (missing.ok() && !missing->empty()) {
      committed = Corrupt("the nodes' files lack " + std::to_string(missing->size()) + " the manifest lists (" +
                          Quoted(missing->front()) + " first); nothing was committed");
    }
  }
  Result<uint64_t> manifest = Internal("the MANIFEST was not copied");
  if (committed.ok()) {
    manifest = CopyFile(source, "MANIFEST", io::JoinPath(temporary, "MANIFEST"));
    committed = manifest.status();
  }
  // Every node synced its own files' entries in data/ before leaving its marker.
  if (committed.ok()) committed = io::PublishDirectory(temporary, {}, target);
  if (!committed.ok()) {
    (void)io::RemoveTree(temporary);
    return committed;
  }
  return *copied + *manifest;
}

// Any other node: once node 0 has claimed the temporary, copies its own files into it, marks them done, and waits
// for node 0's commit so that it reports the truth.
Result<uint64_t> ContributeAcrossNodes(const std::string& source, const MemoryCheckpoint& checkpoint,
                                       const std::string& temporary, std::chrono::milliseconds peer_wait) {
  const std::string& target = checkpoint.storage_path;
  if (!AwaitCondition([&] { return IsCommittedDirectory(target) || io::IsClaimed(temporary); }, peer_wait)) {
    return Timeout("node 0 of the checkpoint did not begin persisting it at " + Quoted(temporary) + " within " +
                   std::to_string(peer_wait.count() / 1000) + " s; this node's files were not written");
  }
  if (IsCommittedDirectory(target)) return uint64_t{0};
  ASSIGN_OR_RETURN(uint64_t bytes, CopyOwnFiles(source, checkpoint, temporary));
  const std::string marker = io::JoinPath(temporary, DoneMarker(checkpoint.node_index));
  // Node 0 may commit (rename the temporary) as soon as the marker is there; it syncs the directory itself.
  RETURN_IF_ERROR(io::WriteFileDurably(marker, "", 0));
  if (!AwaitCondition([&] { return IsCommittedDirectory(target) || !io::IsDirectory(temporary); }, peer_wait) ||
      !IsCommittedDirectory(target)) {
    return PeerFailed("node 0 did not commit " + Quoted(target) +
                      " after this node wrote its files (its agent's "
                      "log says why)");
  }
  return bytes;
}

}  // namespace

Result<PersistReport> PersistCheckpoint(const std::string& memory_dir, const MemoryCheckpoint& checkpoint,
                                        std::chrono::milliseconds peer_wait) {
  PersistReport report;
  const std::string& target = checkpoint.storage_path;
  if (target.empty())
    return InvalidArgument("the memory checkpoint " + Quoted(checkpoint.name) + " has no storage path");
  const std::string source = io::JoinPath(memory_dir, checkpoint.name);
  if (IsCommittedDirectory(target)) {
    report.found_committed = true;
  } else if (checkpoint.node_count > 1 && io::IsObjectStorePath(target)) {
    return Unsupported("persisting " + Quoted(target) + ": a memory checkpoint that spans " +
                       std::to_string(checkpoint.node_count) +
                       " nodes is persisted to POSIX storage only (each node's agent writes its own files there)");
  } else if (checkpoint.node_count > 1) {
    if (checkpoint.save_id.empty()) {
      return InvalidArgument("the memory checkpoint " + Quoted(checkpoint.name) + " spans " +
                             std::to_string(checkpoint.node_count) + " nodes but names no save");
    }
    const std::string temporary = runtime::TemporaryDirectory(target, checkpoint.save_id);
    ASSIGN_OR_RETURN(report.bytes, checkpoint.node_index == 0
                                       ? CommitAcrossNodes(source, checkpoint, temporary, peer_wait)
                                       : ContributeAcrossNodes(source, checkpoint, temporary, peer_wait));
  } else if (io::IsObjectStorePath(target)) {
    ASSIGN_OR_RETURN(report.bytes, PersistToObjectStore(source, target));
  } else {
    const std::string save_id = runtime::NewSaveId();
    ASSIGN_OR_RETURN(io::Claim claim, runtime::ClaimSaveDirectory(target, save_id));
    const std::string temporary = runtime::TemporaryDirectory(target, save_id);
    Result<uint64_t> copied = CopyCheckpoint(source, temporary);
    Status committed = copied.status();
    if (committed.ok()) committed = io::PublishDirectory(temporary, {"data"}, target);
    if (!committed.ok()) {
      (void)io::RemoveTree(temporary);  // gone already if the rename was done and only the sync failed
      return committed;
    }
    report.bytes = *copied;
  }
  // Node 0 alone moves the manager's pointer, once, after the commit.
  if (!checkpoint.manager_root.empty() && checkpoint.node_index == 0) report.publish_error = PublishStep(checkpoint);
  return report;
}

Persister::Persister(MemoryStore& store, LogFn log, std::chrono::milliseconds peer_wait)
    : store_(store), log_(std::move(log)), peer_wait_(peer_wait) {
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

bool Persister::AnyFailed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return any_failed_;
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
  if (std::optional<Status> thrown = ExceptionIn(
          "persisting " + what, [&] { report = PersistCheckpoint(store_.directory(), checkpoint, peer_wait_); })) {
    report = *thrown;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!report.ok() || !report->publish_error.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    any_failed_ = true;
  }
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

#include "agent/memory_store.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "common/os_error.h"
#include "io/claimed_directory.h"
#include "io/file_io.h"
#include "io/object_storage.h"
#include "runtime/format/save_directory.h"

namespace ckpt::agent {
namespace {

// A sidecar holds one encoded checkpoint: a few paths, far below this.
constexpr uint64_t kMaxSidecarBytes = 1 << 20;

std::string SidecarName(const std::string& name) { return "." + name + ".meta"; }

bool IsTemporaryName(const std::string& name) { return name.find(runtime::kTemporaryInfix) != std::string::npos; }

std::string Bytes(uint64_t n) { return std::to_string(n) + " bytes"; }

// Where recycled data files wait (memory_store.h): hidden, so that no checkpoint can be named so and an agent
// adopting the directory removes it.
constexpr char kRecycledDir[] = ".recycled";

// The real size of a checkpoint directory: its regular files, links not followed, so that the budget counts what
// the saves wrote rather than what they claimed.
uint64_t DirectoryBytes(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  uint64_t total = 0;
  for (fs::recursive_directory_iterator it(path, error), end; !error && it != end; it.increment(error)) {
    const fs::file_status status = it->symlink_status(error);
    if (!error && fs::is_regular_file(status)) total += it->file_size(error);
  }
  return total;
}

// Creates `dir` with mode 0700, or checks the existing one: a real directory, owned by this user, then closed to
// everyone else again. Returns whether it existed (there is something to adopt).
Result<bool> MakeOwnDirectory(const std::string& dir) {
  bool existed = false;
  if (mkdir(dir.c_str(), 0700) != 0) {
    if (errno != EEXIST) return OsError("cannot create the memory directory " + Quoted(dir), errno);
    existed = true;
  }
  UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st;
  if (!fd.valid() || fstat(fd.get(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return InvalidArgument("the memory directory " + Quoted(dir) + " exists but is not a directory (or is a link)");
  }
  if (st.st_uid != geteuid()) {
    return InvalidArgument("the memory directory " + Quoted(dir) + " belongs to uid " + std::to_string(st.st_uid) +
                           ", not to this agent's uid " + std::to_string(geteuid()));
  }
  if (fchmod(fd.get(), 0700) != 0) return OsError("cannot restrict " + Quoted(dir) + " to mode 0700", errno);
  return existed;
}

// When the sidecar was written: adopted checkpoints are ordered by it, oldest first.
int64_t ModifiedNanos(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return 0;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// What the persister turns into places on storage. The agent runs in "/" and on behalf of ranks elsewhere: a
// relative path would mean another place to it (an object storage URL means the same place to every process). The save id names the temporary directory beside the storage path,
// so it is hex digits only, as runtime::NewSaveId makes them (or none: a checkpoint of one node).
Status ValidateStorageNames(const MemoryCheckpoint& checkpoint) {
  for (const std::string* path : {&checkpoint.storage_path, &checkpoint.manager_root}) {
    if (!path->empty() && path->front() != '/' && !io::IsObjectStorePath(*path)) {
      return InvalidArgument("the memory checkpoint " + Quoted(checkpoint.name) + " names the relative path " +
                             Quoted(*path) + "; the agent needs absolute storage paths");
    }
  }
  const std::string& id = checkpoint.save_id;
  if (id.size() > 64 ||
      !std::all_of(id.begin(), id.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); })) {
    return InvalidArgument("the memory checkpoint " + Quoted(checkpoint.name) + " names the save " + Quoted(id) +
                           ", which is no save id (hex digits)");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateEntryName(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.front() == '.' || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return InvalidArgument(Quoted(name) + " is no plain, visible directory name inside the memory directory");
  }
  return Status::Ok();
}

Result<std::unique_ptr<MemoryStore>> MemoryStore::Open(std::string dir, std::string node, uint64_t budget_bytes,
                                                       LogFn log) {
  ASSIGN_OR_RETURN(bool existed, MakeOwnDirectory(dir));
  std::unique_ptr<MemoryStore> store(new MemoryStore(std::move(dir), std::move(node), budget_bytes, std::move(log)));
  if (existed) RETURN_IF_ERROR(store->Adopt());
  return store;
}

// What an agent of this job that died left: checkpoints with sidecars are kept, claimed temporaries belong to live
// saves, the rest is debris.
Status MemoryStore::Adopt() {
  ASSIGN_OR_RETURN(std::vector<std::string> names, io::ListDirectory(dir_));
  std::vector<std::pair<int64_t, Entry>> adopted;
  std::vector<std::string> keep;
  for (const std::string& name : names) {
    const std::string path = io::JoinPath(dir_, name);
    if (IsTemporaryName(name) || !ValidateEntryName(name).ok()) {
      if (IsTemporaryName(name) && io::IsClaimed(path)) keep.push_back(name);
      continue;
    }
    Result<std::string> sidecar = io::ReadWholeFile(dir_, SidecarName(name), kMaxSidecarBytes);
    if (!sidecar.ok() || !io::PathExists(io::JoinPath(path, "MANIFEST"))) continue;
    Result<std::vector<MemoryCheckpoint>> decoded = coll::agent::DecodeCheckpoints(*sidecar);
    if (!decoded.ok() || decoded->size() != 1 || decoded->front().name != name) continue;
    Entry entry{decoded->front()};
    entry.checkpoint.bytes = DirectoryBytes(path);
    entry.checkpoint.persist_error.clear();
    adopted.emplace_back(ModifiedNanos(io::JoinPath(dir_, SidecarName(name))), std::move(entry));
    keep.push_back(name);
    keep.push_back(SidecarName(name));
  }
  std::stable_sort(adopted.begin(), adopted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [when, entry] : adopted) {
    log_("adopted memory checkpoint '" + entry.checkpoint.name + "' (" + Bytes(entry.checkpoint.bytes) + ")");
    entries_.push_back(std::move(entry));
  }
  for (const std::string& name : names) {
    if (std::find(keep.begin(), keep.end(), name) != keep.end()) continue;
    Status removed = io::RemoveTree(io::JoinPath(dir_, name));
    log_(removed.ok() ? "removed '" + name + "', left by an earlier agent" : removed.message());
  }
  return Status::Ok();
}

uint64_t MemoryStore::UsedBytesLocked() const {
  uint64_t used = 0;
  for (const Entry& entry : entries_) used += entry.checkpoint.bytes;
  for (const auto& [key, bytes] : reserved_) used += bytes;
  for (const auto& [transfer, incoming] : incoming_) used += incoming.second;
  return used + recycled_bytes_;
}

std::string MemoryStore::BudgetRefusal(const std::string& name, uint64_t bytes) const {
  std::string kept;
  for (const Entry& entry : entries_) {
    kept += (kept.empty() ? "" : ", ") + Quoted(entry.checkpoint.name) + " (" + Bytes(entry.checkpoint.bytes) + ")";
  }
  uint64_t in_flight = 0;
  for (const auto& [key, reserved] : reserved_) in_flight += reserved;
  for (const auto& [transfer, incoming] : incoming_) in_flight += incoming.second;
  return "the memory budget of node '" + node_ + "' is " + Bytes(budget_bytes_) + "; it holds the checkpoints " +
         (kept.empty() ? "(none)" : kept) + " and " + Bytes(in_flight) +
         " reserved by saves and replicas in flight, so writing " + Quoted(name) + ", which needs " + Bytes(bytes) +
         ", does not fit. Raise CKPT_AGENT_BUDGET_BYTES (the agent's --budget-bytes) or save to storage instead";
}

Status MemoryStore::FitsBudgetLocked(const std::string& name, uint64_t bytes, const char* what) {
  const auto fits = [&] {
    const uint64_t used = UsedBytesLocked();
    return used <= budget_bytes_ && bytes <= budget_bytes_ - used;
  };
  if (fits()) return Status::Ok();
  if (recycled_bytes_ > 0) {
    DropRecycledLocked();
    if (fits()) return Status::Ok();
  }
  const std::string refusal = BudgetRefusal(name, bytes);
  log_(std::string(what) + " refused: " + refusal);
  return NoSpace(refusal);
}

Status MemoryStore::Reserve(SessionId session, const std::string& name, uint64_t bytes,
                            const std::vector<PlannedFile>& files) {
  RETURN_IF_ERROR(ValidateEntryName(name));
  if (!files.empty() && !IsTemporaryName(name)) {
    return InvalidArgument("files are placed only in a save's temporary directory, not in " + Quoted(name));
  }
  for (const PlannedFile& file : files) RETURN_IF_ERROR(ValidateEntryName(file.name));
  std::lock_guard<std::mutex> lock(mu_);
  // Taken before the budget is checked, which would otherwise delete them to make room for the very same bytes.
  const std::string data_dir = io::JoinPath(io::JoinPath(dir_, name), "data");
  std::vector<std::string> placed;
  for (const PlannedFile& file : files) {
    const std::string path = io::JoinPath(data_dir, file.name);
    if (file.size > 0 && TakeRecycledLocked(path, file.size, false)) placed.push_back(path);
  }
  const Status fits = FitsBudgetLocked(name, bytes, "reserve");
  if (!fits.ok()) {
    // Counted nowhere now (neither recycled nor reserved): deleted, so that no memory escapes the budget.
    for (const std::string& path : placed) (void)unlink(path.c_str());
    if (!placed.empty()) FilesDeletedLocked();
    return fits;
  }
  reserved_[{session, name}] += bytes;
  return Status::Ok();
}

void MemoryStore::Release(SessionId session, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (reserved_.erase({session, name}) > 0) RemoveIfAbandonedLocked(name);
}

void MemoryStore::ReleaseSession(SessionId session) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (auto it = reserved_.begin(); it != reserved_.end();) {
    if (it->first.first != session) {
      ++it;
      continue;
    }
    names.push_back(it->first.second);
    it = reserved_.erase(it);
  }
  for (const std::string& name : names) RemoveIfAbandonedLocked(name);
}

// A temporary that no session reserves any more and no live save claims was left by a save that failed or died:
// its memory goes back to the node now rather than when the agent leaves.
void MemoryStore::RemoveIfAbandonedLocked(const std::string& name) {
  if (!ValidateEntryName(name).ok()) return;
  for (const auto& [key, bytes] : reserved_) {
    if (key.second == name) return;
  }
  const std::string path = io::JoinPath(dir_, name);
  if (!io::PathExists(path) || io::IsClaimed(path)) return;
  Status removed = io::RemoveTree(path);
  FilesDeletedLocked();
  log_(removed.ok() ? "removed the abandoned save " + Quoted(name) : removed.message());
}

MemoryStore::Entry* MemoryStore::FindLocked(const std::string& name) {
  for (Entry& entry : entries_) {
    if (entry.checkpoint.name == name) return &entry;
  }
  return nullptr;
}

Result<std::optional<MemoryCheckpoint>> MemoryStore::Complete(SessionId session, const std::string& reservation,
                                                              MemoryCheckpoint checkpoint, bool persist) {
  RETURN_IF_ERROR(ValidateEntryName(checkpoint.name));
  RETURN_IF_ERROR(ValidateStorageNames(checkpoint));
  std::lock_guard<std::mutex> lock(mu_);
  reserved_.erase({session, reservation});
  if (FindLocked(checkpoint.name) != nullptr) return std::optional<MemoryCheckpoint>();
  const std::string path = io::JoinPath(dir_, checkpoint.name);
  if (!io::PathExists(io::JoinPath(path, "MANIFEST"))) {
    return NotFound("no committed memory checkpoint " + Quoted(path) + " (it has no MANIFEST)");
  }
  checkpoint.bytes = DirectoryBytes(path);
  checkpoint.persisted = false;
  checkpoint.persist_error.clear();
  // Without the ranks' list: replicas of other nodes' files arrive only after every node completed, so what is here
  // now is normally this node's own.
  if (checkpoint.own_files.empty()) {
    ASSIGN_OR_RETURN(checkpoint.own_files, io::ListDirectory(io::JoinPath(path, "data")));
  }
  checkpoint.replicated = checkpoint.node_count <= 1;
  checkpoint.replication_error.clear();
  RETURN_IF_ERROR(WriteSidecar(checkpoint));
  log_("complete: memory checkpoint " + Quoted(checkpoint.name) + " (" + Bytes(checkpoint.bytes) + ") for " +
       Quoted(checkpoint.storage_path));
  entries_.push_back(Entry{std::move(checkpoint)});
  std::optional<MemoryCheckpoint> to_persist;
  if (persist) to_persist = QueueLocked(entries_.back());
  ApplyRetentionLocked();
  return to_persist;
}

std::vector<MemoryCheckpoint> MemoryStore::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<MemoryCheckpoint> list;
  for (const Entry& entry : entries_) list.push_back(entry.checkpoint);
  return list;
}

std::optional<MemoryCheckpoint> MemoryStore::QueueLocked(Entry& entry) {
  entry.persist_wanted = true;
  if (entry.checkpoint.persisted || entry.queued) return std::nullopt;
  entry.queued = true;
  return entry.checkpoint;
}

std::optional<MemoryCheckpoint> MemoryStore::Find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Entry& entry : entries_) {
    if (entry.checkpoint.name == name) return entry.checkpoint;
  }
  return std::nullopt;
}

Status MemoryStore::ReserveIncoming(uint64_t transfer, const std::string& name, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(FitsBudgetLocked(name, bytes, "replica"));
  incoming_[transfer] = {name, bytes};
  return Status::Ok();
}

bool MemoryStore::TakeRecycled(const std::string& path, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  return TakeRecycledLocked(path, size, true);
}

bool MemoryStore::TakeRecycledLocked(const std::string& path, uint64_t size, bool replace) {
  // The smallest file that holds `size`, else the largest.
  const auto better = [size](uint64_t candidate, uint64_t current) {
    const bool holds = candidate >= size;
    if (holds != (current >= size)) return holds;
    return holds ? candidate < current : candidate > current;
  };
  auto chosen = recycled_.end();
  for (auto it = recycled_.begin(); it != recycled_.end(); ++it) {
    if (chosen == recycled_.end() || better(it->second, chosen->second)) chosen = it;
  }
  if (chosen == recycled_.end()) return false;
  const std::string from = chosen->first;
  const int moved = replace ? rename(from.c_str(), path.c_str())
                            : renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
  const int error = errno;
  // Not replacing, a file already there (or no directory for it) leaves the recycled one for another.
  if (moved != 0 && !replace) return false;
  recycled_bytes_ -= chosen->second;
  recycled_.erase(chosen);
  if (moved == 0) return true;
  // The caller creates a fresh file instead; this one is of no further use.
  log_("a recycled file " + Quoted(from) + " could not be moved to " + Quoted(path) + ": " + OsErrorText(error));
  (void)unlink(from.c_str());
  FilesDeletedLocked();
  return false;
}

uint64_t MemoryStore::RecycledBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return recycled_bytes_;
}

void MemoryStore::ReleaseIncoming(uint64_t transfer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = incoming_.find(transfer);
  if (it == incoming_.end()) return;
  Entry* entry = FindLocked(it->second.first);
  if (entry != nullptr) entry->checkpoint.bytes = DirectoryBytes(io::JoinPath(dir_, entry->checkpoint.name));
  incoming_.erase(it);
}

Status MemoryStore::MarkReplicated(const std::string& name, const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry* entry = FindLocked(name);
  if (entry == nullptr) return NotFound("the agent of node '" + node_ + "' keeps no memory checkpoint " + Quoted(name));
  entry->checkpoint.replicated = error.empty();
  entry->checkpoint.replication_error = error;
  log_(error.empty() ? "replicated: memory checkpoint " + Quoted(name)
                     : "replication of " + Quoted(name) + ": " + error);
  return WriteSidecar(entry->checkpoint);
}

Status MemoryStore::RegisterFetched(MemoryCheckpoint checkpoint) {
  RETURN_IF_ERROR(ValidateEntryName(checkpoint.name));
  RETURN_IF_ERROR(ValidateStorageNames(checkpoint));
  std::lock_guard<std::mutex> lock(mu_);
  const std::string path = io::JoinPath(dir_, checkpoint.name);
  if (!io::PathExists(io::JoinPath(path, "MANIFEST"))) {
    return NotFound("no fetched memory checkpoint " + Quoted(path) + " (it has no MANIFEST)");
  }
  if (Entry* entry = FindLocked(checkpoint.name)) {
    entry->checkpoint.bytes = DirectoryBytes(path);
    return Status::Ok();
  }
  checkpoint.bytes = DirectoryBytes(path);
  checkpoint.persisted = false;
  checkpoint.persist_error.clear();
  checkpoint.own_files.clear();
  checkpoint.replicated = true;
  checkpoint.replication_error.clear();
  RETURN_IF_ERROR(WriteSidecar(checkpoint));
  log_("fetched: memory checkpoint " + Quoted(checkpoint.name) + " (" + Bytes(checkpoint.bytes) + ") from peers");
  // A load may fetch an older step than one this node keeps: it goes before the newer steps of its manager, and no
  // retention runs now, so that a newer checkpoint (perhaps on no storage yet) is never removed for it. The next
  // save's completion applies retention as usual.
  auto newer = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) {
    return !checkpoint.manager_root.empty() && e.checkpoint.manager_root == checkpoint.manager_root &&
           e.checkpoint.step > checkpoint.step;
  });
  entries_.insert(newer, Entry{std::move(checkpoint)});
  return Status::Ok();
}

Status MemoryStore::Reassign(const MemoryCheckpoint& layout) {
  if (layout.node_index >= layout.node_count) {
    return InvalidArgument("node index " + std::to_string(layout.node_index) + " is not below the node count " +
                           std::to_string(layout.node_count));
  }
  RETURN_IF_ERROR(ValidateStorageNames(layout));
  if (layout.node_count > 1 && layout.save_id.empty()) {
    return InvalidArgument("the layout of " + Quoted(layout.name) + " spans " + std::to_string(layout.node_count) +
                           " nodes but names no save");
  }
  std::lock_guard<std::mutex> lock(mu_);
  Entry* entry = FindLocked(layout.name);
  if (entry == nullptr) {
    return NotFound("the agent of node '" + node_ + "' keeps no memory checkpoint " + Quoted(layout.name));
  }
  if (entry->checkpoint.persisted) return Status::Ok();
  const std::string data = io::JoinPath(io::JoinPath(dir_, layout.name), "data");
  for (const std::string& file : layout.own_files) {
    RETURN_IF_ERROR(ValidateEntryName(file));
    struct stat st;
    if (lstat(io::JoinPath(data, file).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return NotFound("the agent of node '" + node_ + "' holds no data file " + Quoted(file) + " of " +
                      Quoted(layout.name));
    }
  }
  MemoryCheckpoint reassigned = entry->checkpoint;
  reassigned.node_index = layout.node_index;
  reassigned.node_count = layout.node_count;
  reassigned.own_files = layout.own_files;
  reassigned.save_id = layout.save_id;
  RETURN_IF_ERROR(WriteSidecar(reassigned));
  entry->checkpoint = std::move(reassigned);
  log_("reassigned: memory checkpoint " + Quoted(layout.name) + " is persisted by this node as node " +
       std::to_string(layout.node_index) + " of " + std::to_string(layout.node_count) + ", writing " +
       std::to_string(layout.own_files.size()) + " of its data files");
  return Status::Ok();
}

Result<std::optional<MemoryCheckpoint>> MemoryStore::RequestPersist(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry* entry = FindLocked(name);
  if (entry == nullptr) return NotFound("the agent of node '" + node_ + "' keeps no memory checkpoint " + Quoted(name));
  return QueueLocked(*entry);
}

std::optional<MemoryCheckpoint> MemoryStore::RequestPersistOfNewest() {
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.empty()) return std::nullopt;
  return QueueLocked(entries_.back());
}

void MemoryStore::FinishPersist(const std::string& name, const std::string& error, const std::string& publish_error) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry* entry = FindLocked(name);
  if (entry == nullptr) return;
  entry->queued = false;
  entry->checkpoint.persisted = error.empty();
  entry->checkpoint.persist_error = error.empty() ? publish_error : error;
  if (!error.empty()) return;
  // The sidecar follows, so that an agent adopting this checkpoint knows it is safe on storage.
  Status written = WriteSidecar(entry->checkpoint);
  if (!written.ok()) log_(written.message());
  ApplyRetentionLocked();
}

// Keeps the newest checkpoint and the older ones still waiting to be persisted.
void MemoryStore::ApplyRetentionLocked() {
  if (entries_.empty()) return;
  for (size_t i = entries_.size() - 1; i-- > 0;) {
    const Entry& entry = entries_[i];
    if (entry.queued || (entry.persist_wanted && !entry.checkpoint.persisted)) continue;
    const std::string name = entry.checkpoint.name;
    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
    RemoveEntryFiles(name);
  }
}

void MemoryStore::DropRecycledLocked() {
  if (recycled_.empty()) return;
  for (const auto& [path, bytes] : recycled_) (void)unlink(path.c_str());
  recycled_.clear();
  recycled_bytes_ = 0;
  FilesDeletedLocked();
}

// The regular, visible files of M/<name>/data replace the recycled files: a hidden one is a replica still being
// received, whose writes must not land in a file handed to another, and a file with another name (a hard link) would
// be overwritten there too; links are not followed. A file that is not moved is removed with the directory.
void MemoryStore::RecycleDataFilesLocked(const std::string& name) {
  DropRecycledLocked();
  const std::string recycled_dir = io::JoinPath(dir_, kRecycledDir);
  if (mkdir(recycled_dir.c_str(), 0700) != 0 && errno != EEXIST) return;
  const std::string data = io::JoinPath(io::JoinPath(dir_, name), "data");
  Result<std::vector<std::string>> files = io::ListDirectory(data);
  if (!files.ok()) return;
  for (const std::string& file : *files) {
    const std::string from = io::JoinPath(data, file);
    struct stat st;
    if (!ValidateEntryName(file).ok() || lstat(from.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
        st.st_size == 0) {
      continue;
    }
    const std::string to = io::JoinPath(recycled_dir, std::to_string(next_recycled_++));
    if (rename(from.c_str(), to.c_str()) != 0) continue;
    recycled_[to] = static_cast<uint64_t>(st.st_size);
    recycled_bytes_ += static_cast<uint64_t>(st.st_size);
  }
}

void MemoryStore::RemoveEntryFiles(const std::string& name) {
  RecycleDataFilesLocked(name);
  Status removed = io::RemoveTree(io::JoinPath(dir_, name));
  if (removed.ok()) removed = io::RemoveTree(io::JoinPath(dir_, SidecarName(name)));
  FilesDeletedLocked();
  log_(removed.ok() ? "removed the older memory checkpoint " + Quoted(name) : removed.message());
}

// Written beside and renamed over the old one, so that an agent adopting the directory never reads half of it.
Status MemoryStore::WriteSidecar(const MemoryCheckpoint& checkpoint) const {
  const std::string encoded = coll::agent::EncodeCheckpoints({checkpoint});
  const std::string path = io::JoinPath(dir_, SidecarName(checkpoint.name));
  const std::string temporary = path + std::string(runtime::kTemporaryInfix) + std::to_string(getpid());
  (void)io::RemoveTree(temporary);  // debris of an earlier attempt; a real fault shows in the write below
  RETURN_IF_ERROR(io::WriteFileDurably(temporary, encoded.data(), encoded.size()));
  if (rename(temporary.c_str(), path.c_str()) != 0) {
    Status renamed = OsError("cannot rename " + Quoted(temporary) + " to " + Quoted(path), errno);
    (void)io::RemoveTree(temporary);
    return renamed;
  }
  return Status::Ok();
}

Status MemoryStore::RemoveAll() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
  reserved_.clear();
  incoming_.clear();
  recycled_.clear();
  recycled_bytes_ = 0;
  const Status removed = io::RemoveTree(dir_);
  FilesDeletedLocked();
  return removed;
}

void MemoryStore::SetFilesDeletedHook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  files_deleted_ = std::move(hook);
}

void MemoryStore::FilesDeletedLocked() const {
  if (files_deleted_) files_deleted_();
}

}  // namespace ckpt::agent

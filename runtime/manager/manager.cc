#include "runtime/manager/manager.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <system_error>

#include "common/os_error.h"
#include "io/claimed_directory.h"
#include "io/claimed_file.h"
#include "io/file_io.h"
#include "io/object_storage.h"
#include "runtime/format/manifest.h"
#include "runtime/format/save_directory.h"

namespace ckpt::runtime {
namespace {

constexpr std::string_view kStepPrefix = "step-";
// Saves write into "<step path>.tmp-<id>" (runtime/format/save_directory.h); the manager names its own temporaries the
// same way (kTemporaryInfix) so that one rule recognises all debris.
constexpr char kDeletingSuffix[] = "deleting";
// A pointer is one short line; anything longer is not one, and must not be read whole.
constexpr uint64_t kMaxPointerBytes = 64;

// Creates `root` (and its parents) if missing.
Status CreateRoot(const std::string& root) {
  if (root.empty()) return InvalidArgument("the checkpoint root directory path is empty");
  const std::string context = "opening checkpoint root " + Quoted(root);
  const bool existed = io::PathExists(root);
  RETURN_IF_ERROR(io::MakeDirectories(root).WithContext(context));
  // Saves sync the root after committing a step; a new root must itself survive a crash for that to matter.
  if (!existed) RETURN_IF_ERROR(io::SyncDirectory(io::ParentDirectory(root)).WithContext(context));
  return Status::Ok();
}

}  // namespace

std::string StepDirectoryName(uint64_t step) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "%012" PRIu64, step);
  return std::string(kStepPrefix) + digits;
}

std::optional<uint64_t> ParseStepDirectoryName(std::string_view name) {
  if (name.substr(0, kStepPrefix.size()) != kStepPrefix) return std::nullopt;
  const std::string_view digits = name.substr(kStepPrefix.size());
  uint64_t step = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  // Only the canonical spelling counts, so that one step has exactly one name.
  if (StepDirectoryName(step) != name) return std::nullopt;
  return step;
}

Result<std::unique_ptr<CheckpointManager>> CheckpointManager::Open(std::string root, RetentionPolicy policy) {
  if (io::IsObjectStorePath(root)) return OpenObjectStore(std::move(root), policy);
  RETURN_IF_ERROR(CreateRoot(root));
  return std::unique_ptr<CheckpointManager>(new CheckpointManager(std::move(root), policy));
}

Result<std::unique_ptr<CheckpointManager>> CheckpointManager::Claim(std::string root, RetentionPolicy policy,
                                                                    std::string_view holder, std::string* warning) {
  if (io::IsObjectStorePath(root)) {
    ASSIGN_OR_RETURN(std::unique_ptr<CheckpointManager> manager, OpenObjectStore(std::move(root), policy));
    // A lease object would need renewing for as long as the job runs, and a store's clock to judge it by.
    *warning = "object storage cannot lock, so the checkpoint root " + Quoted(manager->root()) +
               " is not claimed: a second job started on it would go unnoticed";
    return Claimed(std::move(manager), io::Claim());
  }
  RETURN_IF_ERROR(CreateRoot(root));
  Result<io::Claim> claim = io::ClaimFile(io::JoinPath(root, kClaimFileName), holder);
  if (claim.status().code() == Code::kAlreadyExists) {
    return AlreadyExists("the checkpoint root " + Quoted(root) +
                         " belongs to another job, whose steps this one would remove or overwrite: " +
                         claim.status().message() + "; give each job its own root, or stop the other job first");
  }
  RETURN_IF_ERROR(claim.status().WithContext("claiming checkpoint root " + Quoted(root)));
  if (!claim->valid()) {
    *warning =
        "the file system of " + Quoted(root) +
        " cannot lock files or is read-only, so the root is not claimed: a second job started on it would go unnoticed";
  }
  // Claimed before the steps are listed: every step listed now was committed by an earlier holder, never by a job
  // that shares the root with this one.
  return Claimed(std::unique_ptr<CheckpointManager>(new CheckpointManager(std::move(root), policy)),
                 std::move(claim).value());
}

Result<std::unique_ptr<CheckpointManager>> CheckpointManager::Claimed(std::unique_ptr<CheckpointManager> manager,
                                                                      io::Claim claim) {
  manager->claim_ = std::move(claim);
  ASSIGN_OR_RETURN(std::vector<uint64_t> committed, manager->CommittedSteps());
  manager->removable_.insert(committed.begin(), committed.end());
  return manager;
}

Result<std::unique_ptr<CheckpointManager>> CheckpointManager::OpenObjectStore(std::string root,
                                                                              RetentionPolicy policy) {
  ASSIGN_OR_RETURN(ObjectStoreRoot objects, ObjectStoreRoot::Open(std::move(root)));
  std::string canonical = objects.root();
  return std::unique_ptr<CheckpointManager>(new CheckpointManager(std::move(canonical), policy, std::move(objects)));
}

std::string CheckpointManager::StepPath(uint64_t step) const { return io::JoinPath(root_, StepDirectoryName(step)); }

bool CheckpointManager::IsCommitted(uint64_t step) const {
  if (objects_) return objects_->IsCommitted(step);
  const std::string path = StepPath(step);
  return io::IsDirectory(path) && io::PathExists(io::JoinPath(path, kManifestName));
}

Result<std::vector<uint64_t>> CheckpointManager::CommittedSteps() const {
  if (objects_) return objects_->CommittedSteps();
  ASSIGN_OR_RETURN(std::vector<std::string> names, io::ListDirectory(root_));
  std::vector<uint64_t> steps;
  for (const std::string& name : names) {
    const std::optional<uint64_t> step = ParseStepDirectoryName(name);
    if (step && IsCommitted(*step)) steps.push_back(*step);
  }
  // Names sort like steps only up to 12 digits.
  std::sort(steps.begin(), steps.end());
  return steps;
}

Result<std::optional<uint64_t>> CheckpointManager::Latest() const {
  if (objects_) return objects_->Latest();
  if (const std::optional<uint64_t> published = PublishedStep()) return published;
  ASSIGN_OR_RETURN(std::vector<uint64_t> steps, CommittedSteps());
  if (steps.empty()) return std::optional<uint64_t>();
  return std::optional<uint64_t>(steps.back());
}

Status CheckpointManager::PublishLatest(uint64_t step, bool allow_older) {
  const std::string context = "publishing step " + std::to_string(step) + " as latest under " + Quoted(root_);
  if (!IsCommitted(step)) {
    return InvalidArgument(context + ": " + Quoted(StepPath(step)) + " is not a committed checkpoint (no " +
                           kManifestName + ")");
  }
  if (objects_) return objects_->Publish(step, allow_older).WithContext(context);
  const std::optional<uint64_t> current = PublishedStep();
  if (current == step) return Status::Ok();
  if (current > step && !allow_older) {
    return InvalidArgument(context + ": latest already names the newer step " + std::to_string(*current) +
                           " (allow older steps to roll back)");
  }
  return WritePointer(step).WithContext(context);
}

void CheckpointManager::AdoptStep(uint64_t step) {
  std::lock_guard<std::mutex> lock(retention_mutex_);
  removable_.insert(step);
}

void CheckpointManager::ReleaseClaim() {
  std::lock_guard<std::mutex> lock(retention_mutex_);
  claim_.Reset();
  removable_.clear();
}

Result<std::optional<std::string>> CheckpointManager::StepMetrics(uint64_t step) const {
  if (!IsCommitted(step)) {
    return NotFound("step " + std::to_string(step) + " is not a committed step under " + Quoted(root_));
  }
  ASSIGN_OR_RETURN(std::optional<StepRecord> record, ReadStepRecord(StepPath(step)));
  if (!record || record->metrics.empty()) return std::optional<std::string>();
  return std::optional<std::string>(std::move(record->metrics));
}

Result<std::vector<uint64_t>> CheckpointManager::ApplyRetention() {
  std::lock_guard<std::mutex> lock(retention_mutex_);
  ASSIGN_OR_RETURN(std::vector<uint64_t> committed, CommittedSteps());
  ASSIGN_OR_RETURN(std::optional<uint64_t> latest, Latest());
  const std::vector<uint64_t> removable = Removable(committed);
  ASSIGN_OR_RETURN(const auto facts, FactsOf(removable));
  std::vector<uint64_t> doomed = StepsToRemove(removable, latest, facts);
  RETURN_IF_ERROR(SpareReferenced(committed, doomed).WithContext("applying retention under " + Quoted(root_)));
  RETURN_IF_ERROR(RemoveSteps(doomed).WithContext("applying retention under " + Quoted(root_)));
  for (const uint64_t step : doomed) references_.erase(step);
  return doomed;
}

Result<std::optional<uint64_t>> CheckpointManager::PinLatest() {
  std::lock_guard<std::mutex> lock(retention_mutex_);
  ASSIGN_OR_RETURN(const std::optional<uint64_t> latest, Latest());
  if (latest) pinned_.insert(*latest);
  return latest;
}

void CheckpointManager::Unpin(uint64_t step) {
  std::lock_guard<std::mutex> lock(retention_mutex_);
  if (const auto it = pinned_.find(step); it != pinned_.end()) pinned_.erase(it);
}

Status CheckpointManager::SpareReferenced(const std::vector<uint64_t>& committed, std::vector<uint64_t>& doomed) {
  // Object storage takes no incremental saves (runtime/save/save.cc), so its steps refer to nothing.
  if (objects_ || doomed.empty()) return Status::Ok();
  std::set<uint64_t> removing(doomed.begin(), doomed.end());
  for (const uint64_t step : pinned_) removing.erase(step);
  std::vector<uint64_t> kept;
  for (const uint64_t step : committed) {
    if (removing.count(step) == 0) kept.push_back(step);
  }
  while (!kept.empty()) {
    const uint64_t step = kept.back();
    kept.pop_back();
    if (!IsCommitted(step)) continue;
    ASSIGN_OR_RETURN(const std::set<uint64_t> referenced, ReferencedSteps(step));
    for (const uint64_t other : referenced) {
      if (removing.erase(other) != 0) kept.push_back(other);
    }
  }
  doomed.assign(removing.begin(), removing.end());
  return Status::Ok();
}

Result<std::set<uint64_t>> CheckpointManager::ReferencedSteps(uint64_t step) {
  if (auto known = references_.find(step); known != references_.end()) return known->second;
  Result<ManifestWithoutChunks> read = ReadManifestWithoutChunks(StepPath(step));
  if (!read.ok()) {
    return read.status().WithContext("reading which steps step " + std::to_string(step) + " refers to");
  }
  std::set<uint64_t> referenced;
  for (const DataFileRecord& file : read->manifest.files) {
    if (file.checkpoint.empty()) continue;
    if (const std::optional<uint64_t> other = ParseStepDirectoryName(file.checkpoint)) referenced.insert(*other);
  }
  references_.emplace(step, referenced);
  return referenced;
}

Result<std::vector<std::string>> CheckpointManager::CleanupUncommitted() {
  if (objects_) return objects_->CleanupUncommitted();
  ASSIGN_OR_RETURN(std::vector<std::string> names, io::ListDirectory(root_));
  const std::string context = "cleaning up uncommitted entries under " + Quoted(root_);
  std::vector<std::string> removed;
  for (const std::string& name : names) {
    if (!IsDebris(name)) continue;
    RETURN_IF_ERROR(io::RemoveTree(io::JoinPath(root_, name)).WithContext(context));
    removed.push_back(name);
  }
  if (!removed.empty()) RETURN_IF_ERROR(io::SyncDirectory(root_).WithContext(context));
  return removed;
}

std::optional<uint64_t> CheckpointManager::ReadPointer() const {
  // Whatever keeps the pointer from being read counts as no pointer: resuming falls back to scanning the root
  // instead of failing on a damaged or foreign file.
  Result<std::string> contents = io::ReadWholeFile(root_, kLatestPointerName, kMaxPointerBytes);
  if (!contents.ok()) return std::nullopt;
  const std::string_view text = *contents;
  if (text.empty() || text.back() != '\n') return std::nullopt;
  return ParseStepDirectoryName(text.substr(0, text.size() - 1));
}

std::optional<uint64_t> CheckpointManager::PublishedStep() const {
  const std::optional<uint64_t> step = ReadPointer();
  if (step && IsCommitted(*step)) return step;
  return std::nullopt;
}

Status CheckpointManager::WritePointer(uint64_t step) {
  const std::string pointer = io::JoinPath(root_, kLatestPointerName);
  const std::string temporary = pointer + std::string(kTemporaryInfix) + std::to_string(getpid());
  const std::string contents = StepDirectoryName(step) + "\n";
  // A crashed process with the same pid may have left this name behind.
  RETURN_IF_ERROR(io::RemoveTree(temporary));
  RETURN_IF_ERROR(io::WriteFileDurably(temporary, contents.data(), contents.size()));
  // rename(2) replaces `latest` atomically; io's RenameNoReplace deliberately cannot.
  if (rename(temporary.c_str(), pointer.c_str()) != 0) {
    const Status failed = OsError("cannot rename " + Quoted(temporary) + " over " + Quoted(pointer), errno);
    (void)io::RemoveTree(temporary);
    return failed;
  }
  return io::SyncDirectory(root_);
}

std::vector<uint64_t> CheckpointManager::Removable(const std::vector<uint64_t>& committed) const {
  std::vector<uint64_t> removable;
  for (const uint64_t step : committed) {
    if (removable_.count(step) != 0) removable.push_back(step);
  }
  return removable;
}

Result<std::map<uint64_t, CheckpointManager::StepFacts>> CheckpointManager::FactsOf(
    const std::vector<uint64_t>& steps) {
  if (policy_.keep_best == 0 && policy_.keep_for_seconds == 0) return std::map<uint64_t, StepFacts>();
  std::map<uint64_t, StepFacts> facts;
  for (const uint64_t step : steps) {
    if (auto known = facts_.find(step); known != facts_.end()) {
      facts.insert(*known);
      continue;
    }
    ASSIGN_OR_RETURN(const std::optional<StepRecord> record, ReadStepRecord(StepPath(step)));
    StepFacts read;
    if (record) read = StepFacts{record->score, record->committed_unix_ns};
    facts.emplace(step, read);
  }
  // Only the steps still to judge stay cached: the removed ones are gone for good.
  facts_ = facts;
  return facts;
}

std::set<uint64_t> CheckpointManager::KeptByRecords(const std::map<uint64_t, StepFacts>& facts) const {
  std::set<uint64_t> kept;
  constexpr uint64_t kNsPerSecond = 1000000000;
  const int64_t window_ns =
      static_cast<int64_t>(std::min<uint64_t>(policy_.keep_for_seconds, INT64_MAX / kNsPerSecond) * kNsPerSecond);
  const int64_t since_ns = UnixNowNs() - window_ns;
  std::vector<std::pair<double, uint64_t>> scored;  // (score turned so that lower is better, step)
  for (const auto& [step, fact] : facts) {
    if (fact.score) scored.emplace_back(policy_.best_mode == BestMode::kMax ? -*fact.score : *fact.score, step);
    if (policy_.keep_for_seconds != 0 && fact.committed_unix_ns && *fact.committed_unix_ns >= since_ns) {
      kept.insert(step);
    }
  }
  // Best first; of equal scores, the newer step first.
  std::sort(scored.begin(), scored.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first < b.first : a.second > b.second; });
  for (size_t i = 0; i < std::min<size_t>(policy_.keep_best, scored.size()); ++i) kept.insert(scored[i].second);
  return kept;
}

std::vector<uint64_t> CheckpointManager::StepsToRemove(const std::vector<uint64_t>& committed,
                                                       std::optional<uint64_t> latest,
                                                       const std::map<uint64_t, StepFacts>& facts) const {
  if (policy_.KeepsEveryStep() || committed.empty()) return {};
  std::set<uint64_t> kept = KeptByRecords(facts);
  kept.insert(committed.back());
  if (latest) kept.insert(*latest);
  const size_t newest = std::min<size_t>(policy_.keep_last, committed.size());
  kept.insert(committed.end() - static_cast<std::ptrdiff_t>(newest), committed.end());
  for (const uint64_t step : committed) {
    if (policy_.keep_every != 0 && step % policy_.keep_every == 0) kept.insert(step);
  }
  std::vector<uint64_t> doomed;
  for (const uint64_t step : committed) {
    if (kept.count(step) == 0) doomed.push_back(step);
  }
  return doomed;
}

Status CheckpointManager::RemoveSteps(const std::vector<uint64_t>& steps) {
  if (objects_) return objects_->RemoveSteps(steps);
  if (steps.empty()) return Status::Ok();
  // If a rename fails, the steps renamed before it are already debris that CleanupUncommitted removes.
  for (const uint64_t step : steps) {
    const std::string deleting = DeletingPath(step);
    // Left by a crashed removal of an earlier checkpoint of the same step.
    RETURN_IF_ERROR(io::RemoveTree(deleting));
    RETURN_IF_ERROR(io::RenameNoReplace(StepPath(step), deleting));
  }
  // The renames must be durable before any file goes: a crash while removing must not bring back a step directory
  // that has its MANIFEST but lacks data files.
  RETURN_IF_ERROR(io::SyncDirectory(root_));
  for (const uint64_t step : steps) RETURN_IF_ERROR(io::RemoveTree(DeletingPath(step)));
  return Status::Ok();
}

std::string CheckpointManager::DeletingPath(uint64_t step) const {
  return StepPath(step) + std::string(kTemporaryInfix) + kDeletingSuffix;
}

bool CheckpointManager::IsDebris(const std::string& name) const {
  if (const std::optional<uint64_t> step = ParseStepDirectoryName(name)) {
    return io::IsDirectory(StepPath(*step)) && !IsCommitted(*step);
  }
  const size_t infix = name.find(kTemporaryInfix);
  if (infix == std::string::npos) return false;
  const std::string_view stem = std::string_view(name).substr(0, infix);
  if (stem != kLatestPointerName && !ParseStepDirectoryName(stem).has_value()) return false;
  // A save in flight holds a claim on its temporary directory; only a dead one's is debris. That includes a step
  // renamed to ".tmp-deleting", which no one claims: only the holder of the root removes steps, and the holder
  // cleaning up is this manager, so such a step was left by an earlier holder that died or failed mid-removal. Its
  // rename was durable before any of its files went, so it was already out of the committed steps and is removed
  // whole here, never resumed from.
  return !io::IsClaimed(io::JoinPath(root_, name));
}

}  // namespace ckpt::runtime

#include "runtime/manager/object_store_root.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <random>
#include <thread>

#include "io/file_io.h"
#include "io/object_storage.h"
#include "io/s3/s3_client.h"
#include "runtime/format/manifest.h"
#include "runtime/format/save_directory.h"
#include "runtime/manager/manager.h"

namespace ckpt::runtime {
namespace {

// The pointer is one short line; a larger object is not one, and must not be read whole.
constexpr uint64_t kMaxPointerBytes = 64;
// What a publish reads of the pointer it replaces: a damaged one up to this size is overwritten, as on POSIX.
constexpr uint64_t kMaxReplacedPointerBytes = 4096;
// 18 bytes a step: room for millions of steps, and a bound on what a damaged index makes us read.
constexpr uint64_t kMaxIndexBytes = 64ull << 20;
// Compare-and-swap attempts before giving up: the contenders are the job's rank 0 and its node agents, a handful.
constexpr int kSwapAttempts = 10;

// Whether a conditional write failed because another writer got there first (rather than failing outright).
bool LostRace(const Status& status) {
  return status.code() == Code::kMismatch || status.code() == Code::kAlreadyExists;
}

// Spreads the retries of writers that lost a race, so that they do not collide again in lockstep.
void BackOff(int attempt) {
  thread_local std::minstd_rand random(std::random_device{}());
  const int ceiling_ms = 10 << std::min(attempt, 5);
  std::this_thread::sleep_for(std::chrono::milliseconds(random() % ceiling_ms + 1));
}

// The step a pointer's text names, if it is exactly one step name and a newline.
std::optional<uint64_t> ParsePointer(std::string_view text) {
  if (text.empty() || text.back() != '\n') return std::nullopt;
  return ParseStepDirectoryName(text.substr(0, text.size() - 1));
}

// The steps an index names; a line that names no step (a damaged or foreign line) is skipped.
std::set<uint64_t> ParseIndex(std::string_view text) {
  std::set<uint64_t> steps;
  while (!text.empty()) {
    const size_t end = std::min(text.find('\n'), text.size());
    if (const std::optional<uint64_t> step = ParseStepDirectoryName(text.substr(0, end))) steps.insert(*step);
    text.remove_prefix(std::min(end + 1, text.size()));
  }
  return steps;
}

std::string FormatIndex(const std::set<uint64_t>& steps) {
  std::string text;
  for (const uint64_t step : steps) text += StepDirectoryName(step) + "\n";
  return text;
}

}  // namespace

Result<ObjectStoreRoot> ObjectStoreRoot::Open(std::string root) {
  while (root.size() > s3::kUrlScheme.size() && root.back() == '/') root.pop_back();
  ASSIGN_OR_RETURN(const s3::Location location, s3::ParseUrl(root));
  if (location.prefix.empty()) {
    return InvalidArgument("the checkpoint root " + Quoted(root) +
                           " is a whole bucket; name a prefix under it, such as " + Quoted(root + "/run"));
  }
  return ObjectStoreRoot(std::move(root));
}

std::string ObjectStoreRoot::StepPath(uint64_t step) const { return io::JoinPath(root_, StepDirectoryName(step)); }
std::string ObjectStoreRoot::PointerUrl() const { return io::JoinPath(root_, kLatestPointerName); }
std::string ObjectStoreRoot::IndexUrl() const { return io::JoinPath(root_, kStepIndexName); }

bool ObjectStoreRoot::IsCommitted(uint64_t step) const {
  const Result<bool> committed = HasManifest(step);
  return committed.ok() && committed.value();
}

Result<bool> ObjectStoreRoot::HasManifest(uint64_t step) const {
  const Result<uint64_t> manifest = io::ObjectSize(io::JoinPath(StepPath(step), kManifestName));
  if (manifest.ok()) return true;
  if (manifest.status().code() == Code::kNotFound) return false;
  return manifest.status().WithContext("looking for the MANIFEST of step " + std::to_string(step));
}

Result<std::vector<uint64_t>> ObjectStoreRoot::CommittedSteps() const {
  Result<std::string> index = io::ReadObject(IndexUrl(), kMaxIndexBytes);
  std::set<uint64_t> steps;
  if (index.ok()) {
    steps = ParseIndex(*index);
  } else if (index.status().code() == Code::kNotFound) {
    ASSIGN_OR_RETURN(steps, ListCommitted());
  } else {
    return index.status().WithContext("reading the step index of " + Quoted(root_));
  }
  return std::vector<uint64_t>(steps.begin(), steps.end());
}

Result<std::optional<uint64_t>> ObjectStoreRoot::Latest() const {
  // A store that cannot be asked is an error, never "no step": a resume would start the training over.
  if (const std::optional<uint64_t> published = ReadPointer()) {
    ASSIGN_OR_RETURN(const bool committed, HasManifest(*published));
    if (committed) return published;
  }
  ASSIGN_OR_RETURN(const std::vector<uint64_t> steps, CommittedSteps());
  // The index may still name a step deleted behind the manager's back; one HEAD each, newest first.
  for (auto step = steps.rbegin(); step != steps.rend(); ++step) {
    ASSIGN_OR_RETURN(const bool committed, HasManifest(*step));
    if (committed) return std::optional<uint64_t>(*step);
  }
  return std::optional<uint64_t>();
}

Status ObjectStoreRoot::Publish(uint64_t step, bool allow_older) const {
  // Indexed first, so that the pointer never names a step the index lacks: Latest's fallback when the pointer is lost
  // finds it, and retention, which counts only indexed steps, may later remove it.
  RETURN_IF_ERROR(EditIndex([step](std::set<uint64_t>& steps) { return steps.insert(step).second; }));
  return ReplacePointer(step, allow_older);
}

Status ObjectStoreRoot::RemoveSteps(const std::vector<uint64_t>& steps) const {
  if (steps.empty()) return Status::Ok();
  RETURN_IF_ERROR(EditIndex([&steps](std::set<uint64_t>& indexed) {
    size_t erased = 0;
    for (const uint64_t step : steps) erased += indexed.erase(step);
    return erased != 0;
  }));
  for (const uint64_t step : steps) RETURN_IF_ERROR(io::RemoveObject(io::JoinPath(StepPath(step), kManifestName)));
  for (const uint64_t step : steps) RETURN_IF_ERROR(io::RemoveObjectsUnder(StepPath(step)));
  return Status::Ok();
}

Result<std::vector<std::string>> ObjectStoreRoot::CleanupUncommitted() const {
  const std::string context = "cleaning up uncommitted steps under " + Quoted(root_);
  Result<std::vector<io::StoredObject>> listed = io::ListObjects(root_);
  if (!listed.ok()) return listed.status().WithContext(context);
  const std::vector<io::StoredObject>& objects = *listed;
  struct StepObjects {
    bool committed = false;
    int64_t newest_unix = INT64_MIN;
  };
  std::map<std::string, StepObjects> steps;
  for (const io::StoredObject& object : objects) {
    const size_t slash = object.name.find('/');
    if (slash == std::string::npos) continue;
    const std::string step = object.name.substr(0, slash);
    if (!ParseStepDirectoryName(step)) continue;
    StepObjects& seen = steps[step];
    seen.committed |= object.name.compare(slash + 1, std::string::npos, kManifestName) == 0;
    seen.newest_unix = std::max(seen.newest_unix, object.modified_unix);
  }
  const int64_t stale_before = static_cast<int64_t>(std::time(nullptr)) - StaleObjectAge().count();
  std::vector<std::string> removed;
  for (const auto& [step, seen] : steps) {
    // A step with one fresh object may be a save still writing; its older objects wait for it too.
    if (seen.committed || seen.newest_unix >= stale_before) continue;
    RETURN_IF_ERROR(io::RemoveObjectsUnder(io::JoinPath(root_, step), stale_before).WithContext(context));
    removed.push_back(step);
  }
  return removed;
}

std::optional<uint64_t> ObjectStoreRoot::ReadPointer() const {
  // As on POSIX, a pointer that cannot be read counts as none: Latest falls back to the index.
  Result<std::string> text = io::ReadObject(PointerUrl(), kMaxPointerBytes);
  return text.ok() ? ParsePointer(*text) : std::nullopt;
}

Result<std::set<uint64_t>> ObjectStoreRoot::ListCommitted() const {
  Result<std::vector<io::StoredObject>> listed = io::ListObjects(root_);
  if (!listed.ok()) return listed.status().WithContext("listing the steps under " + Quoted(root_));
  std::set<uint64_t> steps;
  for (const io::StoredObject& object : *listed) {
    const size_t slash = object.name.find('/');
    if (slash == std::string::npos || object.name.compare(slash + 1, std::string::npos, kManifestName) != 0) continue;
    if (const std::optional<uint64_t> step = ParseStepDirectoryName(object.name.substr(0, slash))) steps.insert(*step);
  }
  return steps;
}

template <typename Edit>
Status ObjectStoreRoot::EditIndex(const Edit& edit) const {
  const std::string context = "updating the step index of " + Quoted(root_);
  for (int attempt = 0; attempt < kSwapAttempts; ++attempt) {
    std::string etag;
    Result<std::string> text = io::ReadObject(IndexUrl(), kMaxIndexBytes, &etag);
    std::set<uint64_t> steps;
    if (text.ok()) {
      steps = ParseIndex(*text);
    } else if (text.status().code() == Code::kNotFound) {
      // The first index of a root starts from what is committed there, so that no earlier step goes unlisted; it
      // is written even when the edit finds nothing to change, so that the next reader need not list.
      ASSIGN_OR_RETURN(steps, ListCommitted());
      etag.clear();
    } else {
      return text.status().WithContext(context);
    }
    const bool changed = edit(steps);
    if (!changed && text.ok()) return Status::Ok();
    const Result<std::string> written = io::ReplaceObject(IndexUrl(), FormatIndex(steps), etag);
    if (written.ok()) return Status::Ok();
    if (!LostRace(written.status())) return written.status().WithContext(context);
    BackOff(attempt);
  }
  return Mismatch(context + ": it kept changing under " + std::to_string(kSwapAttempts) +
                  " attempts; is another job publishing into this root?");
}

Status ObjectStoreRoot::ReplacePointer(uint64_t step, bool allow_older) const {
  const std::string contents = StepDirectoryName(step) + "\n";
  for (int attempt = 0; attempt < kSwapAttempts; ++attempt) {
    std::string etag;
    Result<std::string> text = io::ReadObject(PointerUrl(), kMaxReplacedPointerBytes, &etag);
    std::optional<uint64_t> current;
    if (text.ok()) {
      current = ParsePointer(*text);
    } else if (text.status().code() == Code::kNotFound) {
      etag.clear();
    } else {
      return text.status().WithContext("reading " + Quoted(PointerUrl()));
    }
    // As on POSIX, only a committed step the pointer names holds it back.
    bool current_committed = false;
    if (current) {
      ASSIGN_OR_RETURN(current_committed, HasManifest(*current));
    }
    if (current_committed) {
      if (*current == step) return Status::Ok();
      if (*current > step && !allow_older) {
        return InvalidArgument("latest already names the newer step " + std::to_string(*current) +
                               " (allow older steps to roll back)");
      }
    }
    const Result<std::string> written = io::ReplaceObject(PointerUrl(), contents, etag);
    if (written.ok()) return Status::Ok();
    if (!LostRace(written.status())) return written.status();
    BackOff(attempt);
  }
  return Mismatch(Quoted(PointerUrl()) + " kept changing under " + std::to_string(kSwapAttempts) +
                  " attempts; is another job publishing into this root?");
}

}  // namespace ckpt::runtime

// A root directory of checkpoints, one per training step (DESIGN.md §4, Manager): step names, the `latest`
// pointer, retention, and cleanup of what crashed saves leave behind.
//
// Layout under the root:
//   step-000000001234/            a committed checkpoint: a directory holding a MANIFEST
//   step-000000001234.tmp-<id>/   a save in flight, or debris of a crashed save or removal
//   latest                        one line naming the published step: "step-000000001234\n"
//   latest.tmp-<pid>              the pointer being replaced, or debris of a crashed publish
// Step numbers are zero-padded to 12 digits so that names sort like steps; larger steps simply use more digits.
//
// The manager keeps no state beyond its root and policy: every call reads the directory afresh, so several
// processes may read a root at once. Publishing, retention and cleanup are not synchronised among themselves: only
// one process (the coordinator) should call them for a root.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ckpt::runtime {

inline constexpr char kLatestPointerName[] = "latest";

struct RetentionPolicy {
  uint32_t keep_last = 0;   // keep the newest `keep_last` committed steps; 0 keeps every step
  uint64_t keep_every = 0;  // when keep_last is set, also keep the steps divisible by this; 0 keeps no more
};

// "step-000000001234" for step 1234.
std::string StepDirectoryName(uint64_t step);
// The step that `name` denotes if it is exactly what StepDirectoryName writes; nullopt for anything else, so
// "step-1", "step-0000000000012" or "step-000000000012x" never alias a step.
std::optional<uint64_t> ParseStepDirectoryName(std::string_view name);

class CheckpointManager {
 public:
  // Creates the root (and its parents) if missing.
  static Result<std::unique_ptr<CheckpointManager>> Open(std::string root, RetentionPolicy policy);

  const std::string& root() const { return root_; }
  const RetentionPolicy& policy() const { return policy_; }

  // <root>/step-000000001234: where a save of `step` should be written.
  std::string StepPath(uint64_t step) const;
  // Whether StepPath(step) is a directory holding a MANIFEST. The MANIFEST is renamed into place with its
  // directory, so its presence marks a commit; whether it is intact is for the reader to check.
  bool IsCommitted(uint64_t step) const;
  // The committed steps, ascending; debris and entries the manager did not name are ignored.
  Result<std::vector<uint64_t>> CommittedSteps() const;
  // The step to resume from: the one `latest` names if it is committed; otherwise (pointer missing, unreadable,
  // malformed, or naming a removed or uncommitted step) the newest committed step; nullopt if none is committed.
  Result<std::optional<uint64_t>> Latest() const;

  // Points `latest` at `step`, which must be committed (kInvalidArgument otherwise). Refuses with kInvalidArgument
  // to move the pointer to an older step than the committed one it names, unless `allow_older` (a rollback).
  // Atomic and durable: the pointer is written to a temporary file, synced, renamed over `latest`, and the root is
  // synced, so a crash leaves either the old or the new pointer, never a partial one.
  Status PublishLatest(uint64_t step, bool allow_older = false);

  // Removes the committed steps the policy does not keep, and returns them (ascending). Never removes the newest
  // committed step nor the step Latest() returns. Each step is first renamed to a ".tmp-deleting" name and the
  // rename made durable, so a crash mid-removal leaves debris for CleanupUncommitted, never a half-deleted
  // directory that still looks committed.
  Result<std::vector<uint64_t>> ApplyRetention();

  // Removes uncommitted debris: step-<N>.tmp-* entries that no live save claims (runtime/save_directory.h), step-<N>
  // directories without a MANIFEST, and leftover pointer temporaries. Returns the names removed (relative to the
  // root, sorted). Saves in flight, from this job or another, are left alone; a publish or a removal in flight is
  // not recognised, so only the root's coordinator should call it.
  Result<std::vector<std::string>> CleanupUncommitted();

 private:
  CheckpointManager(std::string root, RetentionPolicy policy) : root_(std::move(root)), policy_(policy) {}

  // The step `latest` names if the file is well formed, committed or not.
  std::optional<uint64_t> ReadPointer() const;
  // The step `latest` names if it is committed.
  std::optional<uint64_t> PublishedStep() const;
  Status WritePointer(uint64_t step);
  std::vector<uint64_t> StepsToRemove(const std::vector<uint64_t>& committed, std::optional<uint64_t> latest) const;
  Status RemoveSteps(const std::vector<uint64_t>& steps);
  // <step path>.tmp-deleting: where a step goes while it is being removed.
  std::string DeletingPath(uint64_t step) const;
  // Whether root entry `name` is something a save, removal or publish left unfinished.
  bool IsDebris(const std::string& name) const;

  std::string root_;
  RetentionPolicy policy_;
};

}  // namespace ckpt::runtime

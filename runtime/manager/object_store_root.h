// A checkpoint root on object storage ("s3://bucket/prefix"): what CheckpointManager does there, where there are no
// directories, no renames and no locks.
//
// Layout under the root R:
//   R/step-000000001234/MANIFEST        a committed checkpoint: the save creates its MANIFEST last, only if absent
//   R/step-000000001234/data/<id>/...   its data objects; without a MANIFEST, a save in flight or a dead one's debris
//   R/step-000000001234/STEP.json       the manager's record of the step (step_record.h), created before the MANIFEST
//   R/latest                            the published step, one line as on POSIX: "step-000000001234\n"
//   R/steps                             the index: the committed steps published under R, one name a line, ascending
// The pointer and the index are replaced by compare-and-swap (a PUT conditional on the ETag read; on a conflict,
// read again and retry), so publishers racing one another never lose a step from the index nor move the pointer
// back. Finding the latest step is a GET of R/latest and a HEAD of the MANIFEST it names; the committed steps are
// a GET of R/steps. Only when the index is missing (a root from before it, or one whose index was deleted) is R
// listed, and the next change to the index writes it from that listing.
//
// The index lists what was published: a step committed but never published (its job died between the two) is not
// in it, so neither Latest nor retention sees it, where on POSIX a scan of the root would.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace ckpt::runtime {

inline constexpr char kStepIndexName[] = "steps";

class ObjectStoreRoot {
 public:
  // kInvalidArgument for a URL that names no bucket, or a bucket without a prefix under it (the root's own objects
  // must not be listed with the whole bucket).
  static Result<ObjectStoreRoot> Open(std::string root);

  const std::string& root() const { return root_; }
  std::string StepPath(uint64_t step) const;

  // One HEAD of the step's MANIFEST; false also when the store cannot be asked.
  bool IsCommitted(uint64_t step) const;
  // The index: one GET (a LIST of R when the index is missing). Not verified step by step: a step deleted behind
  // the manager's back stays listed until retention removes it.
  Result<std::vector<uint64_t>> CommittedSteps() const;
  // The pointer's step if committed (a GET and a HEAD); otherwise the newest step of the index that is committed. An
  // error, never nullopt, when the store fails to answer.
  Result<std::optional<uint64_t>> Latest() const;

  // Adds the committed `step` to the index, then points R/latest at it; refuses with kInvalidArgument to move the
  // pointer to an older step than the committed one it names, unless `allow_older` (the step stays indexed).
  Status Publish(uint64_t step, bool allow_older) const;
  // Removes each step in three moves, each one leaving a consistent root if the next never happens: out of the
  // index (no longer listed), its MANIFEST (no longer committed), then its data (debris for cleanup until then).
  Status RemoveSteps(const std::vector<uint64_t>& steps) const;
  // Lists R and removes the steps without a MANIFEST whose every object is older than the stale age, aborting their
  // multipart uploads that old. Returns the step names removed, sorted. A committed step is never touched.
  Result<std::vector<std::string>> CleanupUncommitted() const;

 private:
  explicit ObjectStoreRoot(std::string root) : root_(std::move(root)) {}

  // Whether the step's MANIFEST exists (one HEAD); an error when the store cannot say.
  Result<bool> HasManifest(uint64_t step) const;
  std::string PointerUrl() const;
  std::string IndexUrl() const;
  // The step R/latest names if it is well formed, committed or not.
  std::optional<uint64_t> ReadPointer() const;
  // The committed steps, from a LIST of R: where there is no index yet.
  Result<std::set<uint64_t>> ListCommitted() const;
  // Reads the index (or lists R to make the first one), lets `edit` change it (false: nothing to change), and writes
  // it back if no one replaced it meanwhile, retrying on a conflict.
  template <typename Edit>
  Status EditIndex(const Edit& edit) const;
  Status ReplacePointer(uint64_t step, bool allow_older) const;

  std::string root_;
};

}  // namespace ckpt::runtime

// A root directory of checkpoints, one per training step: step names, the `latest` pointer, retention, and cleanup of
// what crashed saves leave behind.
//
// Layout under the root:
//   step-000000001234/            a committed checkpoint: a directory holding a MANIFEST, and the record of the
//                                 manager's save (STEP.json: metrics, score, commit time; step_record.h)
//   step-000000001234.tmp-<id>/   a save in flight, or debris of a crashed save or removal
//   latest                        one line naming the published step: "step-000000001234\n"
//   latest.tmp-<pid>              the pointer being replaced, or debris of a crashed publish
//   manager.lock                  the claim of the job that saves into the root, naming it (Claim)
// Step numbers are zero-padded to 12 digits so that names sort like steps; larger steps simply use more digits.
//
// A root belongs to one job at a time: the job's coordinator claims it (Claim) for as long as its manager lives,
// and only the holder publishes, applies retention and cleans up, so two jobs started on one root by mistake never
// remove each other's steps. Reading needs no claim: every query reads the directory afresh, so any process may
// list a root or find its latest step while a job writes it (`ckpt ls` does; so does the memory tier's agent,
// which publishes the steps it persists for the job that holds the root). Retention removes only the steps this
// manager may prove are its job's: those committed when it claimed the root, and those its job adopted since; it
// judges them by RetentionPolicy's rules, reading each step's record once for keep_best and keep_for.
//
// A root on object storage ("s3://bucket/prefix") has the same steps, pointer and policies without directories,
// renames or locks: runtime/manager/object_store_root.h says how. There the claim cannot be taken (Claim warns), and
// a `steps` index beside `latest` lets Latest and CommittedSteps read one object instead of listing the root.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "io/claim.h"
#include "runtime/manager/object_store_root.h"
#include "runtime/manager/step_record.h"

namespace ckpt::runtime {

inline constexpr char kLatestPointerName[] = "latest";
inline constexpr char kClaimFileName[] = "manager.lock";

enum class BestMode { kMax, kMin };

// Which steps retention keeps: a step is kept if any rule keeps it (as Orbax's preservation policies combine). With
// none of keep_last, keep_best and keep_for_seconds set, every step is kept. The newest step, and the one `latest`
// names, are always kept: a resume needs them whatever the rules say.
struct RetentionPolicy {
  uint32_t keep_last = 0;   // the newest `keep_last` steps; 0: no such rule
  uint64_t keep_every = 0;  // the steps divisible by this; 0: no such rule
  // The `keep_best` steps of best score (the highest with kMax, the lowest with kMin) among those saved with one
  // (step_record.h); a step without a score is judged by the other rules alone. 0: no such rule.
  uint32_t keep_best = 0;
  BestMode best_mode = BestMode::kMax;
  // The steps committed within the last `keep_for_seconds`, by the commit time in their record; a step without a
  // record is judged by the other rules alone. 0: no such rule.
  uint64_t keep_for_seconds = 0;

  bool KeepsEveryStep() const { return keep_last == 0 && keep_best == 0 && keep_for_seconds == 0; }
};

// "step-000000001234" for step 1234.
std::string StepDirectoryName(uint64_t step);
// The step that `name` denotes if it is exactly what StepDirectoryName writes; nullopt for anything else, so
// "step-1", "step-0000000000012" or "step-000000000012x" never alias a step.
std::optional<uint64_t> ParseStepDirectoryName(std::string_view name);

class CheckpointManager {
 public:
  // Creates the root (and its parents) if missing; on object storage there is nothing to create, and a root that is
  // a whole bucket is refused (kInvalidArgument). Claims nothing, and counts no step as its own (retention removes
  // none until steps are adopted): for reading the root, and for the memory tier's agent, which publishes steps on
  // behalf of the job that holds it.
  static Result<std::unique_ptr<CheckpointManager>> Open(std::string root, RetentionPolicy policy);
  // Opens the root as Open does and claims it for this manager's lifetime, writing `holder` (who claims: host,
  // pid, job) into <root>/manager.lock; the kernel releases the claim if the process dies. kAlreadyExists naming
  // the holder if another manager holds it. On a file system that cannot lock, and on object storage, the root is
  // opened unclaimed and `warning` says so.
  static Result<std::unique_ptr<CheckpointManager>> Claim(std::string root, RetentionPolicy policy,
                                                          std::string_view holder, std::string* warning);

  const std::string& root() const { return root_; }
  const RetentionPolicy& policy() const { return policy_; }

  // <root>/step-000000001234: where a save of `step` should be written.
  std::string StepPath(uint64_t step) const;
  // Whether StepPath(step) is a directory holding a MANIFEST. The MANIFEST is renamed into place with its
  // directory, so its presence marks a commit; whether it is intact is for the reader to check. On object storage,
  // one HEAD of the MANIFEST, which a save creates last.
  bool IsCommitted(uint64_t step) const;
  // The committed steps, ascending; debris and entries the manager did not name are ignored. On object storage, the
  // `steps` index: one GET.
  Result<std::vector<uint64_t>> CommittedSteps() const;
  // The step to resume from: the one `latest` names if it is committed; otherwise (pointer missing, unreadable,
  // malformed, or naming a removed or uncommitted step) the newest committed step; nullopt if none is committed.
  // On object storage, a GET of `latest` and a HEAD of the MANIFEST it names; never a LIST while the index exists.
  Result<std::optional<uint64_t>> Latest() const;
  // The metrics stored with the committed `step` (a JSON object's text); nullopt if it was saved without any.
  // kNotFound if the step is not committed; kCorrupt naming the file if its record is damaged.
  Result<std::optional<std::string>> StepMetrics(uint64_t step) const;

  // Points `latest` at `step`, which must be committed (kInvalidArgument otherwise). Refuses with kInvalidArgument
  // to move the pointer to an older step than the committed one it names, unless `allow_older` (a rollback).
  // Atomic and durable: the pointer is written to a temporary file, synced, renamed over `latest`, and the root is
  // synced, so a crash leaves either the old or the new pointer, never a partial one. On object storage the step is
  // added to the `steps` index first, and both objects are replaced by compare-and-swap.
  Status PublishLatest(uint64_t step, bool allow_older = false);

  // Marks `step` as one this manager's job committed, which retention may then remove.
  void AdoptStep(uint64_t step);
  // The step an incremental save compares itself with (CKPT_SAVE_INCREMENTAL): the latest committed step, pinned
  // until as many Unpin calls, so that retention keeps it, and the steps it refers to, while the save may still
  // refer to them. nullopt (and nothing pinned) when no step is committed.
  Result<std::optional<uint64_t>> PinLatest();
  void Unpin(uint64_t step);
  // Lets go of the root's claim (another job may claim it from now on) and of every step retention could remove:
  // the manager only reads the root from then on.
  void ReleaseClaim();

  // Removes the committed steps the policy does not keep, and returns them (ascending). The policy counts only the
  // steps this manager may remove (committed when it claimed the root, or adopted since); any other step, such as
  // one a foreign job wrote there, is neither counted nor removed. Never removes the newest such step nor the
  // step Latest() returns. Calls are serialised, so that two saves committing at once never remove one step
  // twice. Each step is first renamed to a ".tmp-deleting" name and the rename made durable, so a crash
  // mid-removal leaves debris for CleanupUncommitted, never a half-deleted directory that still looks committed.
  // A step that a kept or pinned step refers to (an incremental save's references, runtime/save/incremental_units.h)
  // is kept too, and so on through what it refers to, so that every step left is loadable; a MANIFEST that cannot
  // be read then fails the pass, naming it, before anything is removed.
  // On object storage the step leaves the index, then loses its MANIFEST, then its data, to the same end. A step
  // record that cannot be read (keep_best, keep_for) fails the pass, naming it, before anything is removed.
  Result<std::vector<uint64_t>> ApplyRetention();

  // Removes uncommitted debris: step-<N>.tmp-* entries that no live save claims (runtime/format/save_directory.h),
  // step-<N> directories without a MANIFEST, leftover pointer temporaries, and steps a crashed removal left
  // half-deleted (".tmp-deleting"). Returns the names removed (relative to the root, sorted). Saves in flight, from
  // this job or another, are left alone; a publish or a removal in flight is not recognised, so only the holder of
  // the root's claim may call it. On object storage it lists the root and removes the steps without a MANIFEST whose
  // objects are all older than the age after which a save is taken for dead (an hour; object_store_root.h).
  Result<std::vector<std::string>> CleanupUncommitted();

 private:
  CheckpointManager(std::string root, RetentionPolicy policy, std::optional<ObjectStoreRoot> objects = std::nullopt)
      : root_(std::move(root)), policy_(policy), objects_(std::move(objects)) {}
  // The manager of the existing `root` that holds `claim` (or, on object storage, no claim): the steps committed
  // there now are ones retention may remove.
  static Result<std::unique_ptr<CheckpointManager>> Claimed(std::unique_ptr<CheckpointManager> manager,
                                                            io::Claim claim);
  // Open and Claim of a root on object storage.
  static Result<std::unique_ptr<CheckpointManager>> OpenObjectStore(std::string root, RetentionPolicy policy);

  // The step `latest` names if the file is well formed, committed or not.
  std::optional<uint64_t> ReadPointer() const;
  // The step `latest` names if it is committed.
  std::optional<uint64_t> PublishedStep() const;
  Status WritePointer(uint64_t step);
  // Of `committed`, the steps this manager may remove (see ApplyRetention).
  std::vector<uint64_t> Removable(const std::vector<uint64_t>& committed) const;
  // What keep_best and keep_for judge a step by, read from its record once (a record never changes).
  struct StepFacts {
    std::optional<double> score;
    std::optional<int64_t> committed_unix_ns;
  };
  // The facts of each of `steps` (from facts_, reading the records not read yet), when the policy needs them; the
  // error of the first record that cannot be read, naming it.
  Result<std::map<uint64_t, StepFacts>> FactsOf(const std::vector<uint64_t>& steps);
  // Of the steps in `facts`, those keep_best and keep_for keep.
  std::set<uint64_t> KeptByRecords(const std::map<uint64_t, StepFacts>& facts) const;
  std::vector<uint64_t> StepsToRemove(const std::vector<uint64_t>& committed, std::optional<uint64_t> latest,
                                      const std::map<uint64_t, StepFacts>& facts) const;
  // Takes out of `doomed` every step that the others of `committed`, or a pinned step, refer to, however indirectly.
  Status SpareReferenced(const std::vector<uint64_t>& committed, std::vector<uint64_t>& doomed);
  // The steps of this root whose data files the MANIFEST of `step` refers to (read once: a MANIFEST never changes).
  Result<std::set<uint64_t>> ReferencedSteps(uint64_t step);
  Status RemoveSteps(const std::vector<uint64_t>& steps);
  // <step path>.tmp-deleting: where a step goes while it is being removed.
  std::string DeletingPath(uint64_t step) const;
  // Whether root entry `name` is something a save, removal or publish left unfinished.
  bool IsDebris(const std::string& name) const;

  std::string root_;
  RetentionPolicy policy_;
  // Set when the root is on object storage, which then does what touches storage.
  std::optional<ObjectStoreRoot> objects_;
  io::Claim claim_;  // <root>/manager.lock, locked; invalid when opened unclaimed
  // Serialises retention, and guards `removable_`, which saves committing on their own threads extend.
  std::mutex retention_mutex_;
  std::set<uint64_t> removable_;
  std::map<uint64_t, StepFacts> facts_;  // guarded by retention_mutex_
  std::multiset<uint64_t> pinned_;                   // guarded by retention_mutex_ (PinLatest)
  std::map<uint64_t, std::set<uint64_t>> references_;  // guarded by retention_mutex_ (ReferencedSteps)
};

}  // namespace ckpt::runtime

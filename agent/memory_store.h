// The agent's inventory of its memory directory: the complete memory checkpoints it keeps, the bytes that saves in
// flight have reserved, the budget both must fit, and which checkpoints wait to be written to storage. It touches the
// file system but no socket, so it is tested on its own.
//
// Layout of the memory directory M (created with mode 0700, or adopted from an agent of the same job that died):
//   M/<name>/                 a complete memory checkpoint (MANIFEST and data/*.bin, the on-disk format)
//   M/.<name>.meta            its sidecar: the encoded MemoryCheckpoint, so that a restarted agent can adopt it
//   M/<name>.tmp-<save id>/   a save in flight, claimed by its rank 0 (runtime/format/save_directory.h)
//   M/.recycled/<n>           data files of the checkpoint retention removed last, for saves and replicas to write over
//
// Retention: the newest complete checkpoint is kept, and an older one only while it waits to be persisted; removing a
// checkpoint removes the replicas of other nodes' files it holds (they live in its data/). Its data files are kept
// as recycled files rather than deleted: filling fresh tmpfs pages costs several times writing over allocated ones
// (0.7 s against 0.25 s a GiB measured here), and the next step's data files (the ranks' own, placed when their
// save reserves its bytes, and the replicas), about as large, are written into them.
// Recycled files count against the budget and are deleted first when a reservation needs their room, or when the
// next removal brings newer ones. Every method is thread-safe: the socket loop, the persister's thread and the
// replicator's thread share the store.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/agent/agent_protocol.h"
#include "common/status.h"

namespace ckpt::agent {

using coll::agent::MemoryCheckpoint;
// One line of the agent's log, without the prefix or the newline.
using LogFn = std::function<void(const std::string&)>;
// A connection, as the owner of its reservations.
using SessionId = uint64_t;

// A data file a save is about to write: its name inside the save's data/ directory, and its size.
struct PlannedFile {
  std::string name;
  uint64_t size = 0;
};

// kInvalidArgument unless `name` can be a directory entry of the memory directory: not empty, no '/', not "." or
// "..", and not hidden (a leading '.' is the sidecars' namespace).
Status ValidateEntryName(const std::string& name);

class MemoryStore {
 public:
  // Creates the memory directory `dir` (its parent must exist) or adopts it: it must then be a real directory
  // (not a link) owned by this user. Adoption keeps every checkpoint with a MANIFEST and a readable sidecar and
  // the temporaries that a live save claims, and removes everything else. `node` names the node in messages.
  static Result<std::unique_ptr<MemoryStore>> Open(std::string dir, std::string node, uint64_t budget_bytes, LogFn log);

  const std::string& directory() const { return dir_; }
  uint64_t budget_bytes() const { return budget_bytes_; }

  // Reserves `bytes` more for the temporary directory `name` written by `session`. kNoSpace when the kept
  // checkpoints and every reservation leave less than that: the message says what holds the budget and what to do.
  // Each of `files` that is not empty nor there yet gets a recycled file, as TakeRecycled chooses, for the save's
  // workers to write over (M/<name>/data/ must exist): filling allocated pages costs a fraction of fresh ones.
  Status Reserve(SessionId session, const std::string& name, uint64_t bytes,
                 const std::vector<PlannedFile>& files = {});
  // Forgets `session`'s reservation of `name` (none is fine) and removes M/<name> when no other session reserves
  // it and no live save claims it.
  void Release(SessionId session, const std::string& name);
  // Release for every reservation of `session`: its connection closed.
  void ReleaseSession(SessionId session);

  // A save committed M/<checkpoint.name>: drops `session`'s reservation `reservation`, measures the directory,
  // writes its sidecar and keeps it as the newest, removing the older ones that do not wait to be persisted.
  // Its own files are `checkpoint.own_files`, or when empty what data/ holds now. It counts as replicated when the
  // save had one node only. Returns the checkpoint for the persister when `persist` asks for it and nobody did
  // before. The same name completed again (every rank of the node sends it) changes nothing. kNotFound without
  // M/<name>/MANIFEST.
  Result<std::optional<MemoryCheckpoint>> Complete(SessionId session, const std::string& reservation,
                                                   MemoryCheckpoint checkpoint, bool persist);
  // The kept checkpoints, oldest first.
  std::vector<MemoryCheckpoint> List() const;
  // The kept checkpoint `name`, if any.
  std::optional<MemoryCheckpoint> Find(const std::string& name) const;

  // Replication (agent/replicator.h). Files arriving from a peer for checkpoint `name` hold `bytes` of the
  // budget under `transfer` until released: kNoSpace, saying what holds the budget, when they do not fit.
  Status ReserveIncoming(uint64_t transfer, const std::string& name, uint64_t bytes);
  // Drops the reservation of `transfer` and measures its checkpoint again, now with the files that arrived.
  void ReleaseIncoming(uint64_t transfer);
  // Moves a recycled file to `path` (replacing what is there) for a replica of `size` bytes to be written into: the
  // smallest that holds `size`, else the largest. False when none is left or the move failed (that file is then
  // deleted); the caller then creates a fresh file.
  // Its bytes leave the budget's count of recycled files: the replica's reservation counts them from now on.
  bool TakeRecycled(const std::string& path, uint64_t size);
  // The bytes of the recycled files held now.
  uint64_t RecycledBytes() const;
  // The replicas of `name`'s own files are in place on their peers (`error` empty), or why not. kNotFound when the
  // checkpoint is no longer kept.
  Status MarkReplicated(const std::string& name, const std::string& error);
  // M/<checkpoint.name> was made whole from peers' copies (kFetch): it is kept, with no own files and replicated,
  // its sidecar written, as the newest checkpoint unless its manager's newer steps are kept (it goes before them;
  // nothing is removed for it). A checkpoint kept already is measured again and otherwise unchanged. kNotFound
  // without M/<name>/MANIFEST.
  Status RegisterFetched(MemoryCheckpoint checkpoint);
  // A job restored checkpoint `layout.name` on nodes other than those that saved it (a node replaced, or another
  // number of nodes): from now on this node persists it as node `layout.node_index` of `layout.node_count`, writing
  // `layout.own_files` (data files it holds) into the temporary of save `layout.save_id`, so that the agents of the
  // restoring job can commit it together without the saving job's. A persist already under way goes on with the
  // layout it began with; a persisted checkpoint is left as it is. kNotFound for a checkpoint not kept or an own file
  // not held, kInvalidArgument for a layout that cannot be.
  Status Reassign(const MemoryCheckpoint& layout);
  // Marks checkpoint `name` for persisting and returns it for the persister; nullopt when it is persisted or
  // queued already. kNotFound when no such checkpoint is kept.
  Result<std::optional<MemoryCheckpoint>> RequestPersist(const std::string& name);
  // The trainers died: the newest checkpoint, for the persister, unless it is persisted or queued already.
  std::optional<MemoryCheckpoint> RequestPersistOfNewest();
  // The persister's verdict on `name`. `error` empty: committed at its storage path (an older checkpoint is then
  // removed); otherwise the reason, kept for List, and the memory copy stays. `publish_error` is for a checkpoint
  // that was committed but whose manager pointer could not be moved.
  void FinishPersist(const std::string& name, const std::string& error, const std::string& publish_error);

  // Removes the memory directory and everything in it: the agent is leaving.
  Status RemoveAll();

  // `hook` runs, with the store's lock held, after the store deleted files of the memory directory: a mapping of a
  // deleted file would hold its memory beyond the budget's count, so whoever keeps files mapped (the replicator)
  // unmaps those deleted now. It must not call the store. An empty hook (the default) removes it.
  void SetFilesDeletedHook(std::function<void()> hook);

 private:
  struct Entry {
    MemoryCheckpoint checkpoint;
    bool persist_wanted = false;  // an older checkpoint is kept until this is persisted
    bool queued = false;          // with the persister, or being written
  };

  MemoryStore(std::string dir, std::string node, uint64_t budget_bytes, LogFn log)
      : dir_(std::move(dir)), node_(std::move(node)), budget_bytes_(budget_bytes), log_(std::move(log)) {}

  Status Adopt();
  uint64_t UsedBytesLocked() const;
  std::string BudgetRefusal(const std::string& name, uint64_t bytes) const;
  // kNoSpace (logged as `what` refused) unless `bytes` more for `name` fit beside what is kept and reserved;
  // recycled files are deleted first when that makes room.
  Status FitsBudgetLocked(const std::string& name, uint64_t bytes, const char* what);
  // DropRecycledLocked deletes the recycled files; RecycleDataFilesLocked replaces them with the data files of
  // checkpoint `name` (RemoveEntryFiles).
  void DropRecycledLocked();
  // TakeRecycled's work; with `replace` false a file already at `path` stays and the recycled one is kept.
  bool TakeRecycledLocked(const std::string& path, uint64_t size, bool replace);
  void RecycleDataFilesLocked(const std::string& name);
  Entry* FindLocked(const std::string& name);
  std::optional<MemoryCheckpoint> QueueLocked(Entry& entry);
  void RemoveIfAbandonedLocked(const std::string& name);
  void ApplyRetentionLocked();
  void RemoveEntryFiles(const std::string& name);
  Status WriteSidecar(const MemoryCheckpoint& checkpoint) const;
  void FilesDeletedLocked() const;

  const std::string dir_;
  const std::string node_;
  const uint64_t budget_bytes_;
  const LogFn log_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;                                      // oldest first; the last is the newest
  std::map<std::pair<SessionId, std::string>, uint64_t> reserved_;  // (session, temporary name) -> bytes
  std::map<uint64_t, std::pair<std::string, uint64_t>> incoming_;   // transfer -> (checkpoint, bytes)
  std::map<std::string, uint64_t> recycled_;                        // path under M/.recycled -> bytes
  uint64_t recycled_bytes_ = 0;
  uint64_t next_recycled_ = 0;  // names the next recycled file
  std::function<void()> files_deleted_;
};

}  // namespace ckpt::agent

// The memory tier on a rank: its link to the node's ckpt-agent, which owns the shared memory that holds in-memory
// checkpoints and outlives the trainers. A memory checkpoint is an ordinary checkpoint directory (same manifest, same
// data files, same checksums) inside the agent's memory directory, named after the storage path it stands for; saves
// write it with the ordinary pipeline, loads read it with the ordinary planner, and the agent persists it to that
// storage path by copying it and committing it as a save would.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/agent/agent_connection.h"
#include "common/status.h"

namespace ckpt::runtime {

// Numbered as CKPT_TIER_*.
enum class Tier : int32_t { kStorage = 0, kMemory = 1, kBoth = 2 };

struct MemoryTierConfig {
  std::string job_id;
  std::string job_secret;  // CKPT_AGENT_SECRET; empty: the job has none
  std::string node_name;
  int rank = 0;
  std::chrono::milliseconds timeout{0};
};

// Where this rank's node stands among the job's nodes for the memory tier (MemoryAttachment::Attach).
struct MemoryNodes {
  uint32_t node_index = 0;  // 0 is rank 0's node; the others follow in the order of their lowest ranks
  uint32_t node_count = 1;
  bool leader = true;     // the lowest rank of its node: it commits, announces and fetches for the node
  uint32_t replicas = 0;  // how many other nodes' agents hold a copy of each node's files (CKPT_MEMORY_REPLICAS)
};

class MemoryTier {
 public:
  // Connects to the agent of this job on this node. With `start`, starts one (detached, so that it outlives the
  // trainers) when none runs; without, kNotFound when none runs.
  static Result<std::unique_ptr<MemoryTier>> Attach(const MemoryTierConfig& config, bool start);
  // Tells the agent this rank leaves cleanly (a rank that dies never says so: the agent then persists).
  ~MemoryTier();

  const std::string& memory_dir() const { return connection_.welcome().memory_dir; }
  // The memory checkpoint that stands for `storage_path`: "<its last component>-<digest of its absolute path>".
  static std::string NameFor(const std::string& storage_path);
  std::string PathFor(const std::string& storage_path) const { return memory_dir() + "/" + NameFor(storage_path); }

  // A save is about to write `bytes` into the temporary directory `tmp_name`, as the data files `files` (names in its
  // data/ directory) of `file_sizes`, which the agent may fill with recycled files; kNoSpace past its budget.
  Status Reserve(const std::string& tmp_name, uint64_t bytes, const std::vector<std::string>& files,
                 const std::vector<uint64_t>& file_sizes);
  Status Release(const std::string& tmp_name);
  // The memory checkpoint `checkpoint.name` is committed; `persist`: the agent writes it to storage too.
  Status Complete(const std::string& reservation, const coll::agent::MemoryCheckpoint& checkpoint, bool persist);
  Result<std::vector<coll::agent::MemoryCheckpoint>> List();
  // The agent's address for its peers; empty where it cannot replicate.
  const std::string& replication_address() const { return connection_.welcome().replication_address; }
  // Tells the agent every node's agent of the job, its own node and how many replicas each node's files get.
  Status SetPeers(const std::vector<coll::agent::PeerAgent>& peers, uint32_t node_index, uint32_t replicas);
  // Waits (up to `timeout`) until the agent holds its memory checkpoint `name` (the node's leader announced it) and,
  // where `replicas_asked`, every replica of it on its peers.
  Status AwaitReplicas(const std::string& name, bool replicas_asked, std::chrono::milliseconds timeout);
  // Has the agent pull the files of `checkpoint` this node lacks from its peers: those among `files` (data file
  // names) and the MANIFEST, or every file when `files` is empty, so that the node holds it whole. Waits up to
  // `timeout`.
  Status Fetch(const coll::agent::MemoryCheckpoint& checkpoint, const std::vector<std::string>& files,
               std::chrono::milliseconds timeout);
  // Tells the agent that this job restored `layout.name` and how its nodes persist it (MemoryStore::Reassign).
  Status Reassign(const coll::agent::MemoryCheckpoint& layout);
  // The agent stopped answering (it died, or its connection broke): this attachment is of no further use, and the
  // context attaches afresh (starting a new agent, which adopts the memory checkpoints the dead one completed).
  bool broken() const { return broken_; }
  // Marks the attachment broken when the agent has closed its connection since the last call: a save that failed
  // on other ranks before this one called the agent says so, so that the next save attaches afresh.
  void NoticeClosedConnection();

 private:
  explicit MemoryTier(coll::agent::AgentConnection connection) : connection_(std::move(connection)) {}
  Result<coll::agent::Reply> Call(const coll::agent::Request& request);

  std::mutex mutex_;  // the save thread and the training thread both call
  coll::agent::AgentConnection connection_;
  std::atomic<bool> broken_{false};
};

// The storage path as an absolute, normalized path: every rank and the agent name a checkpoint the same way
// whatever their working directories. An object storage URL is returned as it is.
std::string AbsoluteStoragePath(const std::string& path);

}  // namespace ckpt::runtime

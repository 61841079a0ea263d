// The memory tier on a rank (DESIGN.md §8): its link to the node's ckpt-agent, which owns the shared memory that
// holds in-memory checkpoints and outlives the trainers. A memory checkpoint is an ordinary checkpoint directory
// (same manifest, same data files, same checksums) inside the agent's memory directory, named after the storage
// path it stands for; saves write it with the ordinary pipeline, loads read it with the ordinary planner, and the
// agent persists it to that storage path by copying it and committing it as a save would.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/agent_connection.h"
#include "common/status.h"

namespace ckpt::runtime {

// Numbered as CKPT_TIER_*.
enum class Tier : int32_t { kStorage = 0, kMemory = 1, kBoth = 2 };

struct MemoryTierConfig {
  std::string job_id;
  std::string job_secret;  // empty: the job has none
  std::string node_name;
  int rank = 0;
  std::chrono::milliseconds timeout{0};
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

  // A save is about to write `bytes` into the temporary directory `tmp_name`; kNoSpace past the agent's budget.
  Status Reserve(const std::string& tmp_name, uint64_t bytes);
  Status Release(const std::string& tmp_name);
  // The memory checkpoint `checkpoint.name` is committed; `persist`: the agent writes it to storage too.
  Status Complete(const std::string& reservation, const coll::agent::MemoryCheckpoint& checkpoint, bool persist);
  Result<std::vector<coll::agent::MemoryCheckpoint>> List();
  // The agent stopped answering (it died, or its connection broke): this attachment is of no further use, and the
  // context attaches afresh (starting a new agent, which adopts the memory checkpoints the dead one completed).
  bool broken() const { return broken_; }

 private:
  explicit MemoryTier(coll::agent::AgentConnection connection) : connection_(std::move(connection)) {}
  Result<coll::agent::Reply> Call(const coll::agent::Request& request);

  std::mutex mutex_;  // the save thread and the training thread both call
  coll::agent::AgentConnection connection_;
  std::atomic<bool> broken_{false};
};

// The storage path as an absolute, normalized path: every rank and the agent name a checkpoint the same way
// whatever their working directories.
std::string AbsoluteStoragePath(const std::string& path);

}  // namespace ckpt::runtime

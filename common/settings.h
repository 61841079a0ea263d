// Every setting ckpt reads from the environment, with its default, in one place. (The launcher's own variables, RANK,
// MASTER_ADDR and the like, are read by collectives/store/bootstrap.cc; the test builds' fault hooks, CKPT_FAULT_*, are
// declared in common/fault_injection.h.)
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

namespace ckpt::settings {

// CKPT_TIMEOUT_MS: how long any wait on a peer may last before it fails (default 300 s).
inline constexpr uint64_t kDefaultTimeoutMs = 300000;
inline constexpr char kTimeoutVar[] = "CKPT_TIMEOUT_MS";
// CKPT_NODE_NAME: overrides the host name as this rank's node identity (for balancing writes across nodes).
inline constexpr char kNodeNameVar[] = "CKPT_NODE_NAME";
// CKPT_LOG_LEVEL: error, warning (default) or info, or 0, 1, 2; for the default log sink on standard error.
inline constexpr char kLogLevelVar[] = "CKPT_LOG_LEVEL";

// The secret a job's ranks prove to their node's ckpt-agent, the same for every run of the job (so a restarted job
// may attach to the memory its crashed run left); unset: the agent checks the user and the job's identity alone.
inline constexpr char kAgentSecretVar[] = "CKPT_AGENT_SECRET";
// CKPT_AGENT_BUDGET_BYTES: the bytes of memory checkpoints a node's agent holds (default: half the memory).
inline constexpr char kAgentBudgetVar[] = "CKPT_AGENT_BUDGET_BYTES";
// CKPT_AGENT_IDLE_S: how long an agent whose trainers died keeps their checkpoints for a restart (default 600 s).
inline constexpr char kAgentIdleVar[] = "CKPT_AGENT_IDLE_S";
// CKPT_AGENT_LINGER_S: how long an agent whose job ended cleanly waits for a new one before it removes its memory
// (default 2 s).
inline constexpr char kAgentLingerVar[] = "CKPT_AGENT_LINGER_S";
// CKPT_AGENT_PERSIST_WAIT_S: how long the agents persisting a checkpoint that spans nodes wait for one another
// (default 300 s); past it nothing is committed.
inline constexpr char kAgentPersistWaitVar[] = "CKPT_AGENT_PERSIST_WAIT_S";
// CKPT_MEMORY_REPLICAS: how many other nodes' agents hold a copy of each node's memory checkpoint files (default 1;
// at most the number of nodes less one; 0: none, a lost node loses its files until they are on storage).
inline constexpr char kMemoryReplicasVar[] = "CKPT_MEMORY_REPLICAS";
inline constexpr int kDefaultLogLevel = 1;

// CKPT_IO_WORKERS: I/O worker processes per rank (default 2; 0: threads of the rank's own process).
inline constexpr char kIoWorkersVar[] = "CKPT_IO_WORKERS";
inline constexpr int kDefaultIoWorkers = 2;
// CKPT_ARENA_BYTES: the staging arena's size (default: an eighth of memory, 256 MiB..8 GiB).
inline constexpr char kArenaBytesVar[] = "CKPT_ARENA_BYTES";
// CKPT_IO_BACKEND: "io_uring" or "pwrite" forces an I/O backend (default: io_uring where the kernel allows it).
inline constexpr char kIoBackendVar[] = "CKPT_IO_BACKEND";
// CKPT_IO_DIRECT: "0" turns O_DIRECT off (default on; refused per file where the file system lacks it).
inline constexpr char kIoDirectVar[] = "CKPT_IO_DIRECT";
// CKPT_LOAD_DIRECT: "0" sends every block a load reads through the I/O workers and the staging arena (default on:
// the whole checksum blocks that land in page-aligned host tensors are read by the rank straight into them).
inline constexpr char kLoadDirectVar[] = "CKPT_LOAD_DIRECT";
// CKPT_LOAD_READS: "auto" (default), "once" or "own": how a load reads its tensors (runtime/load/read_strategy.h):
// read once by one rank each and exchanged, or by every rank for its own pieces; AUTO chooses per load.
inline constexpr char kLoadReadsVar[] = "CKPT_LOAD_READS";
// CKPT_TRANSPORT: "auto" (default), "none", "ucx" or "nccl": how ranks exchange tensor data during a load.
inline constexpr char kTransportVar[] = "CKPT_TRANSPORT";
// CKPT_PEER_CONTROL: "0" routes every collective of a job without collectives of its own through rank 0's TCP store
// (default: all-to-alls and broadcasts over direct links between the ranks, collectives/peer/peer_control_plane.h).
inline constexpr char kPeerControlVar[] = "CKPT_PEER_CONTROL";
// CKPT_PEER_DIRECT_RANKS: the largest job whose peer plane links any two ranks directly (default 256); a larger one
// links each rank only to its neighbours in a grid, and its all-to-alls take a hop per dimension
// (collectives/peer/peer_grid.h).
inline constexpr char kPeerDirectRanksVar[] = "CKPT_PEER_DIRECT_RANKS";
// CKPT_WORKER_PATH: the ckpt-io-worker executable (default: beside libckpt.so). Read by io/worker_pool.cc.
inline constexpr char kWorkerPathVar[] = "CKPT_WORKER_PATH";

// The variable's value as a positive integer, or `fallback` when unset or not a positive integer.
inline uint64_t PositiveFromEnv(const char* name, uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  unsigned long long value = std::strtoull(text, &end, 10);
  return (*end == '\0' && value > 0) ? value : fallback;
}

}  // namespace ckpt::settings

namespace ckpt::settings {

// The variable's value as a non-negative integer, or `fallback` when unset or not a non-negative integer.
inline uint64_t CountFromEnv(const char* name, uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  unsigned long long value = std::strtoull(text, &end, 10);
  return *end == '\0' ? value : fallback;
}

inline std::string StringFromEnv(const char* name) {
  const char* text = std::getenv(name);
  return text ? text : "";
}

}  // namespace ckpt::settings

// One rank's context: who it is, its control plane, its staging arena and I/O workers, the background thread that
// finishes saves, the cached save plan, and its statistics.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/bootstrap.h"
#include "collectives/control_plane.h"
#include "collectives/table_control_plane.h"
#include "collectives/tcp_store.h"
#include "collectives/transport.h"
#include "common/status.h"
#include "io/staging_arena.h"
#include "io/worker_pool.h"
#include "runtime/memory_tier.h"
#include "runtime/save_executor.h"
#include "runtime/save_partition.h"
#include "runtime/save_plan.h"

namespace ckpt::runtime {

enum class LogLevel : int32_t { kError = 0, kWarning = 1, kInfo = 2 };
// Numbered as CKPT_TRANSPORT_*.
enum class TransportKind : int32_t { kDefault = -1, kAuto = 0, kNone = 1, kUcx = 2, kNccl = 3 };
using LogSink = std::function<void(LogLevel, const std::string&)>;

struct ContextConfig {
  coll::ProcessIdentityRequest identity;
  std::chrono::milliseconds timeout{0};  // 0: CKPT_TIMEOUT_MS, else 300 s
  coll::AllGatherCallback allgather;     // set: used once, to spread the address of rank 0's store
  // Set: the job's collectives carry every collective (and spread the store's address); not with `allgather`.
  std::optional<coll::CollectiveTable> collectives;
  LogSink log;               // empty: standard error, warnings and errors
  int io_workers = -1;       // -1: CKPT_IO_WORKERS, else 2
  uint64_t arena_bytes = 0;  // 0: CKPT_ARENA_BYTES, else io::DefaultArenaCapacity()
  TransportKind transport = TransportKind::kDefault;
};

// The plan of the last save, kept while the structure of the state stays the same on every rank.
struct PlanCache {
  uint64_t structure = 0;                            // 0: none
  SavePlan plan;                                     // this rank's items only
  std::shared_ptr<const ManifestSkeleton> skeleton;  // rank 0
};

struct LoadPlan;

// This rank's rounds of the last read-once load's plan, reused when the same requests meet the same checkpoint.
struct LoadPlanCache {
  uint64_t key = 0;  // 0: none
  std::shared_ptr<const std::vector<LoadPlan>> rounds;
  std::string checkpoint_id;  // of the checkpoint the plan reads
};

struct ContextStats {
  std::atomic<uint64_t> saves_committed{0};
  std::atomic<uint64_t> plans_computed{0};
  std::atomic<uint64_t> plans_reused{0};
  std::atomic<uint64_t> bytes_staged{0};
  std::atomic<uint64_t> bytes_written{0};
  std::atomic<uint64_t> bytes_read{0};
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> bytes_received{0};
  std::atomic<uint64_t> exchange_ns{0};
};

class Context {
 public:
  static Result<std::unique_ptr<Context>> Create(ContextConfig config);
  // Finishes the saves in flight first.
  ~Context();

  int rank() const { return identity_.rank; }
  int world_size() const { return identity_.world_size; }
  int local_rank() const { return identity_.local_rank; }
  const std::string& node_name() const { return identity_.node_name; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  coll::ControlPlane& control() { return *control_; }
  // What the collectives moved (control_plane.h), and how many went through the TCP store.
  coll::ControlPlaneCounters control_counters() const { return control_->counters(); }
  uint64_t store_collectives() const { return store_ ? store_->counters().collectives : 0; }
  io::StagingArena& arena() { return *arena_; }
  io::WorkerPool& workers() { return *workers_; }
  SaveExecutor& saves() { return *saves_; }
  PlanCache& plan_cache() { return plan_cache_; }
  ContextStats& stats() { return stats_; }
  const ContextStats& stats() const { return stats_; }
  int io_workers() const { return io_workers_; }
  // How a load reads blocks straight into page-aligned host tensors in this process (backend, O_DIRECT, request
  // size); null when CKPT_LOAD_DIRECT=0 sends every block through the workers and the arena.
  const io::IoTuning* direct_load_tuning() const { return direct_loads_ ? &io_tuning_ : nullptr; }
  // How the I/O workers, and a rank writing a save in place, do their I/O.
  const io::IoTuning& io_tuning() const { return io_tuning_; }
  // The data plane for host memory during loads; null: none.
  coll::Transport* transport() { return transport_.get(); }
  // Whether loads may exchange at all; if not, every rank reads what it needs itself.
  bool exchanges() const { return transport_ != nullptr || DeviceTransportWanted(); }
  // NCCL once a load has created it, else the host data plane's kind (UCX or NONE).
  TransportKind transport_kind() const { return device_transport_ ? TransportKind::kNccl : transport_kind_; }
  // Local: whether a load whose destinations on this rank all lie on CUDA device `device` may exchange them as
  // device memory over NCCL (asked for by AUTO or NCCL, usable here, and not bound to another device already).
  bool CanExchangeOnDevice(int device) const;
  // Collective, entered by every rank when every rank can exchange on its device: the NCCL transport, created on
  // first use on `device`. Under AUTO a failure to create it is logged, remembered on every rank alike, and gives
  // null (loads then stage device memory through the host data plane); with NCCL asked for by name it is an error.
  Result<coll::Transport*> DeviceTransport(int device);
  LoadPlanCache& load_plan_cache() { return load_plan_cache_; }
  // Collective on first use: every rank attaches to its node's ckpt-agent, starting it when none runs, and all
  // agree on the outcome; where the ranks span several nodes, each node's leader then tells its agent every node's
  // agent (its peers for replicas and fetches). Later calls return the same attachment at no cost.
  // Shared with the saves in flight, which hold it until they finish even when a later save re-attaches.
  Result<std::shared_ptr<MemoryTier>> AttachMemoryTier();
  // This rank's node among the job's nodes, as AttachMemoryTier agreed (one node until it has).
  const MemoryNodes& memory_nodes() const { return memory_nodes_; }
  // Whether this rank attached to a new agent since the agents' addresses were last exchanged (its agent died).
  bool memory_peers_stale() const { return memory_peers_stale_; }
  // Collective: the agents' addresses exchanged again and every node's agent told its peers (a no-op before the
  // memory tier is attached). Saves call it when some rank's agent is new.
  Status RefreshMemoryPeers();
  // Local: the memory tier if attached, else this job's agent on this node if one runs (never starting one); null
  // when there is none or the job has no identity (coll::agent::JobIdFromEnvironment).
  std::shared_ptr<MemoryTier> FindMemoryTier();
  // Local: the complete memory checkpoints this rank's agent holds (FindMemoryTier), in `memory_dir`; none when
  // there is no agent or it cannot say (logged as a warning: the caller then uses storage).
  struct MemoryHoldings {
    std::string memory_dir;
    std::vector<coll::agent::MemoryCheckpoint> checkpoints;
  };
  MemoryHoldings HeldInMemory();

  void Log(LogLevel level, const std::string& message) const;

 private:
  Context() = default;
  Status StartControlPlane(const ContextConfig& config);
  Status StartIo(const ContextConfig& config);
  Status StartTransport(const ContextConfig& config);
  void PinArenaForDevices();
  bool DeviceTransportWanted() const;
  // This rank's attachment to its node's agent (starting one with `start`): MemoryTier::Attach.
  Result<std::shared_ptr<MemoryTier>> AttachToAgent(bool start) const;
  // Collective: every rank's node and agent address gathered (failing on every rank where `local` failed on one),
  // the nodes numbered, and each node's leader telling its agent its peers.
  Status ExchangeMemoryPeers(const Status& local);

  coll::ProcessIdentity identity_;
  std::chrono::milliseconds timeout_{0};
  LogSink log_;
  int io_workers_ = 0;
  io::IoTuning io_tuning_;
  bool direct_loads_ = true;
  std::shared_ptr<coll::TcpStore> store_;  // world size > 1
  std::shared_ptr<coll::ControlPlane> control_;
  coll::TcpStoreConfig store_config_;  // how to open a second connection (world size > 1)
  std::unique_ptr<io::StagingArena> arena_;
  bool arena_pinned_ = false;  // registered with CUDA for fast device copies
  std::unique_ptr<io::WorkerPool> workers_;
  std::unique_ptr<SaveExecutor> saves_;
  std::unique_ptr<coll::Transport> transport_;
  TransportKind transport_kind_ = TransportKind::kNone;
  TransportKind requested_transport_ = TransportKind::kNone;  // AUTO, NONE, UCX or NCCL, once resolved
  std::unique_ptr<coll::Transport> device_transport_;
  int device_transport_device_ = -1;
  bool device_transport_failed_ = false;
  LoadPlanCache load_plan_cache_;
  PlanCache plan_cache_;
  std::shared_ptr<MemoryTier> memory_tier_;  // detached once the saves in flight have finished
  bool memory_tier_agreed_ = false;          // every rank attached (AttachMemoryTier)
  MemoryNodes memory_nodes_;                 // agreed with memory_tier_agreed_
  bool memory_peers_stale_ = false;          // a new agent since the last ExchangeMemoryPeers
  ContextStats stats_;
};

}  // namespace ckpt::runtime

// One rank's context: the resources every layer above shares. Who the rank is, its control plane (and the store
// behind it), its staging arena and I/O workers, its data transports, its log and its statistics. What the saves,
// the loads and the memory tier keep between calls belongs to them (runtime/save/rank_saves.h,
// runtime/load/exchange_load.h, runtime/memtier/memory_attachment.h); the C API's context object owns all of it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/control/control_plane.h"
#include "collectives/control/table_control_plane.h"
#include "collectives/store/bootstrap.h"
#include "collectives/store/tcp_store.h"
#include "collectives/transport/transport.h"
#include "common/descriptor_limit.h"
#include "common/status.h"
#include "io/staging_arena.h"
#include "io/worker_pool.h"

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
  std::atomic<uint64_t> last_load_reads{0};  // runtime/load/read_strategy.h's LoadReads of the last load; 0: none yet
  std::atomic<uint64_t> last_load_read_amplification_milli{0};
};

class Context {
 public:
  static Result<std::unique_ptr<Context>> Create(ContextConfig config);
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

  void Log(LogLevel level, const std::string& message) const;
  // A second connection to rank 0's store, opened with the I/O (so that a rank that cannot open it tells the
  // others at creation), for a thread that must not share the collectives' connection: the saves' commits. Null
  // for one rank, and once taken.
  std::unique_ptr<coll::TcpStore> TakeAuxiliaryStore() { return std::move(auxiliary_store_); }

 private:
  Context() = default;
  Status StartControlPlane(const ContextConfig& config);
  int RankZeroLayout(bool peer_plane) const;
  DescriptorUse DescriptorsOf(int rank, int relay_columns, bool peer_plane) const;
  std::string GridReason() const;
  Status StartIo(const ContextConfig& config);
  Status StartTransport(const ContextConfig& config);
  void PinArenaForDevices();
  bool DeviceTransportWanted() const;

  coll::ProcessIdentity identity_;
  std::chrono::milliseconds timeout_{0};
  LogSink log_;
  int io_workers_ = 0;
  io::IoTuning io_tuning_;
  bool direct_loads_ = true;
  std::shared_ptr<coll::TcpStore> store_;  // world size > 1
  std::shared_ptr<coll::ControlPlane> control_;
  coll::TcpStoreConfig store_config_;                // how to open a second connection (world size > 1)
  std::unique_ptr<coll::TcpStore> auxiliary_store_;  // world size > 1, until taken
  std::unique_ptr<io::StagingArena> arena_;
  bool arena_pinned_ = false;  // registered with CUDA for fast device copies
  std::unique_ptr<io::WorkerPool> workers_;
  std::unique_ptr<coll::Transport> transport_;
  TransportKind transport_kind_ = TransportKind::kNone;
  TransportKind requested_transport_ = TransportKind::kNone;  // AUTO, NONE, UCX or NCCL, once resolved
  std::unique_ptr<coll::Transport> device_transport_;
  int device_transport_device_ = -1;
  bool device_transport_failed_ = false;
  ContextStats stats_;
};

}  // namespace ckpt::runtime

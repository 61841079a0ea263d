#include "runtime/core/context.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "collectives/control/solo_control_plane.h"
#include "collectives/peer/peer_control_plane.h"
#include "collectives/store/store_auth.h"
#include "collectives/store/store_relay.h"
#include "collectives/store/tcp_store.h"
#include "collectives/transport/nccl_transport.h"
#include "collectives/transport/ucx_transport.h"
#include "common/bytes.h"
#include "common/descriptor_limit.h"
#include "common/settings.h"
#include "common/usable_cores.h"
#include "gpu/cuda_runtime.h"
#include "runtime/core/agreement.h"

namespace ckpt::runtime {
namespace {

// CKPT_LOG_LEVEL: a level's number or name; anything else is the default.
int LogLevelFromEnv() {
  const std::string text = settings::StringFromEnv(settings::kLogLevelVar);
  if (text == "error") return static_cast<int>(LogLevel::kError);
  if (text == "warning") return static_cast<int>(LogLevel::kWarning);
  if (text == "info") return static_cast<int>(LogLevel::kInfo);
  return static_cast<int>(settings::CountFromEnv(settings::kLogLevelVar, settings::kDefaultLogLevel));
}

LogSink StandardErrorSink(int rank) {
  const int max_level = LogLevelFromEnv();
  return [rank, max_level](LogLevel level, const std::string& message) {
    if (static_cast<int>(level) > max_level) return;
    static const char* const kNames[] = {"error", "warning", "info"};
    std::fprintf(stderr, "ckpt[rank %d] %s: %s\n", rank, kNames[static_cast<int>(level)], message.c_str());
  };
}

std::string HostName() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 ? name : "localhost";
}

// Where rank 0's store listens when a user allgather spreads its address: the configured host, else loopback when
// every rank runs on rank 0's node (nothing beyond this machine needs to reach it), else every interface.
Result<std::string> CallbackBindHost(coll::ControlPlane& bootstrap, const coll::ProcessIdentity& identity,
                                     const std::string& explicit_host) {
  ASSIGN_OR_RETURN(std::vector<std::string> nodes, bootstrap.AllGather(identity.node_name));
  if (!explicit_host.empty()) return explicit_host;
  const bool one_node = std::all_of(nodes.begin(), nodes.end(), [&](const auto& n) { return n == nodes[0]; });
  return std::string(one_node ? "127.0.0.1" : "0.0.0.0");
}

// Spreads rank 0's store address and secret over the user's allgather (once, at context creation). Ranks on rank
// 0's node connect over loopback; the others to rank 0's host name, or to the explicitly configured host.
std::function<Result<coll::StoreAddress>(int, const std::string&)> CallbackRendezvous(
    const coll::ProcessIdentity& identity, std::string explicit_host, std::shared_ptr<coll::ControlPlane> bootstrap) {
  return [identity, explicit_host, bootstrap](int bound_port, const std::string& secret) -> Result<coll::StoreAddress> {
    ByteWriter mine;
    mine.Bytes(identity.node_name);
    mine.Bytes(explicit_host.empty() ? HostName() : explicit_host);
    mine.U32(static_cast<uint32_t>(bound_port));
    mine.Bytes(secret);
    ASSIGN_OR_RETURN(std::vector<std::string> all, bootstrap->AllGather(mine.data()));
    ByteReader rank0(all[0], "store address from rank 0");
    coll::StoreAddress address;
    std::string node;
    uint32_t port = 0;
    RETURN_IF_ERROR(rank0.Bytes(&node));
    RETURN_IF_ERROR(rank0.Bytes(&address.host));
    RETURN_IF_ERROR(rank0.U32(&port));
    RETURN_IF_ERROR(rank0.Bytes(&address.secret));
    address.port = static_cast<int>(port);
    if (explicit_host.empty() && node == identity.node_name) address.host = "127.0.0.1";
    return address;
  };
}

// Ranks sharing this host, as the launcher tells it (torchrun, OpenMPI, SLURM); 1 if it does not. The default
// arena is divided among them, since every rank commits its own.
uint64_t LocalRanks() {
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"}) {
    const uint64_t count = settings::CountFromEnv(name, 0);
    if (count > 0) return count;
  }
  return 1;
}

Result<TransportKind> TransportFromEnv() {
  const std::string name = settings::StringFromEnv(settings::kTransportVar);
  if (name.empty() || name == "auto") return TransportKind::kAuto;
  if (name == "none") return TransportKind::kNone;
  if (name == "ucx") return TransportKind::kUcx;
  if (name == "nccl") return TransportKind::kNccl;
  return InvalidArgument(std::string(settings::kTransportVar) + "='" + name + "': expected auto, none, ucx or nccl");
}

Result<io::IoBackendKind> BackendFromEnv() {
  const std::string name = settings::StringFromEnv(settings::kIoBackendVar);
  if (name.empty() || name == "auto") return io::IoBackendKind::kAuto;
  if (name == "io_uring") return io::IoBackendKind::kIoUring;
  if (name == "pwrite") return io::IoBackendKind::kPwrite;
  return InvalidArgument(std::string(settings::kIoBackendVar) + "='" + name + "': expected io_uring, pwrite or auto");
}

}  // namespace

Result<std::unique_ptr<Context>> Context::Create(ContextConfig config) {
  std::unique_ptr<Context> ctx(new Context());
  ASSIGN_OR_RETURN(ctx->identity_, coll::ResolveProcessIdentity(config.identity));
  ctx->timeout_ =
      config.timeout.count() > 0
          ? config.timeout
          : std::chrono::milliseconds(settings::PositiveFromEnv(settings::kTimeoutVar, settings::kDefaultTimeoutMs));
  ctx->log_ = config.log ? std::move(config.log) : StandardErrorSink(ctx->identity_.rank);
  RETURN_IF_ERROR(ctx->StartControlPlane(config));
  // A rank whose workers or arena cannot start tells the others, instead of leaving them in the next collective.
  RETURN_IF_ERROR(Agree(ctx->control(), "context create (I/O)", ctx->StartIo(config)));
  RETURN_IF_ERROR(ctx->StartTransport(config));
  return ctx;
}

Context::~Context() {
  device_transport_.reset();
  transport_.reset();
  workers_.reset();
  if (arena_pinned_) (void)gpu::CudaRuntime::Get().value()->UnregisterHost(arena_->data());
}

// Rank 0 lays the job out before anything connects: a grid, with store relays (collectives/store/store_relay.h), past
// CKPT_PEER_DIRECT_RANKS ranks, or where its hard descriptor limit cannot hold a link and two store connections per
// rank; every rank directly connected otherwise. Returns the length of the relays' rows, 0 for none.
int Context::RankZeroLayout(bool peer_plane) const {
  const int relay_columns = coll::StoreRelayColumns(world_size());
  if (world_size() > coll::PeerDirectRanks()) return relay_columns;
  return HardLimitHolds(DescriptorsOf(0, 0, peer_plane)) ? 0 : relay_columns;
}

// What `rank` holds open under the layout of `relay_columns`: rank 0 a connection and an auxiliary one per rank that
// reaches it directly and a link per relay, a relay two per member and its link, and every rank its peers' links.
DescriptorUse Context::DescriptorsOf(int rank, int relay_columns, bool peer_plane) const {
  DescriptorUse use;
  const auto world = static_cast<uint64_t>(world_size());
  if (rank == 0) {
    use.store = relay_columns > 0 ? 2 + (world + relay_columns - 1) / relay_columns : 2 * world;
  } else if (coll::StoreRelayOf(rank, world_size(), relay_columns) == rank) {
    use.store = 2 * static_cast<uint64_t>(coll::StoreRelayMembers(rank, world_size(), relay_columns)) + 1;
  }
  if (peer_plane) use.peers = coll::PeerGrid(world_size(), relay_columns > 0 ? 1 : world_size()).PeersOf(rank);
  return use;
}

Status Context::StartControlPlane(const ContextConfig& config) {
  if (world_size() == 1) {
    control_ = coll::MakeSoloControlPlane();
    return Status::Ok();
  }
  const bool peer_plane = !config.collectives && settings::StringFromEnv(settings::kPeerControlVar) != "0";
  coll::TcpStoreConfig store;
  // Before anything connects: rank 0, short of descriptors for its part, fails here naming what it needs; the other
  // ranks, which learn their part as they connect, check it just after, all together.
  if (rank() == 0) {
    store.relay_columns = RankZeroLayout(peer_plane);
    RETURN_IF_ERROR(EnsureDescriptors(rank(), world_size(), DescriptorsOf(rank(), store.relay_columns, peer_plane)));
  } else {
    RaiseDescriptorLimit();
  }
  store.rank = rank();
  store.world_size = world_size();
  store.host = identity_.store_host;
  store.port = identity_.store_port;
  store.timeout = timeout_;
  store.secret = identity_.job_secret;
  if (config.allgather || config.collectives) {
    if (config.allgather && config.collectives) {
      return InvalidArgument("both an allgather callback and the job's collectives were given: set one");
    }
    const std::string explicit_host = config.identity.store_host;
    std::shared_ptr<coll::ControlPlane> bootstrap =
        config.collectives
            ? coll::MakeTableControlPlane(identity_.rank, identity_.world_size, *config.collectives, nullptr)
            : coll::MakeCallbackControlPlane(identity_.rank, identity_.world_size, config.allgather);
    ASSIGN_OR_RETURN(store.host, CallbackBindHost(*bootstrap, identity_, explicit_host));
    store.port = config.identity.store_port > 0 ? config.identity.store_port : 0;
    // Rank 0 makes the secret that the rendezvous spreads, unless the launcher gave every rank one.
    if (rank() == 0 && store.secret.empty()) {
      ASSIGN_OR_RETURN(store.secret, coll::store_auth::NewSecret());
    }
    store.rendezvous = CallbackRendezvous(identity_, explicit_host, std::move(bootstrap));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<coll::TcpStore> connected, coll::TcpStore::Connect(store));
  const int relay_columns = connected->relay_columns();
  store_config_ = connected->AuxiliaryConfig();
  store_ = std::move(connected);
  // With the job's collectives the store carries none: it only knows which ranks died, and the commit's reports.
  if (config.collectives) {
    control_ = coll::MakeTableControlPlane(identity_.rank, identity_.world_size, *config.collectives, store_);
  } else if (settings::StringFromEnv(settings::kPeerControlVar) == "0") {
    control_ = store_;
  } else {
    ASSIGN_OR_RETURN(control_, coll::MakePeerControlPlane(store_));
    if (relay_columns > 0 && rank() == 0) {
      const coll::PeerGrid grid(world_size(), 1);
      Log(LogLevel::kInfo, "the control plane links each rank only to its neighbours in a grid of " + grid.Shape() +
                               " (" + std::to_string(grid.PeersOf(0)) + " other ranks at rank 0) and sends its " +
                               "all-to-alls in " + std::to_string(grid.hops()) + " hops, " + GridReason() +
                               "; each row of " + std::to_string(relay_columns) +
                               " ranks reaches the store through a relay on one of its ranks");
    }
  }
  if (relay_columns > 0 && rank() == 0 && !peer_plane) {
    Log(LogLevel::kInfo, "each row of " + std::to_string(relay_columns) +
                             " ranks reaches the store through a relay on one of its ranks, " + GridReason());
  }
  // The first collective: every rank learns whether any is short of descriptors for its part in the layout.
  return Agree(*control_, "context create (file descriptors)",
               EnsureDescriptors(rank(), world_size(), DescriptorsOf(rank(), relay_columns, peer_plane)));
}

std::string Context::GridReason() const {
  if (world_size() > coll::PeerDirectRanks()) {
    return std::to_string(world_size()) + " ranks being more than " + std::to_string(coll::PeerDirectRanks()) +
           " (CKPT_PEER_DIRECT_RANKS)";
  }
  return "rank 0's hard descriptor limit (RLIMIT_NOFILE) being too low to link every rank";
}

Status Context::StartIo(const ContextConfig& config) {
  uint64_t arena_bytes = config.arena_bytes;
  if (arena_bytes == 0) arena_bytes = settings::CountFromEnv(settings::kArenaBytesVar, 0);
  if (arena_bytes == 0) arena_bytes = std::max(io::kMinArenaBytes, io::DefaultArenaCapacity() / LocalRanks());
  ASSIGN_OR_RETURN(arena_, io::StagingArena::Create(arena_bytes));
  PinArenaForDevices();

  io::WorkerPoolOptions pool;
  pool.workers = config.io_workers >= 0
                     ? config.io_workers
                     : static_cast<int>(settings::CountFromEnv(settings::kIoWorkersVar, settings::kDefaultIoWorkers));
  ASSIGN_OR_RETURN(pool.tuning.backend, BackendFromEnv());
  pool.tuning.direct = settings::StringFromEnv(settings::kIoDirectVar) != "0";
  pool.tuning.caller_memory_threads = io::CallerMemoryThreadsFor(UsableCores());
  pool.timeout = timeout_;
  ASSIGN_OR_RETURN(workers_, io::WorkerPool::Start(*arena_, pool));
  io_workers_ = pool.workers;
  io_tuning_ = pool.tuning;
  direct_loads_ = settings::StringFromEnv(settings::kLoadDirectVar) != "0";
  if (store_ != nullptr) {
    ASSIGN_OR_RETURN(auxiliary_store_, coll::TcpStore::Connect(store_config_));
  }

  return Status::Ok();
}

// Collective (the transports exchange addresses). AUTO takes UCX where it loads and no host transport otherwise; a
// transport asked for by name must be usable on every rank. NCCL carries device memory only, so with NCCL host
// memory still goes over UCX where it loads; the NCCL communicator itself is made by the first load that needs it,
// on the device its destinations are on (DeviceTransport).
Status Context::StartTransport(const ContextConfig& config) {
  TransportKind kind = config.transport;
  if (kind == TransportKind::kDefault) {
    ASSIGN_OR_RETURN(kind, TransportFromEnv());
  }
  requested_transport_ = kind;
  if (world_size() == 1 || kind == TransportKind::kNone) return Status::Ok();
  if (kind == TransportKind::kNccl) RETURN_IF_ERROR(Agree(*control_, "context create (NCCL)", coll::NcclUsable()));
  coll::UcxTransportOptions options;
  options.close_timeout = timeout_;
  options.job_host = store_config_.host;
  Result<std::unique_ptr<coll::Transport>> ucx = coll::MakeUcxTransport(*control_, options);
  if (!ucx.ok()) {
    if (kind == TransportKind::kUcx) return ucx.status();
    Log(LogLevel::kInfo,
        "no host data transport, every rank reads the host memory it loads itself: " + ucx.status().message());
    return Status::Ok();
  }
  transport_ = std::move(ucx).value();
  transport_kind_ = TransportKind::kUcx;
  transport_->SetPeerCheck([this] { return control_->CheckPeers(); });
  return Status::Ok();
}

bool Context::DeviceTransportWanted() const {
  if (world_size() == 1 || device_transport_failed_) return false;
  if (requested_transport_ != TransportKind::kAuto && requested_transport_ != TransportKind::kNccl) return false;
  return coll::NcclUsable().ok();
}

bool Context::CanExchangeOnDevice(int device) const {
  if (device < 0 || !DeviceTransportWanted()) return false;
  return device_transport_ == nullptr || device_transport_device_ == device;
}

Result<coll::Transport*> Context::DeviceTransport(int device) {
  if (device_transport_) return device_transport_.get();
  Result<std::unique_ptr<coll::Transport>> made = coll::MakeNcclTransport(*control_, device, timeout_);
  // Setup can fail on one rank after the others succeeded (a communicator that does not come up in time): the
  // verdict is agreed so that every rank keeps or drops the transport alike.
  const Status agreed = Agree(*control_, "load (NCCL setup)", made.status());
  if (agreed.ok()) {
    device_transport_ = std::move(made).value();
    device_transport_device_ = device;
    device_transport_->SetPeerCheck([this] { return control_->CheckPeers(); });
    return device_transport_.get();
  }
  if (requested_transport_ == TransportKind::kNccl) return agreed;
  device_transport_failed_ = true;
  Log(LogLevel::kInfo, "device memory is exchanged through host memory: " + agreed.message());
  return nullptr;
}

// Where a CUDA device exists, the arena is pinned so that copies between it and device memory run at full speed.
// Pinning is an optimisation: a failure is logged, and copies then go through CUDA's own staging.
void Context::PinArenaForDevices() {
  Result<gpu::CudaRuntime*> cuda = gpu::CudaRuntime::Get();
  if (!cuda.ok()) return;
  const Status pinned = (*cuda)->RegisterHost(arena_->data(), arena_->capacity());
  arena_pinned_ = pinned.ok();
  if (!pinned.ok()) Log(LogLevel::kInfo, "the staging arena is not pinned for CUDA: " + pinned.message());
}

void Context::Log(LogLevel level, const std::string& message) const { log_(level, message); }

}  // namespace ckpt::runtime

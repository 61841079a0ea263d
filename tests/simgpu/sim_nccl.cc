// libnccl.so.2 stand-in: the NCCL calls ckpt resolves (collectives/transport/nccl_library.cc), point-to-point only,
// between processes over Unix sockets (tests/simgpu/sim_nccl_comm.h). Linked against the simulated CUDA runtime, whose
// streams run the groups and whose device memory the transfers read and write.
#include <sys/random.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/simgpu/sim_config.h"
#include "tests/simgpu/sim_cuda_internal.h"
#include "tests/simgpu/sim_nccl_api.h"
#include "tests/simgpu/sim_nccl_comm.h"
#include "tests/simgpu/sim_nccl_group.h"

namespace simgpu {
namespace {

// Opens every unique id the simulator makes, so an id from elsewhere is refused.
constexpr char kIdMarker[] = "ckpt-simgpu-nccl";
constexpr size_t kSessionHexDigits = 32;
// How long a non-blocking communicator reports ncclInProgress before a group is on its stream.
constexpr auto kDeferredQueueDelay = std::chrono::milliseconds(1);

// Live communicators by handle, so a destroyed or foreign handle is an error rather than a crash. Queued stream
// operations hold their own references, so a communicator outlives its handle until its work has finished.
class CommunicatorTable {
 public:
  void* Add(std::shared_ptr<Communicator> comm) {
    void* handle = comm.get();
    std::lock_guard<std::mutex> lock(mutex_);
    table_[handle] = std::move(comm);
    return handle;
  }
  std::shared_ptr<Communicator> Find(void* handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = table_.find(handle);
    return it == table_.end() ? nullptr : it->second;
  }
  std::shared_ptr<Communicator> Remove(void* handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = table_.find(handle);
    if (it == table_.end()) return nullptr;
    std::shared_ptr<Communicator> comm = std::move(it->second);
    table_.erase(it);
    return comm;
  }

 private:
  std::mutex mutex_;
  std::map<void*, std::shared_ptr<Communicator>> table_;
};

// Never destroyed: stream threads may still release communicators while the process exits.
CommunicatorTable& Communicators() {
  static CommunicatorTable* table = new CommunicatorTable();
  return *table;
}

// The last failure of a call that had no communicator to record it on.
struct LastError {
  std::mutex mutex;
  std::string message;
};

LastError& ProcessLastError() {
  static LastError* last = new LastError();
  return *last;
}

int Reject(int result, const std::string& message) {
  LastError& last = ProcessLastError();
  std::lock_guard<std::mutex> lock(last.mutex);
  last.message = message;
  return result;
}

struct PendingTransfer {
  std::shared_ptr<Communicator> comm;
  void* stream;
  Transfer transfer;
};

// ncclGroupStart/End nest per thread; the transfers posted inside run when the outermost group ends.
struct GroupState {
  int depth = 0;
  int first_error = kNcclSuccess;
  std::vector<PendingTransfer> transfers;
};
thread_local GroupState t_group;

// Puts one group's transfers for `comm` on `stream`; counted as the communicator's work until it has run.
int QueueGroup(const std::shared_ptr<Communicator>& comm, void* stream, std::vector<Transfer> transfers) {
  comm->BeginOperation();
  const int queued = EnqueueOnStream(stream, [comm, transfers = std::move(transfers)] {
    const int result = RunGroup(*comm, transfers);
    comm->EndOperation();
    return result;
  });
  if (queued == kCudaSuccess) return kNcclSuccess;
  comm->EndOperation();
  comm->Fail(kNcclUnhandledCudaError, std::string("cannot queue a group on the stream: ") + cudaGetErrorString(queued));
  return kNcclUnhandledCudaError;
}

// One stream operation per (communicator, stream) of the group, in the order the transfers were posted. A
// non-blocking communicator queues it from its background thread and reports ncclInProgress meanwhile, as NCCL may.
int LaunchGroup(std::vector<PendingTransfer> pending) {
  std::vector<std::pair<PendingTransfer, std::vector<Transfer>>> batches;
  for (PendingTransfer& item : pending) {
    auto same = [&](const auto& batch) { return batch.first.comm == item.comm && batch.first.stream == item.stream; };
    auto batch = std::find_if(batches.begin(), batches.end(), same);
    if (batch == batches.end()) batch = batches.insert(batches.end(), {item, {}});
    batch->second.push_back(item.transfer);
  }
  int result = kNcclSuccess;
  for (auto& batch : batches) {
    std::shared_ptr<Communicator> comm = batch.first.comm;
    void* stream = batch.first.stream;
    const auto sends =
        std::count_if(batch.second.begin(), batch.second.end(), [](const Transfer& t) { return t.send; });
    Trace("ncclGroup rank " + std::to_string(comm->rank()) + " sends " + std::to_string(sends) + " receives " +
          std::to_string(batch.second.size() - static_cast<size_t>(sends)));
    if (comm->blocking()) {
      const int queued = QueueGroup(comm, stream, std::move(batch.second));
      if (queued != kNcclSuccess) result = queued;
      continue;
    }
    comm->Defer([comm, stream, transfers = std::move(batch.second)]() mutable {
      std::this_thread::sleep_for(kDeferredQueueDelay);
      QueueGroup(comm, stream, std::move(transfers));
    });
    if (result == kNcclSuccess) result = kNcclInProgress;
  }
  return result;
}

// Validates one ncclSend or ncclRecv and adds it to the thread's group (a group of its own outside one).
int Post(const char* call, bool send, const void* buffer, size_t count, int datatype, int peer, void* handle,
         void* stream) {
  const std::string where = std::string(call) + ": ";
  std::shared_ptr<Communicator> comm = Communicators().Find(handle);
  if (!comm) return Reject(kNcclInvalidArgument, where + "not a live communicator");
  std::string why;
  const int usable = comm->Usable(&why);
  if (usable != kNcclSuccess) return Reject(usable, where + why);
  if (datatype != kNcclChar) {
    return Reject(kNcclInvalidArgument,
                  where + "datatype " + std::to_string(datatype) + " is not simulated (only ncclChar, 0)");
  }
  if (peer < 0 || peer >= comm->nranks()) {
    return Reject(kNcclInvalidArgument,
                  where + "peer " + std::to_string(peer) + " is outside " + std::to_string(comm->nranks()) + " ranks");
  }
  int stream_device = -1;
  if (StreamDevice(stream, &stream_device) != kCudaSuccess)
    return Reject(kNcclInvalidArgument, where + "not a live stream");
  if (stream_device != comm->device()) {
    return Reject(kNcclInvalidArgument, where + "the stream is on device " + std::to_string(stream_device) +
                                            ", the communicator on device " + std::to_string(comm->device()));
  }
  if (count == 0) return kNcclSuccess;
  CudaPointerAttributes attributes{};
  char* shadow = nullptr;
  if (cudaPointerGetAttributes(&attributes, buffer) != kCudaSuccess || attributes.type != kCudaMemoryTypeDevice) {
    return Reject(kNcclInvalidArgument, where + "buffer is not device memory");
  }
  if (TranslateDeviceRange(buffer, count, &shadow) != kCudaSuccess) {
    return Reject(kNcclInvalidArgument, where + std::to_string(count) + " bytes overrun the buffer's allocation");
  }
  if (attributes.device != comm->device()) {
    return Reject(kNcclInvalidArgument, where + "buffer is on device " + std::to_string(attributes.device) +
                                            ", the communicator on device " + std::to_string(comm->device()));
  }
  const bool implicit_group = t_group.depth == 0;
  if (implicit_group) ncclGroupStart();
  t_group.transfers.push_back({comm, stream, Transfer{send, peer, buffer, count}});
  return implicit_group ? ncclGroupEnd() : kNcclSuccess;
}

// Records a failure inside a group, so ncclGroupEnd reports it too.
int InGroup(int result) {
  if (result != kNcclSuccess && t_group.depth > 0 && t_group.first_error == kNcclSuccess) t_group.first_error = result;
  return result;
}

}  // namespace
}  // namespace simgpu

using namespace simgpu;  // NOLINT: the C entry points below are thin wrappers over the simulator

extern "C" {

int ncclGetUniqueId(NcclUniqueId* id) {
  if (id == nullptr) return Reject(kNcclInvalidArgument, "ncclGetUniqueId: null id");
  unsigned char random[kSessionHexDigits / 2];
  if (getrandom(random, sizeof(random), 0) != static_cast<ssize_t>(sizeof(random))) {
    return Reject(kNcclSystemError, "ncclGetUniqueId: getrandom failed");
  }
  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, kIdMarker, sizeof(kIdMarker));
  char* session = id->internal + sizeof(kIdMarker);
  for (size_t i = 0; i < sizeof(random); ++i) std::snprintf(session + 2 * i, 3, "%02x", random[i]);
  return kNcclSuccess;
}

int ncclCommInitRankConfig(void** comm, int nranks, NcclUniqueId id, int rank, NcclConfig* config) {
  if (comm == nullptr) return Reject(kNcclInvalidArgument, "ncclCommInitRankConfig: null communicator pointer");
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return Reject(kNcclInvalidArgument,
                  "ncclCommInitRankConfig: rank " + std::to_string(rank) + " of " + std::to_string(nranks) + " ranks");
  }
  if (std::memcmp(id.internal, kIdMarker, sizeof(kIdMarker)) != 0) {
    return Reject(kNcclInvalidArgument, "ncclCommInitRankConfig: the unique id was not made by ncclGetUniqueId");
  }
  bool blocking = true;
  if (config != nullptr) {
    if (config->magic != kNcclConfigMagic || config->size < sizeof(NcclConfig)) {
      return Reject(kNcclInvalidArgument,
                    "ncclCommInitRankConfig: config was not initialised with NCCL_CONFIG_INITIALIZER");
    }
    blocking = config->blocking != 0;
  }
  const std::string session(id.internal + sizeof(kIdMarker), kSessionHexDigits);
  auto created = std::make_shared<Communicator>(session, rank, nranks, CurrentDevice(), blocking);
  *comm = Communicators().Add(created);
  const int started = created->Start();
  return started == kNcclSuccess || started == kNcclInProgress ? started : Reject(started, created->LastError());
}

int ncclCommFinalize(void* comm) {
  std::shared_ptr<Communicator> found = Communicators().Find(comm);
  if (!found) return Reject(kNcclInvalidArgument, "ncclCommFinalize: not a live communicator");
  return found->Finalize();
}

int ncclCommDestroy(void* comm) {
  std::shared_ptr<Communicator> found = Communicators().Remove(comm);
  if (!found) return Reject(kNcclInvalidArgument, "ncclCommDestroy: not a live communicator");
  found->WaitIdle();
  found->Close();
  return kNcclSuccess;
}

int ncclCommAbort(void* comm) {
  std::shared_ptr<Communicator> found = Communicators().Remove(comm);
  if (!found) return Reject(kNcclInvalidArgument, "ncclCommAbort: not a live communicator");
  found->Abort();
  return kNcclSuccess;
}

int ncclCommGetAsyncError(void* comm, int* async_error) {
  std::shared_ptr<Communicator> found = Communicators().Find(comm);
  if (!found || async_error == nullptr) return Reject(kNcclInvalidArgument, "ncclCommGetAsyncError: bad argument");
  *async_error = found->AsyncError();
  return kNcclSuccess;
}

const char* ncclGetErrorString(int result) {
  switch (result) {
    case kNcclSuccess:
      return "no error";
    case kNcclUnhandledCudaError:
      return "unhandled cuda error";
    case kNcclSystemError:
      return "unhandled system error";
    case kNcclInternalError:
      return "internal error";
    case kNcclInvalidArgument:
      return "invalid argument";
    case kNcclInvalidUsage:
      return "invalid usage";
    case kNcclRemoteError:
      return "remote process exited or there was a network error";
    case kNcclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(void* comm) {
  thread_local std::string text;
  std::shared_ptr<Communicator> found = Communicators().Find(comm);
  text = found ? found->LastError() : std::string();
  if (text.empty()) {
    LastError& last = ProcessLastError();
    std::lock_guard<std::mutex> lock(last.mutex);
    text = last.message;
  }
  return text.c_str();
}

int ncclGroupStart() {
  ++t_group.depth;
  return kNcclSuccess;
}

int ncclGroupEnd() {
  if (t_group.depth == 0) return Reject(kNcclInvalidUsage, "ncclGroupEnd: no group was started");
  if (--t_group.depth > 0) return kNcclSuccess;
  std::vector<PendingTransfer> pending = std::move(t_group.transfers);
  t_group.transfers.clear();
  const int failed = std::exchange(t_group.first_error, kNcclSuccess);
  return failed != kNcclSuccess ? failed : LaunchGroup(std::move(pending));
}

int ncclSend(const void* buffer, size_t count, int datatype, int peer, void* comm, void* stream) {
  return InGroup(Post("ncclSend", true, buffer, count, datatype, peer, comm, stream));
}

int ncclRecv(void* buffer, size_t count, int datatype, int peer, void* comm, void* stream) {
  return InGroup(Post("ncclRecv", false, buffer, count, datatype, peer, comm, stream));
}

}  // extern "C"

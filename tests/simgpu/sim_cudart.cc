// libcudart.so.13 stand-in: the CUDA runtime calls ckpt resolves (gpu/cuda_runtime.cc), over simulated devices whose
// memory the host cannot touch (tests/simgpu/sim_memory.h) and streams that run their work later, on a thread of
// their own (tests/simgpu/sim_stream.h). Copies to and from pinned host memory are asynchronous; as in CUDA, a copy
// from pageable memory reads its source before returning and a copy to pageable memory has completed on return.
#include <pthread.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/simgpu/sim_config.h"
#include "tests/simgpu/sim_cuda_api.h"
#include "tests/simgpu/sim_cuda_internal.h"
#include "tests/simgpu/sim_memory.h"
#include "tests/simgpu/sim_stream.h"

namespace simgpu {
namespace {

thread_local int t_device = 0;
thread_local int t_last_error = kCudaSuccess;
std::atomic<bool> g_initialized{false};
std::atomic<bool> g_forked_after_init{false};

// As in CUDA, a child forked from a process that has used the runtime cannot use it: every call fails with
// cudaErrorInitializationError. Registered when the library loads.
[[maybe_unused]] const int g_fork_watch = pthread_atfork(nullptr, nullptr, [] {
  if (g_initialized.load()) g_forked_after_init.store(true);
});

// Every call's result passes here, so cudaGetLastError sees the thread's last failure.
int Record(int error) {
  if (error != kCudaSuccess) t_last_error = error;
  return error;
}

// Checked at the start of each call that needs a device.
int Enter() {
  if (g_forked_after_init.load()) return kCudaErrorInitializationError;
  g_initialized.store(true);
  return DeviceCount() == 0 ? kCudaErrorNoDevice : kCudaSuccess;
}

enum class Side { kHost, kDevice };

struct CopyPlan {
  void* dst;
  const void* src;
  size_t size;
  Side dst_side;
  Side src_side;
  const char* direction;  // for the trace
};

Side SideOf(const void* ptr) {
  Allocation allocation;
  return MemoryRegistry::Get().Find(ptr, &allocation) ? Side::kDevice : Side::kHost;
}

// A device range must lie inside one allocation; a host range must not reach into any.
int CheckSide(const void* ptr, size_t size, Side side) {
  if (ptr == nullptr) return kCudaErrorInvalidValue;
  if (side == Side::kDevice) {
    char* shadow = nullptr;
    return MemoryRegistry::Get().Translate(ptr, size, &shadow);
  }
  return MemoryRegistry::Get().OverlapsDevice(ptr, size) ? kCudaErrorInvalidValue : kCudaSuccess;
}

// Checks that the pointers are what `kind` says they are, as CUDA refuses a copy in the wrong direction.
int PlanCopy(void* dst, const void* src, size_t size, int kind, CopyPlan* plan) {
  static const char* const kDirections[] = {"H2H", "H2D", "D2H", "D2D"};
  Side dst_side;
  Side src_side;
  switch (kind) {
    case kCudaMemcpyHostToHost:
    case kCudaMemcpyHostToDevice:
    case kCudaMemcpyDeviceToHost:
    case kCudaMemcpyDeviceToDevice:
      dst_side = (kind & 1) ? Side::kDevice : Side::kHost;
      src_side = (kind & 2) ? Side::kDevice : Side::kHost;
      break;
    case kCudaMemcpyDefault:
      dst_side = SideOf(dst);
      src_side = SideOf(src);
      break;
    default:
      return kCudaErrorInvalidValue;
  }
  const int direction = (src_side == Side::kDevice ? 2 : 0) + (dst_side == Side::kDevice ? 1 : 0);
  *plan = CopyPlan{dst, src, size, dst_side, src_side, kDirections[direction]};
  const int dst_checked = CheckSide(dst, size, dst_side);
  return dst_checked != kCudaSuccess ? dst_checked : CheckSide(src, size, src_side);
}

// Where the bytes of `side` memory at `ptr` really are, looked up again when the copy runs: memory freed since the
// copy was queued is an illegal address, as on a device.
char* Resolve(const void* ptr, size_t size, Side side) {
  if (side == Side::kHost) return static_cast<char*>(const_cast<void*>(ptr));
  char* shadow = nullptr;
  return MemoryRegistry::Get().Translate(ptr, size, &shadow) == kCudaSuccess ? shadow : nullptr;
}

// The stream operation that moves the bytes; a pageable source was read into `snapshot` when the copy was queued.
StreamOperation CopyOperation(const CopyPlan& plan, std::shared_ptr<const std::vector<char>> snapshot) {
  return [plan, snapshot = std::move(snapshot)]() -> int {
    char* to = Resolve(plan.dst, plan.size, plan.dst_side);
    const char* from = snapshot ? snapshot->data() : Resolve(plan.src, plan.size, plan.src_side);
    if (to == nullptr || from == nullptr) return kCudaErrorIllegalAddress;
    std::memmove(to, from, plan.size);
    return kCudaSuccess;
  };
}

// Queues `operation` and waits for it; its result is returned to the caller rather than left on the stream.
int RunAndWait(Stream& stream, StreamOperation operation) {
  auto result = std::make_shared<int>(kCudaSuccess);
  const uint64_t sequence = stream.Enqueue([operation = std::move(operation), result] {
    *result = operation();
    return kCudaSuccess;
  });
  stream.WaitFor(sequence);
  return *result;
}

int CopyOnStream(void* dst, const void* src, size_t size, int kind, Stream& stream, bool asynchronous) {
  if (size == 0) return kCudaSuccess;
  CopyPlan plan;
  const int planned = PlanCopy(dst, src, size, kind, &plan);
  if (planned != kCudaSuccess) return planned;
  Trace(std::string(asynchronous ? "memcpyAsync " : "memcpy ") + plan.direction + " " + std::to_string(size));
  MemoryRegistry& memory = MemoryRegistry::Get();
  std::shared_ptr<const std::vector<char>> snapshot;
  if (plan.src_side == Side::kHost && !memory.IsPinned(src, size)) {
    const char* bytes = static_cast<const char*>(src);
    snapshot = std::make_shared<const std::vector<char>>(bytes, bytes + size);
  }
  const bool waits = !asynchronous || (plan.dst_side == Side::kHost && !memory.IsPinned(dst, size));
  if (waits) return RunAndWait(stream, CopyOperation(plan, std::move(snapshot)));
  stream.Enqueue(CopyOperation(plan, std::move(snapshot)));
  return kCudaSuccess;
}

const char* ErrorName(int error) {
  switch (error) {
    case kCudaSuccess:
      return "cudaSuccess";
    case kCudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case kCudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case kCudaErrorInitializationError:
      return "cudaErrorInitializationError";
    case kCudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case kCudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case kCudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case kCudaErrorNotReady:
      return "cudaErrorNotReady";
    case kCudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    case kCudaErrorHostMemoryAlreadyRegistered:
      return "cudaErrorHostMemoryAlreadyRegistered";
    case kCudaErrorHostMemoryNotRegistered:
      return "cudaErrorHostMemoryNotRegistered";
    case kCudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    default:
      return "unrecognized error code";
  }
}

}  // namespace

int EnqueueOnStream(void* stream, StreamOperation operation) {
  std::shared_ptr<Stream> target = StreamRegistry::Get().Find(stream, t_device);
  if (!target) return kCudaErrorInvalidResourceHandle;
  target->Enqueue(std::move(operation));
  return kCudaSuccess;
}

int StreamDevice(void* stream, int* device) {
  std::shared_ptr<Stream> found = StreamRegistry::Get().Find(stream, t_device);
  if (!found) return kCudaErrorInvalidResourceHandle;
  *device = found->device();
  return kCudaSuccess;
}

int TranslateDeviceRange(const void* device, size_t size, char** shadow) {
  return MemoryRegistry::Get().Translate(device, size, shadow);
}

int CurrentDevice() { return t_device; }

}  // namespace simgpu

using namespace simgpu;  // NOLINT: the C entry points below are thin wrappers over the simulator

// Evaluates the entry check, recording and returning its failure.
#define SIMGPU_ENTER()                                   \
  do {                                                   \
    const int entered = Enter();                         \
    if (entered != kCudaSuccess) return Record(entered); \
  } while (0)

extern "C" {

int cudaGetDeviceCount(int* count) {
  if (count == nullptr) return Record(kCudaErrorInvalidValue);
  *count = 0;
  SIMGPU_ENTER();
  *count = DeviceCount();
  return kCudaSuccess;
}

int cudaSetDevice(int device) {
  SIMGPU_ENTER();
  if (device < 0 || device >= DeviceCount()) return Record(kCudaErrorInvalidDevice);
  t_device = device;
  return kCudaSuccess;
}

int cudaGetDevice(int* device) {
  SIMGPU_ENTER();
  if (device == nullptr) return Record(kCudaErrorInvalidValue);
  *device = t_device;
  return kCudaSuccess;
}

int cudaStreamCreateWithFlags(void** stream, unsigned flags) {
  SIMGPU_ENTER();
  if (stream == nullptr || (flags & ~kCudaStreamNonBlocking) != 0) return Record(kCudaErrorInvalidValue);
  *stream = StreamRegistry::Get().Create(t_device);
  return kCudaSuccess;
}

int cudaStreamDestroy(void* stream) {
  SIMGPU_ENTER();
  return Record(StreamRegistry::Get().Destroy(stream));
}

int cudaStreamSynchronize(void* stream) {
  SIMGPU_ENTER();
  std::shared_ptr<Stream> target = StreamRegistry::Get().Find(stream, t_device);
  return Record(target ? target->Synchronize() : kCudaErrorInvalidResourceHandle);
}

int cudaStreamQuery(void* stream) {
  SIMGPU_ENTER();
  std::shared_ptr<Stream> target = StreamRegistry::Get().Find(stream, t_device);
  return Record(target ? target->Query() : kCudaErrorInvalidResourceHandle);
}

int cudaMemcpyAsync(void* dst, const void* src, size_t size, int kind, void* stream) {
  SIMGPU_ENTER();
  std::shared_ptr<Stream> target = StreamRegistry::Get().Find(stream, t_device);
  if (!target) return Record(kCudaErrorInvalidResourceHandle);
  return Record(CopyOnStream(dst, src, size, kind, *target, /*asynchronous=*/true));
}

int cudaMemcpy(void* dst, const void* src, size_t size, int kind) {
  SIMGPU_ENTER();
  std::shared_ptr<Stream> legacy = StreamRegistry::Get().Find(nullptr, t_device);
  return Record(CopyOnStream(dst, src, size, kind, *legacy, /*asynchronous=*/false));
}

int cudaHostRegister(void* ptr, size_t size, unsigned flags) {
  SIMGPU_ENTER();
  if ((flags & ~kCudaHostRegisterKnownFlags) != 0) return Record(kCudaErrorInvalidValue);
  return Record(MemoryRegistry::Get().RegisterHost(ptr, size));
}

int cudaHostUnregister(void* ptr) {
  SIMGPU_ENTER();
  return Record(MemoryRegistry::Get().UnregisterHost(ptr));
}

int cudaPointerGetAttributes(CudaPointerAttributes* attributes, const void* ptr) {
  SIMGPU_ENTER();
  if (attributes == nullptr) return Record(kCudaErrorInvalidValue);
  void* address = const_cast<void*>(ptr);
  Allocation allocation;
  if (MemoryRegistry::Get().Find(ptr, &allocation)) {
    *attributes = CudaPointerAttributes{kCudaMemoryTypeDevice, allocation.device, address, nullptr};
  } else if (MemoryRegistry::Get().IsPinned(ptr, 0)) {
    *attributes = CudaPointerAttributes{kCudaMemoryTypeHost, t_device, address, address};
  } else {
    *attributes = CudaPointerAttributes{kCudaMemoryTypeUnregistered, -2, nullptr, nullptr};
  }
  return kCudaSuccess;
}

const char* cudaGetErrorString(int error) { return ErrorName(error); }

int cudaGetLastError() { return std::exchange(t_last_error, kCudaSuccess); }

int cudaMalloc(void** ptr, size_t size) {
  SIMGPU_ENTER();
  if (ptr == nullptr) return Record(kCudaErrorInvalidValue);
  Trace("malloc " + std::to_string(size));
  *ptr = nullptr;
  if (size == 0) return kCudaSuccess;
  return Record(MemoryRegistry::Get().Allocate(t_device, size, ptr));
}

int cudaFree(void* ptr) {
  SIMGPU_ENTER();
  if (ptr == nullptr) return kCudaSuccess;
  Allocation allocation;
  if (!MemoryRegistry::Get().Find(ptr, &allocation)) return Record(kCudaErrorInvalidValue);
  // cudaFree synchronises the device first: work queued before the free still sees the memory.
  StreamRegistry::Get().DrainAll();
  return Record(MemoryRegistry::Get().Free(ptr));
}

}  // extern "C"

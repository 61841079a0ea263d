// What the simulated CUDA runtime (libcudart.so.13 stand-in) exports beyond CUDA's own calls, for the simulated
// NCCL linked against it: both libraries share one process-wide registry of allocations and streams.
#pragma once

#include <cstddef>
#include <functional>

#include "tests/simgpu/sim_cuda_api.h"

namespace simgpu {

// Work queued on a stream: runs on the stream's thread after everything queued before it, and returns a
// CudaError; the first failure of a stream is what its next synchronize (or query, once drained) reports.
using StreamOperation = std::function<int()>;

// Queues `operation` on `stream` (null: the default stream). kCudaErrorInvalidResourceHandle for an unknown stream.
SIMGPU_EXPORT int EnqueueOnStream(void* stream, StreamOperation operation);

// The simulator's read-write view of the device range [device, device + size): kCudaErrorInvalidValue unless the
// whole range lies inside one live allocation. The view stays valid until that allocation is freed.
SIMGPU_EXPORT int TranslateDeviceRange(const void* device, size_t size, char** shadow);

// The device `stream` was created on (null: the calling thread's default stream, on its current device).
// kCudaErrorInvalidResourceHandle for an unknown stream.
SIMGPU_EXPORT int StreamDevice(void* stream, int* device);

// The device current on the calling thread.
SIMGPU_EXPORT int CurrentDevice();

}  // namespace simgpu

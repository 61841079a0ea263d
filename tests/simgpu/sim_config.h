// The simulator's settings, read from the environment once per process, with their defaults:
//   CKPT_SIMGPU_DEVICES       number of devices (default 2; 0: cudaGetDeviceCount fails with cudaErrorNoDevice)
//   CKPT_SIMGPU_DEVICE_BYTES  memory per device (default 16 GiB; pages are only backed once written)
//   CKPT_SIMGPU_OP_DELAY_US   pause before each stream operation, so unsynchronised reads see stale data (200)
//   CKPT_SIMGPU_TRACE         file that gets one line per cudaMalloc, cudaMemcpy* and NCCL group (unset: none)
//   CKPT_SIMGPU_NCCL_CONNECT_TIMEOUT_MS  how long a simulated NCCL rank waits for a peer to connect (30000)
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace simgpu {

int DeviceCount();
size_t DeviceCapacityBytes();
std::chrono::microseconds OperationDelay();
std::chrono::milliseconds ConnectTimeout();

// Appends `line` and a newline to the trace file when CKPT_SIMGPU_TRACE is set.
void Trace(const std::string& line);

}  // namespace simgpu

// Copies between host memory and the CUDA device memory of shards that live on a GPU: queued on a stream of the
// shard's device and waited for once per batch (a staged window, a delivered read). The CUDA runtime is loaded at
// run time (gpu/cuda_runtime.h), so none of this is needed where no GPU is used.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "common/status.h"
#include "gpu/cuda_runtime.h"

namespace ckpt::gpu {

class DeviceCopier {
 public:
  // Queues a copy on `device`'s stream (created on first use).
  Status ToHost(int device, void* host, const void* device_memory, uint64_t size);
  Status ToDevice(int device, void* device_memory, const void* host, uint64_t size);
  Status WithinDevice(int device, void* dst, const void* src, uint64_t size);
  // Waits for every queued copy.
  Status Wait();

 private:
  // Queues one copy on `device`'s stream with `device` current, as CUDA expects of a stream's work.
  template <typename Enqueue>
  Status Queue(int device, Enqueue&& enqueue);

  std::map<int, ScopedCudaStream> streams_;
};

// kUnsupported (with CUDA's reason) unless the CUDA runtime loads, a device exists, and `data` is device memory.
Status CheckDeviceShard(const void* data, int device, const std::string& key);

}  // namespace ckpt::gpu

// Copies between host memory and the CUDA device memory of shards that live on a GPU: queued on a stream of the
// shard's device and waited for once per batch (a staged window, a delivered read). The CUDA runtime is loaded at
// run time (io/cuda_runtime.h), so none of this is needed where no GPU is used.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "common/status.h"
#include "io/cuda_runtime.h"

namespace ckpt::runtime {

class DeviceCopier {
 public:
  // Queues a copy on `device`'s stream (created on first use).
  Status ToHost(int device, void* host, const void* device_memory, uint64_t size);
  Status ToDevice(int device, void* device_memory, const void* host, uint64_t size);
  // Waits for every queued copy.
  Status Wait();

 private:
  Result<io::CudaStream> StreamFor(int device);

  std::map<int, io::ScopedCudaStream> streams_;
};

// kUnsupported (with CUDA's reason) unless the CUDA runtime loads, a device exists, and `data` is device memory.
Status CheckDeviceShard(const void* data, int device, const std::string& key);

}  // namespace ckpt::runtime

#include "gpu/device_copy.h"

#include <string>

namespace ckpt::gpu {

template <typename Enqueue>
Status DeviceCopier::Queue(int device, Enqueue&& enqueue) {
  ASSIGN_OR_RETURN(CudaRuntime * cuda, CudaRuntime::Get());
  ScopedCudaDevice on_device(*cuda, device);
  RETURN_IF_ERROR(on_device.status());
  auto it = streams_.find(device);
  if (it == streams_.end()) {
    ASSIGN_OR_RETURN(ScopedCudaStream stream, ScopedCudaStream::Create(*cuda, device));
    it = streams_.emplace(device, std::move(stream)).first;
  }
  return enqueue(*cuda, it->second.get());
}

Status DeviceCopier::ToHost(int device, void* host, const void* device_memory, uint64_t size) {
  return Queue(device, [&](const CudaRuntime& cuda, CudaStream stream) {
    return cuda.CopyDeviceToHostAsync(host, device_memory, size, stream);
  });
}

Status DeviceCopier::ToDevice(int device, void* device_memory, const void* host, uint64_t size) {
  return Queue(device, [&](const CudaRuntime& cuda, CudaStream stream) {
    return cuda.CopyHostToDeviceAsync(device_memory, host, size, stream);
  });
}

Status DeviceCopier::WithinDevice(int device, void* dst, const void* src, uint64_t size) {
  return Queue(device, [&](const CudaRuntime& cuda, CudaStream stream) {
    return cuda.CopyDeviceToDeviceAsync(dst, src, size, stream);
  });
}

Status DeviceCopier::Wait() {
  if (streams_.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(CudaRuntime * cuda, CudaRuntime::Get());
  for (auto& [device, stream] : streams_) RETURN_IF_ERROR(cuda->Synchronize(stream.get()));
  return Status::Ok();
}

Status CheckDeviceShard(const void* data, int device, const std::string& key) {
  Result<CudaRuntime*> cuda = CudaRuntime::Get();
  if (!cuda.ok()) {
    return Unsupported("tensor '" + key + "' is in CUDA memory, but " + cuda.status().message());
  }
  ASSIGN_OR_RETURN(int devices, (*cuda)->DeviceCount());
  if (device < 0 || device >= devices) {
    return InvalidArgument("tensor '" + key + "': CUDA device " + std::to_string(device) + " does not exist (" +
                           std::to_string(devices) + " devices)");
  }
  if (data != nullptr && !(*cuda)->IsDevicePointer(data)) {
    return InvalidArgument("tensor '" + key + "': memory_kind is CUDA but data is not device memory");
  }
  return Status::Ok();
}

}  // namespace ckpt::gpu

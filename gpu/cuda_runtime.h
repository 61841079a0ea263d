// The CUDA runtime, loaded at run time with dlopen so that libckpt builds and loads on machines without CUDA. Only
// the handful of calls ckpt needs are resolved; their types are declared here, not taken from the CUDA headers,
// which are not a build dependency. A failed call is kIo (kNoMemory when memory runs out) naming the CUDA call and
// carrying CUDA's own error string.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace ckpt::gpu {

// A cudaStream_t, opaque here.
using CudaStream = void*;

class CudaRuntime {
 public:
  // The sonames tried in order by Get(): the current major version first, then the previous one, then the
  // unversioned development link.
  static const std::vector<std::string>& DefaultLibraryNames();

  // The process's runtime, loaded and probed once (thread-safe) and kept for the life of the process.
  // kUnsupported "CUDA runtime not found (...)" when no library loads, or "no CUDA device: ..." when it loads but
  // sees no device.
  static Result<CudaRuntime*> Get();

  // Loads the first of `library_names` that dlopen accepts and resolves every call. Does not probe for devices.
  // kUnsupported naming the libraries tried, or the call a library lacks. Get() is the normal entry point.
  static Result<std::unique_ptr<CudaRuntime>> Load(const std::vector<std::string>& library_names);

  ~CudaRuntime();
  CudaRuntime(const CudaRuntime&) = delete;
  CudaRuntime& operator=(const CudaRuntime&) = delete;

  // The soname that was loaded.
  const std::string& library() const { return library_; }

  Result<int> DeviceCount() const;

  // Streams are created on `device` without changing the calling thread's current device. They are non-blocking:
  // they do not wait for the legacy default stream, so staging never stalls behind the trainer's kernels.
  Result<CudaStream> CreateStream(int device) const;
  Status DestroyStream(CudaStream stream) const;
  Status Synchronize(CudaStream stream) const;
  // True when all work queued on `stream` has finished, false while some is pending; a failed stream is an error.
  Result<bool> StreamIdle(CudaStream stream) const;

  Status CopyDeviceToHostAsync(void* dst, const void* src, uint64_t size, CudaStream stream) const;
  Status CopyHostToDeviceAsync(void* dst, const void* src, uint64_t size, CudaStream stream) const;
  Status CopyDeviceToDeviceAsync(void* dst, const void* src, uint64_t size, CudaStream stream) const;
  // A synchronous copy in whichever direction the pointers imply (unified addressing); for tests and small copies.
  Status Copy(void* dst, const void* src, uint64_t size) const;

  // Pins host memory for every device (portable), so asynchronous copies to and from it run at full speed and
  // without an intermediate bounce buffer.
  Status RegisterHost(void* ptr, uint64_t size) const;
  Status UnregisterHost(void* ptr) const;

  // True for device and managed memory; false for host memory, registered or not, and for pointers CUDA rejects.
  bool IsDevicePointer(const void* ptr) const;

  Result<void*> Malloc(int device, uint64_t size) const;
  Status Free(void* ptr) const;

  // The device current on the calling thread, and a way to change it; see ScopedCudaDevice.
  Result<int> CurrentDevice() const;
  Status SetDevice(int device) const;

 private:
  struct Api;
  CudaRuntime(void* handle, std::string library, std::unique_ptr<Api> api);
  // Ok, or kIo (kNoMemory for an allocation) with "cudaMemcpyAsync: invalid argument (error 1)".
  Status Check(const char* call, int error) const;
  std::string ErrorText(const char* call, int error) const;

  void* handle_;
  std::string library_;
  std::unique_ptr<Api> api_;
};

// Makes `device` current on the calling thread for the guard's lifetime and then restores the previous device, so
// ckpt never leaves a trainer's thread on another GPU. Check status() before relying on the switch.
class ScopedCudaDevice {
 public:
  ScopedCudaDevice(const CudaRuntime& cuda, int device);
  ~ScopedCudaDevice();
  ScopedCudaDevice(const ScopedCudaDevice&) = delete;
  ScopedCudaDevice& operator=(const ScopedCudaDevice&) = delete;

  const Status& status() const { return status_; }

 private:
  const CudaRuntime& cuda_;
  int previous_ = -1;
  Status status_;
};

// A stream owned for its lifetime: destroyed (after its queued work completes) when the owner goes away.
class ScopedCudaStream {
 public:
  static Result<ScopedCudaStream> Create(const CudaRuntime& cuda, int device);
  ScopedCudaStream() = default;  // owns no stream
  ScopedCudaStream(ScopedCudaStream&& other) noexcept;
  ScopedCudaStream& operator=(ScopedCudaStream&& other) noexcept;
  ~ScopedCudaStream();

  CudaStream get() const { return stream_; }
  int device() const { return device_; }

 private:
  ScopedCudaStream(const CudaRuntime* cuda, CudaStream stream, int device)
      : cuda_(cuda), stream_(stream), device_(device) {}
  void Reset();

  const CudaRuntime* cuda_ = nullptr;
  CudaStream stream_ = nullptr;
  int device_ = -1;
};

// Device memory owned for its lifetime: freed when the owner goes away. The caller makes sure no queued work still
// uses it (synchronises the streams that do) before then.
class ScopedDeviceMemory {
 public:
  static Result<ScopedDeviceMemory> Allocate(const CudaRuntime& cuda, int device, uint64_t size);
  ScopedDeviceMemory() = default;  // owns nothing
  ScopedDeviceMemory(ScopedDeviceMemory&& other) noexcept;
  ScopedDeviceMemory& operator=(ScopedDeviceMemory&& other) noexcept;
  ~ScopedDeviceMemory();

  char* get() const { return data_; }

 private:
  ScopedDeviceMemory(const CudaRuntime* cuda, char* data) : cuda_(cuda), data_(data) {}
  void Reset();

  const CudaRuntime* cuda_ = nullptr;
  char* data_ = nullptr;
};

}  // namespace ckpt::gpu

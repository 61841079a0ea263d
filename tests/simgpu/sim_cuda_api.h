// The C ABI of the CUDA runtime calls the simulator implements: exactly the calls ckpt resolves in
// gpu/cuda_runtime.cc (CudaRuntime::Load), with the types declared there and the error numbers of CUDA's
// driver_types.h. Shared by the simulator's definitions and its tests, so both agree on every signature.
#pragma once

#include <cstddef>

#define SIMGPU_EXPORT __attribute__((visibility("default")))

namespace simgpu {

// cudaError_t values (driver_types.h), stable across CUDA 11 to 13.
enum CudaError : int {
  kCudaSuccess = 0,
  kCudaErrorInvalidValue = 1,
  kCudaErrorMemoryAllocation = 2,
  kCudaErrorInitializationError = 3,
  kCudaErrorNoDevice = 100,
  kCudaErrorInvalidDevice = 101,
  kCudaErrorInvalidResourceHandle = 400,
  kCudaErrorNotReady = 600,
  kCudaErrorIllegalAddress = 700,
  kCudaErrorHostMemoryAlreadyRegistered = 712,
  kCudaErrorHostMemoryNotRegistered = 713,
  kCudaErrorLaunchFailure = 719,
};

// cudaMemcpyKind.
enum CudaMemcpyKind : int {
  kCudaMemcpyHostToHost = 0,
  kCudaMemcpyHostToDevice = 1,
  kCudaMemcpyDeviceToHost = 2,
  kCudaMemcpyDeviceToDevice = 3,
  kCudaMemcpyDefault = 4,
};

// cudaMemoryType.
enum CudaMemoryType : int {
  kCudaMemoryTypeUnregistered = 0,
  kCudaMemoryTypeHost = 1,
  kCudaMemoryTypeDevice = 2,
};

constexpr unsigned kCudaStreamNonBlocking = 0x01;
// cudaHostRegisterPortable | Mapped | IoMemory | ReadOnly: every flag CUDA 13 defines for cudaHostRegister.
constexpr unsigned kCudaHostRegisterKnownFlags = 0x0f;

// The leading fields of cudaPointerAttributes, the only ones the simulator writes (CUDA 13 appends reserved words).
struct CudaPointerAttributes {
  int type;
  int device;
  void* device_pointer;
  void* host_pointer;
};

}  // namespace simgpu

extern "C" {
SIMGPU_EXPORT int cudaGetDeviceCount(int* count);
SIMGPU_EXPORT int cudaSetDevice(int device);
SIMGPU_EXPORT int cudaGetDevice(int* device);
SIMGPU_EXPORT int cudaStreamCreateWithFlags(void** stream, unsigned flags);
SIMGPU_EXPORT int cudaStreamDestroy(void* stream);
SIMGPU_EXPORT int cudaStreamSynchronize(void* stream);
SIMGPU_EXPORT int cudaStreamQuery(void* stream);
SIMGPU_EXPORT int cudaMemcpyAsync(void* dst, const void* src, size_t size, int kind, void* stream);
SIMGPU_EXPORT int cudaMemcpy(void* dst, const void* src, size_t size, int kind);
SIMGPU_EXPORT int cudaHostRegister(void* ptr, size_t size, unsigned flags);
SIMGPU_EXPORT int cudaHostUnregister(void* ptr);
SIMGPU_EXPORT int cudaPointerGetAttributes(simgpu::CudaPointerAttributes* attributes, const void* ptr);
SIMGPU_EXPORT const char* cudaGetErrorString(int error);
SIMGPU_EXPORT int cudaGetLastError();
SIMGPU_EXPORT int cudaMalloc(void** ptr, size_t size);
SIMGPU_EXPORT int cudaFree(void* ptr);
}

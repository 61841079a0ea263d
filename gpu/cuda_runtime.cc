#include "gpu/cuda_runtime.h"

#include <dlfcn.h>

#include <cstddef>
#include <utility>

namespace ckpt::gpu {
namespace {

// Values from the CUDA runtime API (driver_types.h), stable across CUDA 11 to 13.
constexpr int kCudaSuccess = 0;
constexpr int kCudaErrorMemoryAllocation = 2;
constexpr int kCudaErrorNotReady = 600;
constexpr unsigned kCudaStreamNonBlocking = 0x01;
constexpr unsigned kCudaHostRegisterPortable = 0x01;
constexpr int kCudaMemcpyHostToDevice = 1;
constexpr int kCudaMemcpyDeviceToHost = 2;
constexpr int kCudaMemcpyDeviceToDevice = 3;
constexpr int kCudaMemcpyDefault = 4;
constexpr int kCudaMemoryTypeDevice = 2;
constexpr int kCudaMemoryTypeManaged = 3;

// cudaPointerAttributes: the four leading fields have kept their layout since CUDA 10; CUDA 13 appended reserved
// words, so the tail is sized generously for the runtime to write into.
struct CudaPointerAttributes {
  int type;
  int device;
  void* device_pointer;
  void* host_pointer;
  long reserved[32];
};

std::string JoinNames(const std::vector<std::string>& names) {
  std::string joined;
  for (const std::string& name : names) joined += (joined.empty() ? "" : ", ") + name;
  return joined;
}

std::string DlError() {
  const char* text = dlerror();
  return text ? text : "unknown dlopen error";
}

}  // namespace

// The resolved entry points; cudaError_t is an int-sized enum and the handles are pointers.
struct CudaRuntime::Api {
  int (*GetDeviceCount)(int*);
  int (*SetDevice)(int);
  int (*GetDevice)(int*);
  int (*StreamCreateWithFlags)(void**, unsigned);
  int (*StreamDestroy)(void*);
  int (*StreamSynchronize)(void*);
  int (*StreamQuery)(void*);
  int (*MemcpyAsync)(void*, const void*, size_t, int, void*);
  int (*Memcpy)(void*, const void*, size_t, int);
  int (*HostRegister)(void*, size_t, unsigned);
  int (*HostUnregister)(void*);
  int (*PointerGetAttributes)(CudaPointerAttributes*, const void*);
  const char* (*GetErrorString)(int);
  int (*GetLastError)();
  int (*Malloc)(void**, size_t);
  int (*Free)(void*);
};

namespace {

// Resolves `name` into `slot`, recording the first name the library lacks so one message can name it.
template <typename Fn>
void Resolve(void* handle, const char* name, Fn* slot, std::string* missing) {
  *slot = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*slot == nullptr && missing->empty()) *missing = name;
}

}  // namespace

const std::vector<std::string>& CudaRuntime::DefaultLibraryNames() {
  static const std::vector<std::string> kNames = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
  return kNames;
}

Result<std::unique_ptr<CudaRuntime>> CudaRuntime::Load(const std::vector<std::string>& library_names) {
  void* handle = nullptr;
  std::string loaded;
  std::string first_error;
  for (const std::string& name : library_names) {
    handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      loaded = name;
      break;
    }
    if (first_error.empty()) first_error = DlError();
  }
  if (handle == nullptr) {
    return Unsupported("CUDA runtime not found (" + JoinNames(library_names) + "): " + first_error);
  }
  auto api = std::make_unique<Api>();
  std::string missing;
  Resolve(handle, "cudaGetDeviceCount", &api->GetDeviceCount, &missing);
  Resolve(handle, "cudaSetDevice", &api->SetDevice, &missing);
  Resolve(handle, "cudaGetDevice", &api->GetDevice, &missing);
  Resolve(handle, "cudaStreamCreateWithFlags", &api->StreamCreateWithFlags, &missing);
  Resolve(handle, "cudaStreamDestroy", &api->StreamDestroy, &missing);
  Resolve(handle, "cudaStreamSynchronize", &api->StreamSynchronize, &missing);
  Resolve(handle, "cudaStreamQuery", &api->StreamQuery, &missing);
  Resolve(handle, "cudaMemcpyAsync", &api->MemcpyAsync, &missing);
  Resolve(handle, "cudaMemcpy", &api->Memcpy, &missing);
  Resolve(handle, "cudaHostRegister", &api->HostRegister, &missing);
  Resolve(handle, "cudaHostUnregister", &api->HostUnregister, &missing);
  Resolve(handle, "cudaPointerGetAttributes", &api->PointerGetAttributes, &missing);
  Resolve(handle, "cudaGetErrorString", &api->GetErrorString, &missing);
  Resolve(handle, "cudaGetLastError", &api->GetLastError, &missing);
  Resolve(handle, "cudaMalloc", &api->Malloc, &missing);
  Resolve(handle, "cudaFree", &api->Free, &missing);
  if (!missing.empty()) {
    dlclose(handle);
    return Unsupported("CUDA runtime " + loaded + " lacks " + missing);
  }
  return std::unique_ptr<CudaRuntime>(new CudaRuntime(handle, loaded, std::move(api)));
}

Result<CudaRuntime*> CudaRuntime::Get() {
  // Loaded once; never unloaded, because CUDA's own teardown at exit must find the library still mapped.
  static Result<CudaRuntime*> instance = []() -> Result<CudaRuntime*> {
    ASSIGN_OR_RETURN(std::unique_ptr<CudaRuntime> runtime, Load(DefaultLibraryNames()));
    Result<int> devices = runtime->DeviceCount();
    if (!devices.ok()) return Unsupported("no CUDA device: " + devices.status().message());
    if (*devices == 0) return Unsupported("no CUDA device: " + runtime->library() + " reports 0 devices");
    return runtime.release();
  }();
  return instance;
}

CudaRuntime::CudaRuntime(void* handle, std::string library, std::unique_ptr<Api> api)
    : handle_(handle), library_(std::move(library)), api_(std::move(api)) {}

CudaRuntime::~CudaRuntime() { dlclose(handle_); }

std::string CudaRuntime::ErrorText(const char* call, int error) const {
  const char* text = api_->GetErrorString(error);
  return std::string(call) + ": " + (text ? text : "unknown CUDA error") + " (error " + std::to_string(error) + ")";
}

Status CudaRuntime::Check(const char* call, int error) const {
  if (error == kCudaSuccess) return Status::Ok();
  // Clears the thread's last-error slot: a failure of ours must not surface later in the trainer's own check.
  api_->GetLastError();
  return Status(error == kCudaErrorMemoryAllocation ? Code::kNoMemory : Code::kIo, ErrorText(call, error));
}

Result<int> CudaRuntime::DeviceCount() const {
  int count = 0;
  RETURN_IF_ERROR(Check("cudaGetDeviceCount", api_->GetDeviceCount(&count)));
  return count;
}

Result<int> CudaRuntime::CurrentDevice() const {
  int device = -1;
  RETURN_IF_ERROR(Check("cudaGetDevice", api_->GetDevice(&device)));
  return device;
}

Status CudaRuntime::SetDevice(int device) const {
  return Check("cudaSetDevice", api_->SetDevice(device)).WithContext("device " + std::to_string(device));
}

Result<CudaStream> CudaRuntime::CreateStream(int device) const {
  ScopedCudaDevice on_device(*this, device);
  RETURN_IF_ERROR(on_device.status());
  CudaStream stream = nullptr;
  RETURN_IF_ERROR(Check("cudaStreamCreateWithFlags", api_->StreamCreateWithFlags(&stream, kCudaStreamNonBlocking))
                      .WithContext("device " + std::to_string(device)));
  return stream;
}

Status CudaRuntime::DestroyStream(CudaStream stream) const {
  return Check("cudaStreamDestroy", api_->StreamDestroy(stream));
}

Status CudaRuntime::Synchronize(CudaStream stream) const {
  return Check("cudaStreamSynchronize", api_->StreamSynchronize(stream));
}

Result<bool> CudaRuntime::StreamIdle(CudaStream stream) const {
  const int error = api_->StreamQuery(stream);
  if (error == kCudaErrorNotReady) {
    api_->GetLastError();
    return false;
  }
  RETURN_IF_ERROR(Check("cudaStreamQuery", error));
  return true;
}

Status CudaRuntime::CopyDeviceToHostAsync(void* dst, const void* src, uint64_t size, CudaStream stream) const {
  return Check("cudaMemcpyAsync", api_->MemcpyAsync(dst, src, size, kCudaMemcpyDeviceToHost, stream))
      .WithContext("copying " + std::to_string(size) + " bytes from device to host");
}

Status CudaRuntime::CopyHostToDeviceAsync(void* dst, const void* src, uint64_t size, CudaStream stream) const {
  return Check("cudaMemcpyAsync", api_->MemcpyAsync(dst, src, size, kCudaMemcpyHostToDevice, stream))
      .WithContext("copying " + std::to_string(size) + " bytes from host to device");
}

Status CudaRuntime::CopyDeviceToDeviceAsync(void* dst, const void* src, uint64_t size, CudaStream stream) const {
  return Check("cudaMemcpyAsync", api_->MemcpyAsync(dst, src, size, kCudaMemcpyDeviceToDevice, stream))
      .WithContext("copying " + std::to_string(size) + " bytes within device memory");
}

Status CudaRuntime::Copy(void* dst, const void* src, uint64_t size) const {
  return Check("cudaMemcpy", api_->Memcpy(dst, src, size, kCudaMemcpyDefault))
      .WithContext("copying " + std::to_string(size) + " bytes");
}

Status CudaRuntime::RegisterHost(void* ptr, uint64_t size) const {
  return Check("cudaHostRegister", api_->HostRegister(ptr, size, kCudaHostRegisterPortable))
      .WithContext("pinning " + std::to_string(size) + " bytes of host memory");
}

Status CudaRuntime::UnregisterHost(void* ptr) const { return Check("cudaHostUnregister", api_->HostUnregister(ptr)); }

bool CudaRuntime::IsDevicePointer(const void* ptr) const {
  CudaPointerAttributes attributes{};
  if (!Check("cudaPointerGetAttributes", api_->PointerGetAttributes(&attributes, ptr)).ok()) return false;
  return attributes.type == kCudaMemoryTypeDevice || attributes.type == kCudaMemoryTypeManaged;
}

Result<void*> CudaRuntime::Malloc(int device, uint64_t size) const {
  ScopedCudaDevice on_device(*this, device);
  RETURN_IF_ERROR(on_device.status());
  void* ptr = nullptr;
  RETURN_IF_ERROR(
      Check("cudaMalloc", api_->Malloc(&ptr, size))
          .WithContext("allocating " + std::to_string(size) + " bytes on device " + std::to_string(device)));
  return ptr;
}

Status CudaRuntime::Free(void* ptr) const { return Check("cudaFree", api_->Free(ptr)); }

ScopedCudaDevice::ScopedCudaDevice(const CudaRuntime& cuda, int device) : cuda_(cuda) {
  Result<int> current = cuda.CurrentDevice();
  if (!current.ok()) {
    status_ = current.status();
    return;
  }
  previous_ = *current;
  if (previous_ != device) status_ = cuda.SetDevice(device);
}

ScopedCudaDevice::~ScopedCudaDevice() {
  if (previous_ >= 0) (void)cuda_.SetDevice(previous_);
}

Result<ScopedCudaStream> ScopedCudaStream::Create(const CudaRuntime& cuda, int device) {
  ASSIGN_OR_RETURN(CudaStream stream, cuda.CreateStream(device));
  return ScopedCudaStream(&cuda, stream, device);
}

ScopedCudaStream::ScopedCudaStream(ScopedCudaStream&& other) noexcept
    : cuda_(std::exchange(other.cuda_, nullptr)),
      stream_(std::exchange(other.stream_, nullptr)),
      device_(std::exchange(other.device_, -1)) {}

ScopedCudaStream& ScopedCudaStream::operator=(ScopedCudaStream&& other) noexcept {
  if (this != &other) {
    Reset();
    cuda_ = std::exchange(other.cuda_, nullptr);
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

ScopedCudaStream::~ScopedCudaStream() { Reset(); }

void ScopedCudaStream::Reset() {
  if (cuda_ != nullptr && stream_ != nullptr) (void)cuda_->DestroyStream(stream_);
  stream_ = nullptr;
}

Result<ScopedDeviceMemory> ScopedDeviceMemory::Allocate(const CudaRuntime& cuda, int device, uint64_t size) {
  ASSIGN_OR_RETURN(void* data, cuda.Malloc(device, size));
  return ScopedDeviceMemory(&cuda, static_cast<char*>(data));
}

ScopedDeviceMemory::ScopedDeviceMemory(ScopedDeviceMemory&& other) noexcept
    : cuda_(std::exchange(other.cuda_, nullptr)), data_(std::exchange(other.data_, nullptr)) {}

ScopedDeviceMemory& ScopedDeviceMemory::operator=(ScopedDeviceMemory&& other) noexcept {
  if (this != &other) {
    Reset();
    cuda_ = std::exchange(other.cuda_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

ScopedDeviceMemory::~ScopedDeviceMemory() { Reset(); }

void ScopedDeviceMemory::Reset() {
  if (cuda_ != nullptr && data_ != nullptr) (void)cuda_->Free(data_);
  data_ = nullptr;
}

}  // namespace ckpt::gpu

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "gpu/cuda_runtime.h"

namespace ckpt::gpu {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kPageBytes = 4096;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Page-aligned host memory, so pinning covers exactly the buffer's pages; unpinned before it is freed.
struct HostBuffer {
  explicit HostBuffer(uint64_t size) : size(size), data(static_cast<char*>(std::aligned_alloc(kPageBytes, size))) {}
  ~HostBuffer() {
    if (pinned_by != nullptr) EXPECT_TRUE(pinned_by->UnregisterHost(data).ok());
    std::free(data);
  }
  bool Pin(const CudaRuntime& cuda) {
    Status status = cuda.RegisterHost(data, size);
    EXPECT_TRUE(status.ok()) << status.message();
    if (status.ok()) pinned_by = &cuda;
    return status.ok();
  }
  uint64_t size;
  char* data;
  const CudaRuntime* pinned_by = nullptr;
};

// Device memory freed when the test ends, whatever it asserted.
struct DeviceBuffer {
  DeviceBuffer(const CudaRuntime& cuda, uint64_t size) : cuda(cuda) {
    Result<void*> allocated = cuda.Malloc(0, size);
    EXPECT_TRUE(allocated.ok()) << allocated.status().message();
    if (allocated.ok()) data = *allocated;
  }
  ~DeviceBuffer() {
    if (data != nullptr) EXPECT_TRUE(cuda.Free(data).ok());
  }
  const CudaRuntime& cuda;
  void* data = nullptr;
};

// Tests that need a device skip, visibly and with the reason, where CUDA or a device is missing.
class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<CudaRuntime*> runtime = CudaRuntime::Get();
    if (!runtime.ok()) GTEST_SKIP() << runtime.status().message();
    cuda_ = *runtime;
  }
  CudaRuntime* cuda_ = nullptr;
};

TEST(CudaRuntimeTest, GetSucceedsOrExplainsWhatIsMissing) {
  Result<CudaRuntime*> runtime = CudaRuntime::Get();
  if (runtime.ok()) {
    ASSERT_NE(*runtime, nullptr);
    Result<int> devices = (*runtime)->DeviceCount();
    ASSERT_TRUE(devices.ok()) << devices.status().message();
    EXPECT_GT(*devices, 0);
    return;
  }
  EXPECT_EQ(runtime.status().code(), Code::kUnsupported);
  const std::string& message = runtime.status().message();
  EXPECT_TRUE(Contains(message, "CUDA runtime not found") || Contains(message, "no CUDA device")) << message;
}

TEST(CudaRuntimeTest, PresentLibraryWithoutDeviceSaysThereIsNoDevice) {
  Result<std::unique_ptr<CudaRuntime>> library = CudaRuntime::Load(CudaRuntime::DefaultLibraryNames());
  if (!library.ok()) GTEST_SKIP() << "needs the CUDA runtime library: " << library.status().message();
  Result<CudaRuntime*> runtime = CudaRuntime::Get();
  if (runtime.ok()) GTEST_SKIP() << "needs a machine without a CUDA device";
  EXPECT_EQ(runtime.status().code(), Code::kUnsupported);
  EXPECT_EQ(runtime.status().message().rfind("no CUDA device: cudaGetDeviceCount: ", 0), 0u)
      << runtime.status().message();
}

TEST(CudaRuntimeTest, MissingLibraryIsUnsupportedAndNamed) {
  Result<std::unique_ptr<CudaRuntime>> library = CudaRuntime::Load({"libckpt-test-no-such-cudart.so.0"});
  ASSERT_FALSE(library.ok());
  EXPECT_EQ(library.status().code(), Code::kUnsupported);
  EXPECT_TRUE(Contains(library.status().message(), "CUDA runtime not found (libckpt-test-no-such-cudart.so.0)"))
      << library.status().message();
}

TEST(CudaRuntimeTest, LibraryLackingACallIsUnsupportedAndNamesTheCall) {
  // The C library loads everywhere and exports no CUDA call.
  Result<std::unique_ptr<CudaRuntime>> library = CudaRuntime::Load({"libc.so.6"});
  ASSERT_FALSE(library.ok());
  EXPECT_EQ(library.status().code(), Code::kUnsupported);
  EXPECT_EQ(library.status().message(), "CUDA runtime libc.so.6 lacks cudaGetDeviceCount");
}

TEST_F(CudaDeviceTest, RoundTripThroughRegisteredHostBufferPreservesBytes) {
  const uint64_t size = 64 * kMiB;
  HostBuffer source(size);
  HostBuffer target(size);
  ASSERT_NE(source.data, nullptr);
  ASSERT_NE(target.data, nullptr);
  for (uint64_t i = 0; i < size; ++i) source.data[i] = static_cast<char>(i * 131 + (i >> 20));
  std::memset(target.data, 0, size);
  ASSERT_TRUE(source.Pin(*cuda_));
  ASSERT_TRUE(target.Pin(*cuda_));
  DeviceBuffer device(*cuda_, size);
  ASSERT_NE(device.data, nullptr);
  Result<ScopedCudaStream> stream = ScopedCudaStream::Create(*cuda_, 0);
  ASSERT_TRUE(stream.ok()) << stream.status().message();

  Status copied = cuda_->CopyHostToDeviceAsync(device.data, source.data, size, stream->get());
  ASSERT_TRUE(copied.ok()) << copied.message();
  copied = cuda_->CopyDeviceToHostAsync(target.data, device.data, size, stream->get());
  ASSERT_TRUE(copied.ok()) << copied.message();
  ASSERT_TRUE(cuda_->Synchronize(stream->get()).ok());

  EXPECT_EQ(std::memcmp(source.data, target.data, size), 0);
}

TEST_F(CudaDeviceTest, IsDevicePointerTellsDeviceFromHostMemory) {
  DeviceBuffer device(*cuda_, kMiB);
  ASSERT_NE(device.data, nullptr);
  HostBuffer host(kMiB);
  EXPECT_TRUE(cuda_->IsDevicePointer(device.data));
  EXPECT_FALSE(cuda_->IsDevicePointer(host.data));
  ASSERT_TRUE(host.Pin(*cuda_));
  EXPECT_FALSE(cuda_->IsDevicePointer(host.data));
}

TEST_F(CudaDeviceTest, StreamIsIdleAfterSynchronize) {
  DeviceBuffer device(*cuda_, 8 * kMiB);
  ASSERT_NE(device.data, nullptr);
  HostBuffer host(8 * kMiB);
  Result<ScopedCudaStream> stream = ScopedCudaStream::Create(*cuda_, 0);
  ASSERT_TRUE(stream.ok()) << stream.status().message();
  ASSERT_TRUE(cuda_->CopyDeviceToHostAsync(host.data, device.data, 8 * kMiB, stream->get()).ok());
  ASSERT_TRUE(cuda_->Synchronize(stream->get()).ok());
  Result<bool> idle = cuda_->StreamIdle(stream->get());
  ASSERT_TRUE(idle.ok()) << idle.status().message();
  EXPECT_TRUE(*idle);
}

TEST_F(CudaDeviceTest, FailedAllocationIsNoMemoryAndNamesTheCall) {
  Result<void*> allocated = cuda_->Malloc(0, 1ull << 60);
  ASSERT_FALSE(allocated.ok());
  EXPECT_EQ(allocated.status().code(), Code::kNoMemory);
  EXPECT_TRUE(Contains(allocated.status().message(), "cudaMalloc: ")) << allocated.status().message();
}

TEST_F(CudaDeviceTest, ScopedDeviceRestoresThePreviousDevice) {
  Result<int> before = cuda_->CurrentDevice();
  ASSERT_TRUE(before.ok());
  {
    ScopedCudaDevice on_device(*cuda_, 0);
    ASSERT_TRUE(on_device.status().ok()) << on_device.status().message();
    Result<int> during = cuda_->CurrentDevice();
    ASSERT_TRUE(during.ok());
    EXPECT_EQ(*during, 0);
  }
  Result<int> after = cuda_->CurrentDevice();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, *before);
}

TEST_F(CudaDeviceTest, SetDeviceOutOfRangeIsAnErrorNotACrash) {
  Result<int> devices = cuda_->DeviceCount();
  ASSERT_TRUE(devices.ok());
  Status status = cuda_->SetDevice(*devices);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "cudaSetDevice")) << status.message();
}

}  // namespace
}  // namespace ckpt::gpu

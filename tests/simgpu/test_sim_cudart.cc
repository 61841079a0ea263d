// The simulated CUDA runtime behaves as a device would where ckpt could get it wrong: device memory faults on host
// access, copies are checked for direction, asynchronous copies land later, and errors carry CUDA's numbers.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "tests/simgpu/sim_cuda_api.h"
#include "tests/simgpu/sim_cuda_internal.h"
#include "tests/simgpu/test_sim_support.h"

namespace simgpu {
namespace {

// Holds a stream behind an operation that waits until the gate opens: what is queued after it has certainly not run.
class StreamGate {
 public:
  explicit StreamGate(void* stream) {
    std::shared_future<void> opened = opened_.get_future().share();
    EXPECT_EQ(EnqueueOnStream(stream,
                              [opened] {
                                opened.wait();
                                return static_cast<int>(kCudaSuccess);
                              }),
              kCudaSuccess);
  }
  ~StreamGate() { Open(); }

  void Open() {
    if (!open_) opened_.set_value();
    open_ = true;
  }

 private:
  std::promise<void> opened_;
  bool open_ = false;
};

TEST(SimCudartTest, DeviceCountComesFromTheEnvironmentAndDefaultsToTwo) {
  const char* configured = std::getenv("CKPT_SIMGPU_DEVICES");
  int count = -1;
  ASSERT_EQ(cudaGetDeviceCount(&count), kCudaSuccess);
  EXPECT_EQ(count, configured ? std::atoi(configured) : 2);
}

TEST(SimCudartTest, SetDeviceOutOfRangeIsInvalidDeviceAndKeepsTheCurrentOne) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), kCudaSuccess);
  EXPECT_EQ(cudaSetDevice(count), kCudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(-1), kCudaErrorInvalidDevice);
  int device = -1;
  ASSERT_EQ(cudaGetDevice(&device), kCudaSuccess);
  EXPECT_EQ(device, 0);
  cudaGetLastError();
}

TEST(SimCudartTest, CurrentDeviceIsPerThread) {
  int in_thread = -1;
  std::thread other([&] {
    ASSERT_EQ(cudaSetDevice(1), kCudaSuccess);
    cudaGetDevice(&in_thread);
  });
  other.join();
  int here = -1;
  ASSERT_EQ(cudaGetDevice(&here), kCudaSuccess);
  EXPECT_EQ(in_thread, 1);
  EXPECT_EQ(here, 0);
}

TEST(SimCudartTest, MallocOfZeroBytesSucceedsWithNull) {
  void* ptr = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(cudaMalloc(&ptr, 0), kCudaSuccess);
  EXPECT_EQ(ptr, nullptr);
}

TEST(SimCudartTest, MallocBeyondTheDeviceIsMemoryAllocation) {
  void* ptr = nullptr;
  EXPECT_EQ(cudaMalloc(&ptr, size_t{1} << 60), kCudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), kCudaErrorMemoryAllocation);
}

TEST(SimCudartTest, FreeOfUnknownOrFreedPointerIsInvalidValue) {
  int host = 0;
  EXPECT_EQ(cudaFree(&host), kCudaErrorInvalidValue);
  void* ptr = nullptr;
  ASSERT_EQ(cudaMalloc(&ptr, 64), kCudaSuccess);
  EXPECT_EQ(cudaFree(static_cast<char*>(ptr) + 8), kCudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(ptr), kCudaSuccess);
  EXPECT_EQ(cudaFree(ptr), kCudaErrorInvalidValue);
  cudaGetLastError();
}

TEST(SimCudartDeathTest, HostReadOfDeviceMemoryFaults) {
  DeviceBuffer device(4096);
  EXPECT_EXIT(
      {
        volatile char byte = *static_cast<volatile char*>(device.get());
        (void)byte;
      },
      ::testing::KilledBySignal(SIGSEGV), "");
}

TEST(SimCudartDeathTest, HostWriteToDeviceMemoryFaults) {
  DeviceBuffer device(4096);
  EXPECT_EXIT(std::memset(device.get(), 1, 16), ::testing::KilledBySignal(SIGSEGV), "");
}

TEST(SimCudartTest, CopyAgainstItsStatedDirectionIsInvalidValue) {
  DeviceBuffer device(4096);
  std::vector<char> host(4096);
  EXPECT_EQ(cudaMemcpy(host.data(), device.get(), 4096, kCudaMemcpyHostToDevice), kCudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(device.get(), host.data(), 4096, kCudaMemcpyDeviceToHost), kCudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(host.data(), host.data(), 4096, kCudaMemcpyDeviceToDevice), kCudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(device.get(), host.data(), 4096, 9), kCudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(device.get(), host.data(), 4096, kCudaMemcpyHostToDevice), kCudaSuccess);
  cudaGetLastError();
}

TEST(SimCudartTest, DeviceRangePastItsAllocationIsInvalidValue) {
  DeviceBuffer device(1000);
  std::vector<char> host(2000);
  EXPECT_EQ(cudaMemcpy(host.data(), device.get(), 1001, kCudaMemcpyDeviceToHost), kCudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(host.data(), device.at(500), 500, kCudaMemcpyDeviceToHost), kCudaSuccess);
  EXPECT_EQ(cudaMemcpy(host.data(), device.at(500), 501, kCudaMemcpyDefault), kCudaErrorInvalidValue);
  cudaGetLastError();
}

TEST(SimCudartTest, DefaultKindInfersTheDirectionFromThePointers) {
  DeviceBuffer first(256);
  DeviceBuffer second(256);
  const std::string bytes(256, 'q');
  ASSERT_EQ(cudaMemcpy(first.get(), bytes.data(), 256, kCudaMemcpyDefault), kCudaSuccess);
  ASSERT_EQ(cudaMemcpy(second.get(), first.get(), 256, kCudaMemcpyDefault), kCudaSuccess);
  EXPECT_EQ(second.Read(), bytes);
}

TEST(SimCudartTest, AsyncCopyToPinnedHostLandsOnlyBySynchronize) {
  DeviceBuffer device(1 << 16);
  device.Write(std::string(1 << 16, 'n'));
  PinnedBuffer host(1 << 16);
  Stream stream;
  StreamGate gate(stream.get());
  ASSERT_EQ(cudaMemcpyAsync(host.data(), device.get(), 1 << 16, kCudaMemcpyDeviceToHost, stream.get()), kCudaSuccess);
  EXPECT_EQ(host.data()[0], 0) << "the copy ran before the work queued ahead of it";
  gate.Open();
  ASSERT_EQ(cudaStreamSynchronize(stream.get()), kCudaSuccess);
  EXPECT_EQ(std::string(host.data(), 1 << 16), std::string(1 << 16, 'n'));
}

TEST(SimCudartTest, AsyncCopyFromPinnedHostReadsTheSourceWhenItRuns) {
  DeviceBuffer device(64);
  PinnedBuffer host(64);
  std::memset(host.data(), 'a', 64);
  Stream stream;
  StreamGate gate(stream.get());
  ASSERT_EQ(cudaMemcpyAsync(device.get(), host.data(), 64, kCudaMemcpyHostToDevice, stream.get()), kCudaSuccess);
  std::memset(host.data(), 'b', 64);
  gate.Open();
  ASSERT_EQ(cudaStreamSynchronize(stream.get()), kCudaSuccess);
  EXPECT_EQ(device.Read(), std::string(64, 'b'));
}

TEST(SimCudartTest, AsyncCopyToPageableHostHasCompletedOnReturn) {
  DeviceBuffer device(4096);
  device.Write(std::string(4096, 'p'));
  std::vector<char> host(4096);
  Stream stream;
  ASSERT_EQ(cudaMemcpyAsync(host.data(), device.get(), 4096, kCudaMemcpyDeviceToHost, stream.get()), kCudaSuccess);
  EXPECT_EQ(std::string(host.data(), 4096), std::string(4096, 'p'));
}

TEST(SimCudartTest, AsyncCopyFromPageableHostTakesTheSourceAtTheCall) {
  DeviceBuffer device(64);
  std::vector<char> host(64, 'a');
  Stream stream;
  StreamGate gate(stream.get());
  ASSERT_EQ(cudaMemcpyAsync(device.get(), host.data(), 64, kCudaMemcpyHostToDevice, stream.get()), kCudaSuccess);
  std::fill(host.begin(), host.end(), 'b');
  gate.Open();
  ASSERT_EQ(cudaStreamSynchronize(stream.get()), kCudaSuccess);
  EXPECT_EQ(device.Read(), std::string(64, 'a'));
}

TEST(SimCudartTest, StreamQueryIsNotReadyWhileWorkIsPending) {
  DeviceBuffer device(4096);
  PinnedBuffer host(4096);
  Stream stream;
  StreamGate gate(stream.get());
  ASSERT_EQ(cudaMemcpyAsync(host.data(), device.get(), 4096, kCudaMemcpyDeviceToHost, stream.get()), kCudaSuccess);
  EXPECT_EQ(cudaStreamQuery(stream.get()), kCudaErrorNotReady);
  gate.Open();
  ASSERT_EQ(cudaStreamSynchronize(stream.get()), kCudaSuccess);
  EXPECT_EQ(cudaStreamQuery(stream.get()), kCudaSuccess);
  cudaGetLastError();
}

TEST(SimCudartTest, FailedStreamOperationIsReportedBySynchronizeOnce) {
  Stream stream;
  ASSERT_EQ(EnqueueOnStream(stream.get(), [] { return static_cast<int>(kCudaErrorLaunchFailure); }), kCudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream.get()), kCudaErrorLaunchFailure);
  EXPECT_EQ(cudaGetLastError(), kCudaErrorLaunchFailure);
  EXPECT_EQ(cudaStreamSynchronize(stream.get()), kCudaSuccess);
}

TEST(SimCudartTest, DestroyedStreamIsAnInvalidHandle) {
  void* stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, kCudaStreamNonBlocking), kCudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(stream), kCudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), kCudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamCreateWithFlags(&stream, 0x10), kCudaErrorInvalidValue);
  cudaGetLastError();
}

TEST(SimCudartTest, FreeWaitsForWorkQueuedBeforeIt) {
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 4096), kCudaSuccess);
  ASSERT_EQ(cudaMemcpy(device, std::string(4096, 'f').data(), 4096, kCudaMemcpyHostToDevice), kCudaSuccess);
  PinnedBuffer host(4096);
  Stream stream;
  StreamGate gate(stream.get());
  ASSERT_EQ(cudaMemcpyAsync(host.data(), device, 4096, kCudaMemcpyDeviceToHost, stream.get()), kCudaSuccess);
  std::thread opener([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate.Open();
  });
  ASSERT_EQ(cudaFree(device), kCudaSuccess);
  opener.join();
  EXPECT_EQ(cudaStreamSynchronize(stream.get()), kCudaSuccess);
  EXPECT_EQ(std::string(host.data(), 4096), std::string(4096, 'f'));
}

TEST(SimCudartTest, PointerAttributesTellDeviceRegisteredAndPlainHostMemory) {
  DeviceBuffer device(1 << 20);
  CudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, device.at(12345)), kCudaSuccess);
  EXPECT_EQ(attributes.type, kCudaMemoryTypeDevice);
  EXPECT_EQ(attributes.device, 0);
  EXPECT_EQ(attributes.device_pointer, device.at(12345));
  PinnedBuffer pinned(8192);
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, pinned.data() + 100), kCudaSuccess);
  EXPECT_EQ(attributes.type, kCudaMemoryTypeHost);
  std::vector<char> plain(64);
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, plain.data()), kCudaSuccess);
  EXPECT_EQ(attributes.type, kCudaMemoryTypeUnregistered);
}

TEST(SimCudartTest, AllocationRemembersTheDeviceItWasMadeOn) {
  DeviceBuffer device(64, /*device=*/1);
  CudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, device.get()), kCudaSuccess);
  EXPECT_EQ(attributes.device, 1);
}

TEST(SimCudartTest, RegisteringAnOverlappingRangeIsAlreadyRegistered) {
  PinnedBuffer pinned(3 * 4096);
  EXPECT_EQ(cudaHostRegister(pinned.data() + 4096, 4096, 0), kCudaErrorHostMemoryAlreadyRegistered);
  cudaGetLastError();
}

TEST(SimCudartTest, UnregisteringUnknownMemoryIsNotRegistered) {
  std::vector<char> plain(64);
  EXPECT_EQ(cudaHostUnregister(plain.data()), kCudaErrorHostMemoryNotRegistered);
  cudaGetLastError();
}

TEST(SimCudartTest, RegisteringDeviceOrUnmappedMemoryIsInvalidValue) {
  DeviceBuffer device(4096);
  EXPECT_EQ(cudaHostRegister(device.get(), 4096, 0), kCudaErrorInvalidValue);
  EXPECT_EQ(cudaHostRegister(reinterpret_cast<void*>(uintptr_t{4096}), 4096, 0), kCudaErrorInvalidValue);
  cudaGetLastError();
}

TEST(SimCudartTest, ErrorStringsNameTheErrors) {
  EXPECT_STREQ(cudaGetErrorString(kCudaErrorInvalidValue), "cudaErrorInvalidValue");
  EXPECT_STREQ(cudaGetErrorString(kCudaErrorNotReady), "cudaErrorNotReady");
  EXPECT_STREQ(cudaGetErrorString(123456), "unrecognized error code");
}

TEST(SimCudartTest, GetLastErrorReturnsTheLastFailureAndClearsIt) {
  EXPECT_EQ(cudaSetDevice(-5), kCudaErrorInvalidDevice);
  int device = 0;
  EXPECT_EQ(cudaGetDevice(&device), kCudaSuccess);
  EXPECT_EQ(cudaGetLastError(), kCudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), kCudaSuccess);
}

TEST(SimCudartTest, ChildForkedAfterUseCannotUseTheRuntime) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), kCudaSuccess);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(cudaGetDeviceCount(&count) == kCudaErrorInitializationError ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(SimCudartTest, TraceHasOneLinePerCopy) {
  const char* path = std::getenv("CKPT_SIMGPU_TRACE");
  ASSERT_NE(path, nullptr) << "the test binary's main sets CKPT_SIMGPU_TRACE";
  auto lines = [path] {
    std::ifstream trace(path);
    std::vector<std::string> all;
    for (std::string line; std::getline(trace, line);) all.push_back(line);
    return all;
  };
  DeviceBuffer device(4096);
  PinnedBuffer host(4096);
  Stream stream;
  const size_t before = lines().size();
  ASSERT_EQ(cudaMemcpyAsync(device.get(), host.data(), 4096, kCudaMemcpyHostToDevice, stream.get()), kCudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), device.get(), 100, kCudaMemcpyDefault, stream.get()), kCudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream.get()), kCudaSuccess);
  const std::vector<std::string> after = lines();
  ASSERT_EQ(after.size(), before + 2);
  EXPECT_EQ(after[before], "memcpyAsync H2D 4096");
  EXPECT_EQ(after[before + 1], "memcpyAsync D2H 100");
}

}  // namespace
}  // namespace simgpu

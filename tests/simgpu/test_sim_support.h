// Helpers shared by the simulator's own tests: device and pinned buffers and streams that clean up after
// themselves, and the child processes the multi-process NCCL tests start.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/simgpu/sim_cuda_api.h"

namespace simgpu {

// Makes `device` current on the calling thread for the guard's lifetime.
class OnDevice {
 public:
  explicit OnDevice(int device) {
    EXPECT_EQ(cudaGetDevice(&previous_), kCudaSuccess);
    EXPECT_EQ(cudaSetDevice(device), kCudaSuccess);
  }
  ~OnDevice() { EXPECT_EQ(cudaSetDevice(previous_), kCudaSuccess); }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  int previous_ = 0;
};

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t size, int device = 0) : size_(size) {
    OnDevice on_device(device);
    EXPECT_EQ(cudaMalloc(&data_, size), kCudaSuccess);
  }
  ~DeviceBuffer() { EXPECT_EQ(cudaFree(data_), kCudaSuccess); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return data_; }
  void* at(size_t offset) const { return static_cast<char*>(data_) + offset; }
  void Write(const std::string& bytes) {
    EXPECT_EQ(cudaMemcpy(data_, bytes.data(), bytes.size(), kCudaMemcpyHostToDevice), kCudaSuccess);
  }
  std::string Read() const {
    std::string bytes(size_, '\0');
    EXPECT_EQ(cudaMemcpy(bytes.data(), data_, size_, kCudaMemcpyDeviceToHost), kCudaSuccess);
    return bytes;
  }

 private:
  size_t size_;
  void* data_ = nullptr;
};

// Page-aligned, zeroed host memory registered with the runtime for its lifetime.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(size_t size)
      : data_(static_cast<char*>(std::aligned_alloc(4096, (size + 4095) / 4096 * 4096))) {
    std::fill(data_, data_ + size, 0);
    EXPECT_EQ(cudaHostRegister(data_, size, 0), kCudaSuccess);
  }
  ~PinnedBuffer() {
    EXPECT_EQ(cudaHostUnregister(data_), kCudaSuccess);
    std::free(data_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  char* data() const { return data_; }

 private:
  char* data_;
};

class Stream {
 public:
  explicit Stream(int device = 0) {
    OnDevice on_device(device);
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream_, kCudaStreamNonBlocking), kCudaSuccess);
  }
  ~Stream() { EXPECT_EQ(cudaStreamDestroy(stream_), kCudaSuccess); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void* get() const { return stream_; }

 private:
  void* stream_ = nullptr;
};

// The environment of a rank of a multi-process NCCL test: its rank (which makes the test binary act as that rank),
// the number of ranks, the unique id in hex, and the scenario.
constexpr char kRankRoleVar[] = "SIMGPU_SELF_TEST_NCCL_RANK";
constexpr char kRanksVar[] = "SIMGPU_SELF_TEST_NCCL_RANKS";
constexpr char kIdVar[] = "SIMGPU_SELF_TEST_NCCL_ID";
constexpr char kScenarioVar[] = "SIMGPU_SELF_TEST_NCCL_SCENARIO";

// What rank `from` sends rank `to` in the multi-rank exchanges: sizes differ for every pair, and each exceeds what
// a socket buffers, so a rank that sent before it received would deadlock.
inline std::string ExchangeMessage(int from, int to) {
  std::string bytes((size_t{1} << 20) * static_cast<size_t>(from + 1) + 4099 * static_cast<size_t>(to) + 13, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(from * 37 + to * 11 + i * 7);
  return bytes;
}

// A rank's part, run in a child process: its exit status is what the parent checks.
int RunNcclRankRole();

}  // namespace simgpu

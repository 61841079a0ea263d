// Shards in CUDA memory through the C API: saved from device memory (device-to-host staging) and loaded back into
// device memory, whole and resharded. Needs a CUDA device; skips with the reason where there is none.
// ctest-labels: threaded
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "ckpt.h"
#include "gpu/cuda_runtime.h"
#include "runtime/core/dtype_cast.h"
#include "tests/unit/support/temp_dir.h"

namespace {

using ckpt::gpu::CudaRuntime;

class CudaShardTest : public ckpt::testing::TempDirTest {
 protected:
  void SetUp() override {
    auto cuda = CudaRuntime::Get();
    if (!cuda.ok()) GTEST_SKIP() << cuda.status().message();
    cuda_ = *cuda;
    ASSERT_EQ(ckpt_error_create(&err_), CKPT_OK);
    ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
    opts.rank = 0;
    opts.world_size = 1;
    opts.io_workers = 0;  // unit tests link libckpt statically: no worker executable beside them
    ASSERT_EQ(ckpt_context_create(&opts, &ctx_, err_), CKPT_OK) << ckpt_error_message(err_);
  }
  void TearDown() override {
    for (void* p : device_buffers_) (void)cuda_->Free(p);
    ckpt_context_free(ctx_);
    ckpt_error_free(err_);
  }

  template <typename T>
  T* DeviceCopyOf(const std::vector<T>& host) {
    void* p = cuda_->Malloc(0, host.size() * sizeof(T)).value();
    device_buffers_.push_back(p);
    EXPECT_TRUE(cuda_->Copy(p, host.data(), host.size() * sizeof(T)).ok());
    return static_cast<T*>(p);
  }
  template <typename T>
  std::vector<T> HostCopyOf(const T* device, size_t n) {
    std::vector<T> host(n);
    EXPECT_TRUE(cuda_->Copy(host.data(), device, n * sizeof(T)).ok());
    return host;
  }
  // Registers n elements of `dtype` at `device_data` as the box (local, offset) of "w".
  int32_t Add(ckpt_state_t* state, const uint64_t* global, const uint64_t* local, const uint64_t* offset,
              void* device_data, size_t n, int32_t dtype = CKPT_DTYPE_F32, uint32_t flags = 0) {
    ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
    shard.key = "w";
    shard.dtype = dtype;
    shard.flags = flags;
    shard.ndim = 2;
    shard.global_shape = global;
    shard.local_shape = local;
    shard.global_offset = offset;
    shard.memory_kind = CKPT_MEMORY_CUDA;
    shard.device = 0;
    shard.data = device_data;
    shard.data_size = n * ckpt_dtype_size(dtype);
    return ckpt_state_add_tensor(state, &shard, err_);
  }

  CudaRuntime* cuda_ = nullptr;
  ckpt_error_t* err_ = nullptr;
  ckpt_context_t* ctx_ = nullptr;
  std::vector<void*> device_buffers_;
};

TEST_F(CudaShardTest, SavesFromDeviceMemoryAndLoadsAColumnSliceBackIntoIt) {
  const uint64_t global[2] = {64, 48}, zero[2] = {0, 0};
  std::vector<float> values(64 * 48);
  std::iota(values.begin(), values.end(), 1.0f);
  ckpt_state_t* state = nullptr;
  ckpt_state_create(&state, err_);
  ASSERT_EQ(Add(state, global, global, zero, DeviceCopyOf(values), values.size()), CKPT_OK) << ckpt_error_message(err_);
  ckpt_request_t* request = nullptr;
  const std::string path = Path("step");
  ASSERT_EQ(ckpt_save(ctx_, state, path.c_str(), nullptr, &request, err_), CKPT_OK) << ckpt_error_message(err_);
  ASSERT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << ckpt_error_message(err_);
  ckpt_request_free(request);
  ckpt_state_free(state);

  // Columns 16..39 of every row: a non-contiguous region, delivered run by run into device memory.
  const uint64_t local[2] = {64, 24}, offset[2] = {0, 16};
  float* slice = DeviceCopyOf(std::vector<float>(64 * 24, -1.0f));
  ckpt_state_create(&state, err_);
  ASSERT_EQ(Add(state, global, local, offset, slice, 64 * 24), CKPT_OK);
  ASSERT_EQ(ckpt_load(ctx_, state, path.c_str(), nullptr, err_), CKPT_OK) << ckpt_error_message(err_);
  const std::vector<float> got = HostCopyOf(slice, 64 * 24);
  for (uint64_t r = 0; r < 64; ++r) {
    for (uint64_t c = 0; c < 24; ++c) ASSERT_EQ(got[r * 24 + c], values[r * 48 + 16 + c]) << r << "," << c;
  }
  ckpt_state_free(state);
}

TEST_F(CudaShardTest, LoadsF32IntoBf16DeviceMemoryWithACast) {
  const uint64_t global[2] = {64, 48}, zero[2] = {0, 0};
  std::vector<float> values(64 * 48);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 1.001f - 1000.0f;
  ckpt_state_t* state = nullptr;
  ckpt_state_create(&state, err_);
  ASSERT_EQ(Add(state, global, global, zero, DeviceCopyOf(values), values.size()), CKPT_OK) << ckpt_error_message(err_);
  ckpt_request_t* request = nullptr;
  const std::string path = Path("step");
  ASSERT_EQ(ckpt_save(ctx_, state, path.c_str(), nullptr, &request, err_), CKPT_OK) << ckpt_error_message(err_);
  ASSERT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << ckpt_error_message(err_);
  ckpt_request_free(request);
  ckpt_state_free(state);

  // Columns 16..39, converted on the host and copied into device memory.
  const uint64_t local[2] = {64, 24}, offset[2] = {0, 16};
  uint16_t* slice = DeviceCopyOf(std::vector<uint16_t>(64 * 24, 0xFFFF));
  ckpt_state_create(&state, err_);
  ASSERT_EQ(Add(state, global, local, offset, slice, 64 * 24, CKPT_DTYPE_BF16, CKPT_SHARD_ALLOW_DTYPE_CAST), CKPT_OK);
  ASSERT_EQ(ckpt_load(ctx_, state, path.c_str(), nullptr, err_), CKPT_OK) << ckpt_error_message(err_);
  const std::vector<uint16_t> got = HostCopyOf(slice, 64 * 24);
  for (uint64_t r = 0; r < 64; ++r) {
    for (uint64_t c = 0; c < 24; ++c) {
      uint16_t expected;
      ckpt::runtime::CastElements(CKPT_DTYPE_F32, CKPT_DTYPE_BF16, &values[r * 48 + 16 + c], &expected, 1);
      ASSERT_EQ(got[r * 24 + c], expected) << r << "," << c;
    }
  }
  ckpt_state_free(state);
}

TEST_F(CudaShardTest, HostMemoryDeclaredAsCudaIsRefused) {
  const uint64_t global[2] = {2, 2}, zero[2] = {0, 0};
  std::vector<float> host(4);
  ckpt_state_t* state = nullptr;
  ckpt_state_create(&state, err_);
  EXPECT_EQ(Add(state, global, global, zero, host.data(), 4), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(ckpt_error_message(err_)).find("not device memory"), std::string::npos);
  ckpt_state_free(state);
}

// Runs everywhere: without a usable CUDA device, a CUDA shard is refused with the reason, never a crash.
TEST(CudaShardWithoutDeviceTest, IsUnsupportedWithTheReason) {
  if (CudaRuntime::Get().ok()) GTEST_SKIP() << "a CUDA device is present";
  ckpt_error_t* err = nullptr;
  ckpt_error_create(&err);
  ckpt_state_t* state = nullptr;
  ckpt_state_create(&state, err);
  const uint64_t shape[1] = {4}, zero[1] = {0};
  float fake[4];
  ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
  shard.key = "w";
  shard.dtype = CKPT_DTYPE_F32;
  shard.ndim = 1;
  shard.global_shape = shape;
  shard.local_shape = shape;
  shard.global_offset = zero;
  shard.memory_kind = CKPT_MEMORY_CUDA;
  shard.data = fake;
  shard.data_size = sizeof fake;
  EXPECT_EQ(ckpt_state_add_tensor(state, &shard, err), CKPT_E_UNSUPPORTED);
  EXPECT_NE(std::string(ckpt_error_message(err)).find("CUDA"), std::string::npos) << ckpt_error_message(err);
  ckpt_state_free(state);
  ckpt_error_free(err);
}

}  // namespace

// Shards in CUDA memory across ranks: `cuda_scenario save DIR` on N ranks saves row slabs from device memory;
// `cuda_scenario load DIR` on M ranks loads column slabs back into device memory, over UCX when it is the transport
// (device buffers are staged through host memory). Exits 77 (skipped) on every rank where no CUDA device exists.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ckpt.h"
#include "io/cuda_runtime.h"

namespace {

constexpr uint64_t kRows = 96, kCols = 40;

[[noreturn]] void Die(int rank, const std::string& why) {
  std::fprintf(stderr, "cuda_scenario rank %d FAILED: %s\n", rank, why.c_str());
  std::exit(1);
}

float ValueAt(uint64_t r, uint64_t c) { return static_cast<float>(r * kCols + c); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  auto cuda = ckpt::io::CudaRuntime::Get();
  if (!cuda.ok()) {
    std::printf("SKIP: %s\n", cuda.status().message().c_str());
    return 77;
  }
  const std::string mode = argv[1];
  ckpt_error_t* err = nullptr;
  ckpt_error_create(&err);
  ckpt_context_t* ctx = nullptr;
  if (ckpt_context_create(nullptr, &ctx, err) != CKPT_OK) Die(-1, ckpt_error_message(err));
  const int rank = ckpt_context_rank(ctx), world = ckpt_context_world_size(ctx);
  const bool save = mode == "save";
  // Saves hold row slabs, loads column slabs: every load is a reshard.
  const uint64_t dim = save ? 0 : 1, extent = save ? kRows : kCols;
  const uint64_t begin = extent * rank / world, end = extent * (rank + 1) / world;
  const uint64_t local[2] = {save ? end - begin : kRows, save ? kCols : end - begin};
  const uint64_t offset[2] = {dim == 0 ? begin : 0, dim == 1 ? begin : 0};
  std::vector<float> host(local[0] * local[1]);
  for (uint64_t r = 0; r < local[0]; ++r) {
    for (uint64_t c = 0; c < local[1]; ++c) host[r * local[1] + c] = save ? ValueAt(offset[0] + r, c) : -1.0f;
  }
  void* device = (*cuda)->Malloc(0, host.size() * sizeof(float)).value();
  if (!(*cuda)->Copy(device, host.data(), host.size() * sizeof(float)).ok()) Die(rank, "host to device copy");

  const uint64_t global[2] = {kRows, kCols};
  ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
  shard.key = "w";
  shard.dtype = CKPT_DTYPE_F32;
  shard.ndim = 2;
  shard.global_shape = global;
  shard.local_shape = local;
  shard.global_offset = offset;
  shard.memory_kind = CKPT_MEMORY_CUDA;
  shard.device = 0;
  shard.data = device;
  shard.data_size = host.size() * sizeof(float);
  ckpt_state_t* state = nullptr;
  ckpt_state_create(&state, err);
  if (ckpt_state_add_tensor(state, &shard, err) != CKPT_OK) Die(rank, ckpt_error_message(err));
  if (save) {
    ckpt_request_t* request = nullptr;
    if (ckpt_save(ctx, state, argv[2], nullptr, &request, err) != CKPT_OK ||
        ckpt_request_wait(request, 0, err) != CKPT_OK) {
      Die(rank, ckpt_error_message(err));
    }
    ckpt_request_free(request);
  } else {
    if (ckpt_load(ctx, state, argv[2], nullptr, err) != CKPT_OK) Die(rank, ckpt_error_message(err));
    if (!(*cuda)->Copy(host.data(), device, host.size() * sizeof(float)).ok()) Die(rank, "device to host copy");
    for (uint64_t r = 0; r < local[0]; ++r) {
      for (uint64_t c = 0; c < local[1]; ++c) {
        if (host[r * local[1] + c] != ValueAt(r, offset[1] + c)) Die(rank, "wrong value at " + std::to_string(r));
      }
    }
    if (rank == 0) std::printf("cuda: %d ranks loaded device column slabs, every element checked\n", world);
  }
  ckpt_state_free(state);
  (void)(*cuda)->Free(device);
  ckpt_context_free(ctx);
  ckpt_error_free(err);
  return 0;
}

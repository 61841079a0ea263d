// Shards in CUDA memory across ranks: `cuda_scenario save DIR` on N ranks saves column slabs of "w" and a
// replicated "b" from device memory; `cuda_scenario load DIR [TRANSPORT]` on M ranks loads M column slabs of "w"
// and the whole of "b" back into device memory, and checks every element. Rank r uses device r mod the device count.
// TRANSPORT names the data plane the load must have used for device memory: "ucx" (staged through host memory) or
// "nccl" (device to device; needs one device per rank). `cuda_scenario load-expect-peer-failure DIR TRANSPORT` is the
// load with a rank dying before the exchange (CKPT_FAULT_EXIT_BEFORE_EXCHANGE): it must fail with CKPT_E_PEER_FAILED or
// CKPT_E_TIMEOUT. Saves check the replicas of "b" against each other (CKPT_SAVE_CHECK_REPLICAS), each rank hashing
// its copy in device memory; `cuda_scenario save-flipped-replica DIR` is the save with one element of the last rank's
// "b" changed: it must fail with CKPT_E_CORRUPT naming "b" and that rank, and commit nothing. `cuda_scenario
// save-incremental DIR` saves DIR-base and then DIR against it (CKPT_SAVE_INCREMENTAL), hashing the shards in device
// memory, so that DIR refers to DIR-base's bytes for all of them. `cuda_scenario save-compressed DIR` is the save
// compressed (CKPT_SAVE_COMPRESS): the workers compress what was staged from device memory. Exits 77 (skipped)
// where no CUDA device exists, or too few for NCCL.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ckpt.h"
#include "gpu/cuda_runtime.h"

namespace {

// Large enough that transfers travel alone, received in place or scattered on the device.
constexpr uint64_t kRows = 512, kCols = 3072, kBias = 100000;

[[noreturn]] void Die(int rank, const std::string& why) {
  std::fprintf(stderr, "cuda_scenario rank %d FAILED: %s\n", rank, why.c_str());
  std::exit(1);
}

float WeightAt(uint64_t r, uint64_t c) { return static_cast<float>(r * kCols + c); }
float BiasAt(uint64_t i) { return 0.5f * static_cast<float>(i); }

// A tensor shard whose host image is copied to and from device memory around the save or load.
struct DeviceShard {
  std::vector<uint64_t> global, local, offset;
  std::vector<float> host;
  void* device_memory = nullptr;
};

void AddShard(ckpt_state_t* state, const char* key, DeviceShard& shard, int device, const ckpt::gpu::CudaRuntime& cuda,
              int rank, ckpt_error_t* err) {
  const uint64_t bytes = shard.host.size() * sizeof(float);
  ckpt::Result<void*> memory = cuda.Malloc(device, bytes);
  if (!memory.ok()) Die(rank, memory.status().message());
  shard.device_memory = *memory;
  if (!cuda.Copy(shard.device_memory, shard.host.data(), bytes).ok()) Die(rank, "host to device copy");
  ckpt_tensor_shard t = CKPT_TENSOR_SHARD_INIT;
  t.key = key;
  t.dtype = CKPT_DTYPE_F32;
  t.ndim = static_cast<uint32_t>(shard.global.size());
  t.global_shape = shard.global.data();
  t.local_shape = shard.local.data();
  t.global_offset = shard.offset.data();
  t.memory_kind = CKPT_MEMORY_CUDA;
  t.device = device;
  t.data = shard.device_memory;
  t.data_size = bytes;
  if (ckpt_state_add_tensor(state, &t, err) != CKPT_OK) Die(rank, ckpt_error_message(err));
}

void CopyBack(DeviceShard& shard, const ckpt::gpu::CudaRuntime& cuda, int rank) {
  if (!cuda.Copy(shard.host.data(), shard.device_memory, shard.host.size() * sizeof(float)).ok()) {
    Die(rank, "device to host copy");
  }
}

void CheckTransport(ckpt_context_t* ctx, const std::string& expected, int rank, ckpt_error_t* err) {
  ckpt_context_stats stats = CKPT_CONTEXT_STATS_INIT;
  if (ckpt_context_stats_get(ctx, &stats, err) != CKPT_OK) Die(rank, ckpt_error_message(err));
  const int32_t want = expected == "nccl" ? CKPT_TRANSPORT_NCCL : CKPT_TRANSPORT_UCX;
  if (stats.transport != want) {
    Die(rank, "the load used transport " + std::to_string(stats.transport) + ", expected " + expected);
  }
  // Every rank needs a part of every stored chunk, so every rank either sends or receives.
  if (stats.bytes_sent + stats.bytes_received == 0) Die(rank, "this rank exchanged nothing");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) return 2;
  auto cuda = ckpt::gpu::CudaRuntime::Get();
  if (!cuda.ok()) {
    std::printf("SKIP: %s\n", cuda.status().message().c_str());
    return 77;
  }
  const std::string mode = argv[1];
  const std::string transport = argc == 4 ? argv[3] : "";
  ckpt_error_t* err = nullptr;
  ckpt_error_create(&err);
  ckpt_context_t* ctx = nullptr;
  if (ckpt_context_create(nullptr, &ctx, err) != CKPT_OK) Die(-1, ckpt_error_message(err));
  const int rank = ckpt_context_rank(ctx), world = ckpt_context_world_size(ctx);
  const int devices = (*cuda)->DeviceCount().value();
  if (transport == "nccl" && devices < world) {
    std::printf("SKIP: NCCL needs one device per rank: %d ranks, %d devices\n", world, devices);
    return 77;
  }
  const int device = rank % devices;
  const bool flipped = mode == "save-flipped-replica";
  const bool incremental = mode == "save-incremental";
  const bool compressed = mode == "save-compressed";
  const bool save = mode == "save" || flipped || incremental || compressed;
  const bool expect_peer_failure = mode == "load-expect-peer-failure";

  // Every rank holds a column slab of "w": a load on another number of ranks reshards, and the columns a rank
  // receives from one stored slab are either its whole row width (received in place) or part of it (scattered
  // from a buffer). Every rank holds all of "b".
  DeviceShard w;
  const uint64_t begin = kCols * rank / world, end = kCols * (rank + 1) / world;
  w.global = {kRows, kCols};
  w.local = {kRows, end - begin};
  w.offset = {0, begin};
  w.host.resize(w.local[0] * w.local[1]);
  for (uint64_t r = 0; r < w.local[0]; ++r) {
    for (uint64_t c = 0; c < w.local[1]; ++c) w.host[r * w.local[1] + c] = save ? WeightAt(r, begin + c) : -1.0f;
  }
  DeviceShard b;
  b.global = b.local = {kBias};
  b.offset = {0};
  b.host.resize(kBias);
  for (uint64_t i = 0; i < kBias; ++i) b.host[i] = save ? BiasAt(i) : -1.0f;
  if (flipped && rank == world - 1) b.host[777] += 1.0f;

  ckpt_state_t* state = nullptr;
  ckpt_state_create(&state, err);
  AddShard(state, "w", w, device, **cuda, rank, err);
  AddShard(state, "b", b, device, **cuda, rank, err);
  if (incremental) {
    const std::string base = std::string(argv[2]) + "-base";
    for (const char* base_of_save : {static_cast<const char*>(nullptr), base.c_str()}) {
      ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
      opts.flags = CKPT_SAVE_INCREMENTAL;
      opts.base = base_of_save;
      const char* path = base_of_save == nullptr ? base.c_str() : argv[2];
      ckpt_request_t* request = nullptr;
      if (ckpt_save(ctx, state, path, &opts, &request, err) != CKPT_OK) Die(rank, ckpt_error_message(err));
      if (ckpt_request_wait(request, 0, err) != CKPT_OK) Die(rank, ckpt_error_message(err));
      ckpt_request_free(request);
    }
  } else if (save) {
    ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
    opts.flags = CKPT_SAVE_CHECK_REPLICAS | (compressed ? CKPT_SAVE_COMPRESS : 0);
    ckpt_request_t* request = nullptr;
    if (ckpt_save(ctx, state, argv[2], &opts, &request, err) != CKPT_OK) Die(rank, ckpt_error_message(err));
    const int32_t outcome = ckpt_request_wait(request, 0, err);
    ckpt_request_free(request);
    const std::string message = ckpt_error_message(err);
    if (!flipped && outcome != CKPT_OK) Die(rank, message);
    if (flipped) {
      const std::string odd = "rank " + std::to_string(world - 1);
      const bool named = message.find("tensor 'b'") != std::string::npos &&
                         (message.find(odd + " differs from them") != std::string::npos ||
                          message.find(odd + " (written) differs from them") != std::string::npos);
      if (outcome != CKPT_E_CORRUPT || !named) {
        Die(rank, std::string("expected CKPT_E_CORRUPT naming 'b' and ") + odd + ", got " +
                      ckpt_status_string(outcome) + ": " + message);
      }
      if (rank == 0) std::printf("cuda: the flipped replica was found before the commit: %s\n", message.c_str());
    }
  } else if (expect_peer_failure) {
    const int32_t status = ckpt_load(ctx, state, argv[2], nullptr, err);
    if (status != CKPT_E_PEER_FAILED && status != CKPT_E_TIMEOUT) {
      Die(rank,
          std::string("expected a peer failure, got ") + ckpt_status_string(status) + ": " + ckpt_error_message(err));
    }
    if (rank == 0) std::printf("peer died in the exchange: %s\n", ckpt_error_message(err));
  } else {
    if (ckpt_load(ctx, state, argv[2], nullptr, err) != CKPT_OK) Die(rank, ckpt_error_message(err));
    CopyBack(w, **cuda, rank);
    CopyBack(b, **cuda, rank);
    for (uint64_t r = 0; r < w.local[0]; ++r) {
      for (uint64_t c = 0; c < w.local[1]; ++c) {
        if (w.host[r * w.local[1] + c] != WeightAt(r, w.offset[1] + c)) {
          Die(rank, "wrong value of w at " + std::to_string(r) + "," + std::to_string(w.offset[1] + c));
        }
      }
    }
    for (uint64_t i = 0; i < kBias; ++i) {
      if (b.host[i] != BiasAt(i)) Die(rank, "wrong value of b at " + std::to_string(i));
    }
    if (!transport.empty()) CheckTransport(ctx, transport, rank, err);
    if (rank == 0) {
      std::printf("cuda: %d ranks loaded device column slabs and a replicated vector%s%s, every element checked\n",
                  world, transport.empty() ? "" : " over ", transport.c_str());
    }
  }
  ckpt_state_free(state);
  (void)(*cuda)->Free(w.device_memory);
  (void)(*cuda)->Free(b.device_memory);
  ckpt_context_free(ctx);
  ckpt_error_free(err);
  return 0;
}

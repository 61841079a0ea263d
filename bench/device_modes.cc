// The modes that stage from CUDA device memory. ckpt is still used through its public C API only; the device
// memory a trainer's framework would hold is allocated here with the project's CUDA loader (gpu/cuda_runtime.h),
// compiled into ckpt_bench, so that libckpt is the shared library a user links, as in every other mode.

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "gpu/cuda_runtime.h"

namespace bench {
namespace {

using ckpt::gpu::CudaRuntime;

// One rank, on the first device it sees (CUDA_VISIBLE_DEVICES picks which).
constexpr int32_t kDevice = 0;
// The baseline's passes; the last is timed, as the save timed is the second of two.
constexpr int kCopyPasses = 2;

void Require(const ckpt::Status& status, const std::string& what) {
  if (!status.ok()) throw BenchError(what + ": " + status.message());
}

const CudaRuntime& Cuda() {
  ckpt::Result<CudaRuntime*> cuda = CudaRuntime::Get();
  if (!cuda.ok()) throw BenchError("device-save needs a CUDA device: " + cuda.status().message());
  return **cuda;
}

// The state's tensors in device memory, one allocation per row block as a framework makes them, holding the
// pattern copied from `host`; freed when destroyed.
class DeviceTensors {
 public:
  DeviceTensors(const CudaRuntime& cuda, const PageBuffer& host, const RankLayout& layout) {
    for (const RowBlock& block : layout.blocks()) {
      ckpt::Result<ckpt::gpu::ScopedDeviceMemory> memory =
          ckpt::gpu::ScopedDeviceMemory::Allocate(cuda, kDevice, block.bytes());
      Require(memory.status(), "cudaMalloc of bench.t" + std::to_string(block.tensor));
      Require(cuda.Copy(memory->get(), host.data() + block.offset, block.bytes()),
              "copying bench.t" + std::to_string(block.tensor) + " to the device");
      pointers_.push_back(memory->get());
      memory_.push_back(std::move(memory).value());
    }
  }

  const std::vector<void*>& pointers() const { return pointers_; }

 private:
  std::vector<ckpt::gpu::ScopedDeviceMemory> memory_;
  std::vector<void*> pointers_;
};

// Host memory pinned for every device while the guard lives, as ckpt pins its staging arena.
class PinnedHost {
 public:
  PinnedHost(const CudaRuntime& cuda, const PageBuffer& buffer) : cuda_(cuda), data_(buffer.data()) {
    Require(cuda.RegisterHost(buffer.data(), buffer.size()), "cudaHostRegister of the baseline's buffer");
  }
  ~PinnedHost() { (void)cuda_.UnregisterHost(data_); }
  PinnedHost(const PinnedHost&) = delete;
  PinnedHost& operator=(const PinnedHost&) = delete;

 private:
  const CudaRuntime& cuda_;
  void* data_;
};

// The baseline of the staging time: a plain cudaMemcpy of every tensor into pinned host memory of the state's
// size, in seconds. The copy is checked, so that a baseline that copied nothing cannot flatter ckpt.
double PinnedCopySeconds(const CudaRuntime& cuda, const DeviceTensors& tensors, const PageBuffer& host,
                         const RankLayout& layout) {
  PinnedHost pinned(cuda, host);
  double seconds = 0;
  for (int pass = 0; pass < kCopyPasses; ++pass) {
    std::memset(host.data(), 0, host.size());
    const auto start = Clock::now();
    for (size_t i = 0; i < layout.blocks().size(); ++i) {
      const RowBlock& block = layout.blocks()[i];
      Require(cuda.Copy(host.data() + block.offset, tensors.pointers()[i], block.bytes()),
              "cudaMemcpy of bench.t" + std::to_string(block.tensor) + " to the host");
    }
    seconds = SecondsSince(start);
  }
  VerifySample(host, layout);
  return seconds;
}

// Fails unless the arena holds the whole state: a smaller one makes ckpt_save wait for the disk, and its blocking
// time would no longer be the staging alone.
void CheckArenaHoldsState(const ckpt_context_t* ctx, uint64_t state_bytes, ckpt_error_t* err) {
  ckpt_context_stats stats;
  if (!LibraryStats(ctx, &stats, err)) return;
  if (stats.arena_bytes < state_bytes) {
    throw BenchError("the staging arena (" + std::to_string(stats.arena_bytes >> 20) + " MiB) cannot hold the " +
                     std::to_string(state_bytes >> 20) + " MiB state: set CKPT_ARENA_BYTES larger");
  }
}

// Loads `dir` into host memory and checks a sample: the bytes staged from the device are the tensors' own.
void VerifySaved(ckpt_context_t* ctx, const std::string& dir, const PageBuffer& host, const RankLayout& layout,
                 ckpt_error_t* err) {
  std::memset(host.data(), 0, host.size());
  StatePtr state = MakeState(host, layout, err);
  Check(ckpt_load(ctx, state.get(), dir.c_str(), nullptr, err), err, "ckpt_load " + dir);
  VerifySample(host, layout);
}

}  // namespace

void RunCudaProbe() {
  ErrorPtr err = MakeError();
  ckpt_state_t* raw = nullptr;
  Check(ckpt_state_create(&raw, err.get()), err.get(), "ckpt_state_create");
  StatePtr state(raw);
  // A one-element shard whose pointer is host memory: a library without CUDA support, or one that finds no device,
  // refuses the memory kind itself (CKPT_E_UNSUPPORTED); any other answer means it found CUDA.
  float host_word = 0;
  const uint64_t shape[1] = {1};
  const uint64_t offset[1] = {0};
  ckpt_tensor_shard shard;
  ckpt_tensor_shard_init(&shard, sizeof shard);
  shard.key = "bench.cuda_probe";
  shard.dtype = CKPT_DTYPE_F32;
  shard.ndim = 1;
  shard.global_shape = shape;
  shard.local_shape = shape;
  shard.global_offset = offset;
  shard.memory_kind = CKPT_MEMORY_CUDA;
  shard.device = kDevice;
  shard.data = &host_word;
  shard.data_size = sizeof host_word;
  const int32_t status = ckpt_state_add_tensor(state.get(), &shard, err.get());
  if (status == CKPT_E_UNSUPPORTED) {
    std::printf("unavailable: %s\n", ckpt_error_message(err.get()));
  } else {
    std::printf("available\n");
  }
}

// The state in device memory, saved twice like RunSave's (the second save, with the arena warm and the plan cached,
// is the one timed), beside the cudaMemcpy baseline; the second checkpoint is loaded back and checked.
void RunDeviceSave(const Args& args) {
  const CudaRuntime& cuda = Cuda();
  const RankLayout layout = RankLayout::Whole(Geometry::Of(args), {});
  PageBuffer host(layout.bytes());
  FillPattern(host, layout);
  const DeviceTensors tensors(cuda, host, layout);
  const double memcpy_s = PinnedCopySeconds(cuda, tensors, host, layout);

  ErrorPtr err = MakeError();
  ContextPtr ctx = MakeContext(args.transport, err.get());
  CheckArenaHoldsState(ctx.get(), layout.bytes(), err.get());
  StatePtr state = MakeDeviceState(tensors.pointers(), kDevice, layout, err.get());
  TimedSave(ctx.get(), state.get(), args.dir, err.get());
  std::filesystem::remove_all(args.dir);  // only the second checkpoint is kept, so the disk holds one
  const std::string warm_dir = args.dir + ".warm";
  const SaveTiming warm = TimedSave(ctx.get(), state.get(), warm_dir, err.get());
  VerifySaved(ctx.get(), warm_dir, host, layout, err.get());

  Reporter out(ckpt_context_rank(ctx.get()) == 0);
  out.Print("d2h_stage_seconds", warm.block_s);
  out.Print("cuda_memcpy_pinned_seconds", memcpy_s);
}

}  // namespace bench

// The modes that measure the parallel load (read once, exchange between ranks): a checkpoint saved with one
// parallel layout and loaded with another, and a replicated state that every rank loads whole. Every rank prints
// its own figures (suffix ".rank<r>"); bench/run takes the slowest rank's time and sums the byte counters.

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_support.h"

namespace bench {
namespace {

// Tensor parallelism of the reshard save: every tensor but bench.t0 is split by rows over this many ranks.
constexpr int kSaveTensorParallel = 2;
// bench.t0 is held whole by every rank at save and asked for whole by every rank at load, as a layer norm's
// weights are; the other tensors are split by rows.
constexpr uint32_t kReplicatedTensor = 0;

std::string RankSuffix(const ckpt_context_t* ctx) { return ".rank" + std::to_string(ckpt_context_rank(ctx)); }

// RANK or WORLD_SIZE as ckpt-launch sets them, read before the context exists; `fallback` where unset.
int LauncherValue(const char* name, int fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr) return fallback;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || value < 0 || value > (1 << 20)) {
    throw BenchError(std::string(name) + " is '" + text + "', not a rank count or index");
  }
  return static_cast<int>(value);
}

// The TP x DP save layout of `rank`: tensor-parallel rank tp = rank % TP holds row part tp of every split tensor,
// replicated over the data-parallel ranks (replica id {0, dp}); bench.t0 is replicated on every rank ({tp, dp}).
RankLayout SaveLayout(const Args& args, int rank, int world) {
  if (world % kSaveTensorParallel != 0) {
    throw BenchError("reshard-save needs a multiple of " + std::to_string(kSaveTensorParallel) + " ranks, got " +
                     std::to_string(world));
  }
  const Geometry geometry = Geometry::Of(args);
  const uint32_t tp = static_cast<uint32_t>(rank % kSaveTensorParallel);
  const uint32_t dp = static_cast<uint32_t>(rank / kSaveTensorParallel);
  const uint64_t part_rows = geometry.rows_per_tensor / kSaveTensorParallel;
  if (part_rows * kSaveTensorParallel != geometry.rows_per_tensor) {
    throw BenchError("tensors of " + std::to_string(geometry.rows_per_tensor) + " rows do not split in " +
                     std::to_string(kSaveTensorParallel));
  }
  RankLayout layout(geometry);
  layout.Add(kReplicatedTensor, 0, geometry.rows_per_tensor, {tp, dp});
  for (uint32_t t = 0; t < geometry.tensors; ++t) {
    if (t != kReplicatedTensor) layout.Add(t, tp * part_rows, part_rows, {0, dp});
  }
  return layout;
}

// The load layout of `rank` out of `world`: a 1/world row range of every split tensor (the ranges do not line up
// with the saved halves unless world divides them), and the whole of bench.t0.
RankLayout LoadLayout(const Args& args, int rank, int world) {
  const Geometry geometry = Geometry::Of(args);
  const uint64_t begin = geometry.rows_per_tensor * rank / world;
  const uint64_t end = geometry.rows_per_tensor * (rank + 1) / world;
  if (begin == end) throw BenchError("tensors of " + std::to_string(geometry.rows_per_tensor) + " rows are too small");
  RankLayout layout(geometry);
  layout.Add(kReplicatedTensor, 0, geometry.rows_per_tensor, {});
  for (uint32_t t = 0; t < geometry.tensors; ++t) {
    if (t != kReplicatedTensor) layout.Add(t, begin, end - begin, {});
  }
  return layout;
}

// Loads `args.dir` into a zeroed, pre-faulted buffer shaped by `layout_of(rank, world)`, checks a sample of what it
// got, and prints this rank's load time, byte counters and transport.
template <typename LayoutOf>
void TimedLoad(const Args& args, LayoutOf layout_of) {
  ErrorPtr err = MakeError();
  // The buffers are faulted in before the context exists, so that no rank is still filling memory when the
  // others, released from the context's rendezvous, start their loads.
  const int world = LauncherValue("WORLD_SIZE", 1);
  const int rank = LauncherValue("RANK", 0);
  const RankLayout layout = layout_of(rank, world);
  PageBuffer buffer(layout.bytes());
  std::memset(buffer.data(), 0, buffer.size());

  ContextPtr ctx = MakeContext(args.transport, err.get());
  if (ckpt_context_rank(ctx.get()) != rank || ckpt_context_world_size(ctx.get()) != world) {
    throw BenchError("the launcher's RANK/WORLD_SIZE (" + std::to_string(rank) + "/" + std::to_string(world) +
                     ") differ from the context's");
  }
  StatePtr state = MakeState(buffer, layout, err.get());
  const auto start = Clock::now();
  Check(ckpt_load(ctx.get(), state.get(), args.dir.c_str(), nullptr, err.get()), err.get(), "ckpt_load " + args.dir);
  const double load_s = SecondsSince(start);
  VerifySample(buffer, layout);

  ckpt_context_stats stats;
  if (!LibraryStats(ctx.get(), &stats, err.get())) {
    throw BenchError("this libckpt has no ckpt_context_stats_get: it cannot report the bytes a load read");
  }
  Reporter(ckpt_context_rank(ctx.get()) == 0).Print("ranks", static_cast<uint64_t>(world));
  Reporter out(true, RankSuffix(ctx.get()));
  out.Print("seconds", load_s);
  out.Print("bytes_read", stats.bytes_read);
  out.Print("bytes_sent", stats.bytes_sent);
  out.Print("bytes_received", stats.bytes_received);
  out.Print("transport", static_cast<uint64_t>(stats.transport));
  // Libraries older than the counter leave it at 0; the figures then fall back to the whole load's time.
  out.Print("exchange_seconds", static_cast<double>(stats.exchange_ns) / 1e9);
  // How the load read (CKPT_LOAD_READS_ONCE or _OWN, as the library chose or CKPT_LOAD_READS forced), and the read
  // amplification the library reports for it; 0 from a library older than these counters.
  out.Print("reads", stats.last_load_reads);
  out.Print("read_amplification_milli", stats.last_load_read_amplification_milli);
}

}  // namespace

void RunReshardSave(const Args& args) {
  ErrorPtr err = MakeError();
  ContextPtr ctx = MakeContext(args.transport, err.get());
  const RankLayout layout = SaveLayout(args, ckpt_context_rank(ctx.get()), ckpt_context_world_size(ctx.get()));
  PageBuffer buffer(layout.bytes());
  FillPattern(buffer, layout);
  StatePtr state = MakeState(buffer, layout, err.get());
  TimedSave(ctx.get(), state.get(), args.dir, err.get());
  if (ckpt_context_rank(ctx.get()) == 0) CheckStoredOnce(args.dir, args.bytes, err.get());
}

void RunReshardLoad(const Args& args) {
  TimedLoad(args, [&](int rank, int world) { return LoadLayout(args, rank, world); });
}

void RunReplicatedLoad(const Args& args) {
  TimedLoad(args, [&](int, int) { return RankLayout::Whole(Geometry::Of(args), {}); });
}

}  // namespace bench

// The memory tier's figures (bench/run): a save into the node agent's memory against a memcpy of the same bytes, a
// restore from that memory (timed beside bench/run's load from storage with a cold cache), and the crash that the
// agent answers by committing the newest memory checkpoint to storage. Both modes need CKPT_JOB_ID.
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <ctime>

#include "bench/bench_support.h"

namespace bench {
namespace {

// The state whole on one rank: the same layout as bench/run's save and load, so the restore compares with its load.
struct MemoryState {
  explicit MemoryState(const Args& args) : layout(RankLayout::Whole(Geometry::Of(args), {})), buffer(layout.bytes()) {}
  RankLayout layout;
  PageBuffer buffer;
};

}  // namespace

// Three saves to memory, as a job saving every step makes them: the second into fresh memory (warm arena, cached
// plan, the first kept), the third as every later one (the first's files recycled: written over, not allocated);
// then a restore of the third into a zeroed buffer.
void RunMemory(const Args& args) {
  MemoryState saved(args);
  FillPattern(saved.buffer, saved.layout);
  const double memcpy_ms = MemcpyMilliseconds(saved.buffer);
  ErrorPtr err = MakeError();
  ContextPtr ctx = MakeContext(args.transport, err.get());
  StatePtr state = MakeState(saved.buffer, saved.layout, err.get());
  const SaveTiming first = TimedSave(ctx.get(), state.get(), args.dir + "/memory-1", err.get(), CKPT_TIER_MEMORY);
  const SaveTiming fresh = TimedSave(ctx.get(), state.get(), args.dir + "/memory-2", err.get(), CKPT_TIER_MEMORY);
  const SaveTiming steady = TimedSave(ctx.get(), state.get(), args.dir + "/memory-3", err.get(), CKPT_TIER_MEMORY);
  state.reset();

  MemoryState restored(args);
  std::memset(restored.buffer.data(), 0, restored.buffer.size());
  StatePtr target = MakeState(restored.buffer, restored.layout, err.get());
  const std::string path = args.dir + "/memory-3";
  const auto start = Clock::now();
  Check(ckpt_load(ctx.get(), target.get(), path.c_str(), nullptr, err.get()), err.get(), "ckpt_load " + path);
  const double restore_s = SecondsSince(start);
  VerifySample(restored.buffer, restored.layout);

  Reporter out(ckpt_context_rank(ctx.get()) == 0);
  out.Print("mem_save_block_first_ms", first.block_s * 1e3);
  out.Print("mem_save_block_ms", steady.block_s * 1e3);
  out.Print("mem_save_seconds", steady.durable_s);
  out.Print("mem_save_fresh_seconds", fresh.durable_s);
  out.Print("mem_memcpy_ms", memcpy_ms);
  out.Print("mem_restore_seconds", restore_s);
}

// A save to memory, complete, then the trainer dies by SIGKILL; it prints the wall-clock time of its death
// (crash_at_ns), from which bench/run times the agent's commit of that checkpoint to storage at the same path.
void RunMemoryCrash(const Args& args) {
  MemoryState saved(args);
  FillPattern(saved.buffer, saved.layout);
  ErrorPtr err = MakeError();
  ContextPtr ctx = MakeContext(args.transport, err.get());
  StatePtr state = MakeState(saved.buffer, saved.layout, err.get());
  TimedSave(ctx.get(), state.get(), args.dir + "/crashed", err.get(), CKPT_TIER_MEMORY);
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  std::printf("crash_at_ns %lld\n", static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec);
  std::fflush(stdout);
  raise(SIGKILL);
}

}  // namespace bench

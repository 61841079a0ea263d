// ckpt_bench replica-check on N ranks: what replicas checking each other (CKPT_SAVE_CHECK_REPLICAS) add to the time
// ckpt_save blocks the training loop. Every rank holds the whole state (pure data parallelism: N replicas of every
// tensor), so each writes about 1/N of it and, with the check, checksums the other (N-1)/N of its own copy.
//
// For each way of saving, staged at the call (the default) and copy-on-write (CKPT_SAVE_COPY_ON_WRITE), a context
// saves without the check and then with it: a first save of each sets up its plan (the flag is part of the plan, so
// the first with it plans anew), then kWarmSaves saves are timed, as a training loop's later checkpoints block. The
// state lies in transparent huge pages from the start, as the library leaves a copy-on-write save's buffers after
// the first (`save-cow` waits for that; here the ranks hold buffers that they do not all protect, which the library
// does not collapse). Each rank prints, with the suffix .rank<r>: the median blocking time of each kind of save and a
// memcpy of its state, the baseline; bench/figures.py takes the slowest rank, since the loop waits for it.
#include <sys/mman.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/bench_support.h"

namespace bench {
namespace {

constexpr int kWarmSaves = 3;

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The median blocking time, in ms, of kWarmSaves saves with `flags` after one that plans. The checkpoints are removed
// after the last: rank 0 removing one between two saves would make the others wait for it in the next ckpt_save.
double WarmBlockMs(ckpt_context_t* ctx, ckpt_state_t* state, const std::string& dir, uint64_t flags,
                   ckpt_error_t* err) {
  const bool rank0 = ckpt_context_rank(ctx) == 0;
  (void)TimedSave(ctx, state, dir + ".plan", err, CKPT_TIER_STORAGE, flags);
  if (rank0) std::filesystem::remove_all(dir + ".plan");
  std::vector<double> block_ms;
  for (int i = 0; i < kWarmSaves; ++i) {
    block_ms.push_back(TimedSave(ctx, state, dir + "." + std::to_string(i), err, CKPT_TIER_STORAGE, flags).block_s *
                       1e3);
  }
  for (int i = 0; rank0 && i < kWarmSaves; ++i) std::filesystem::remove_all(dir + "." + std::to_string(i));
  return Median(block_ms);
}

}  // namespace

void RunReplicaCheck(const Args& args) {
  ErrorPtr err = MakeError();
  ContextPtr ctx = MakeContext(args.transport, err.get());
  const int rank = ckpt_context_rank(ctx.get());
  const RankLayout layout = RankLayout::Whole(Geometry::Of(args), {static_cast<uint32_t>(rank)});
  PageBuffer buffer(layout.bytes());
  // Advice only: where the kernel gives no huge pages, both kinds of save see the same small ones.
  (void)madvise(buffer.data(), buffer.size(), MADV_HUGEPAGE);
  FillPattern(buffer, layout);
  StatePtr state = MakeState(buffer, layout, err.get());
  Reporter out(true, ".rank" + std::to_string(rank));
  out.Print("replica_memcpy_ms", MemcpyMilliseconds(buffer));
  for (const auto& [name, flags] : {std::pair<std::string, uint64_t>{"staged", 0},
                                    std::pair<std::string, uint64_t>{"cow", CKPT_SAVE_COPY_ON_WRITE}}) {
    const std::string dir = args.dir + "." + name;
    const double plain_ms = WarmBlockMs(ctx.get(), state.get(), dir, flags, err.get());
    const double checked_ms =
        WarmBlockMs(ctx.get(), state.get(), dir + ".checked", flags | CKPT_SAVE_CHECK_REPLICAS, err.get());
    out.Print(("replica_" + name + "_block_ms").c_str(), plain_ms);
    out.Print(("replica_" + name + "_check_block_ms").c_str(), checked_ms);
  }
  if (rank == 0) Reporter(true).Print("replica_ranks", static_cast<uint64_t>(ckpt_context_world_size(ctx.get())));
}

}  // namespace bench

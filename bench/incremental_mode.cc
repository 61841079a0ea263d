// ckpt_bench incremental on N ranks: what an incremental save (CKPT_SAVE_INCREMENTAL) writes, and how long it takes,
// for a fine-tuning state with 95 % of its bytes frozen. The state is 20 equal tensors, rows split over the ranks;
// bench.t0 (5 % of the bytes) is the part that trains. A first save records the digests; then bench.t0 changes in
// every element, and the same state is saved twice: in full (the baseline, without the flag) and incrementally
// against the first. Rank 0 prints the bytes each wrote into its data directory, their ratio, and each save's time
// until committed and until ckpt_save returned (the incremental one hashes the whole state at the call).
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "bench/bench_support.h"

namespace bench {
namespace {

constexpr uint32_t kTensors = 20;  // bench.t0 is 1/20 = 5 % of the state

SaveTiming TimedIncrementalSave(ckpt_context_t* ctx, ckpt_state_t* state, const std::string& dir, const char* base,
                                ckpt_error_t* err) {
  ckpt_request_t* raw = nullptr;
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.flags = CKPT_SAVE_INCREMENTAL;
  opts.base = base;
  const auto start = Clock::now();
  Check(ckpt_save(ctx, state, dir.c_str(), &opts, &raw, err), err, "ckpt_save " + dir);
  const double block_s = SecondsSince(start);
  RequestPtr request(raw);
  Check(ckpt_request_wait(request.get(), 0, err), err, "ckpt_request_wait for " + dir);
  return {block_s, SecondsSince(start)};
}

// The bytes of the files in `dir`/data: what the save wrote.
uint64_t DataBytes(const std::string& dir) {
  uint64_t bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/data")) {
    if (entry.is_regular_file()) bytes += entry.file_size();
  }
  return bytes;
}

}  // namespace

void RunIncremental(const Args& args) {
  ErrorPtr err = MakeError();
  ContextPtr ctx = MakeContext(args.transport, err.get());
  const int rank = ckpt_context_rank(ctx.get());
  const int world = ckpt_context_world_size(ctx.get());
  const Geometry geometry{kTensors, args.bytes / kTensors / kRowBytes};
  RankLayout layout(geometry);
  for (uint32_t t = 0; t < kTensors; ++t) {
    const uint64_t first = geometry.rows_per_tensor * rank / world;
    const uint64_t last = geometry.rows_per_tensor * (rank + 1) / world;
    layout.Add(t, first, last - first, {});
  }
  PageBuffer buffer(layout.bytes());
  FillPattern(buffer, layout);
  StatePtr state = MakeState(buffer, layout, err.get());
  const std::string base = args.dir + ".base", full = args.dir + ".full", incremental = args.dir + ".incremental";
  (void)TimedIncrementalSave(ctx.get(), state.get(), base, nullptr, err.get());

  // A training step: every element of the trainable tensor changes.
  const RowBlock& trained = layout.blocks().front();
  auto* words = reinterpret_cast<uint32_t*>(buffer.data() + trained.offset);
  for (uint64_t i = 0; i < trained.bytes() / sizeof(uint32_t); ++i) words[i] ^= 0x5a5a5a5au;

  Synchronize(ctx.get(), args.dir + ".sync", err.get());
  const SaveTiming full_timing = TimedSave(ctx.get(), state.get(), full, err.get());
  Synchronize(ctx.get(), args.dir + ".sync", err.get());
  const SaveTiming incremental_timing =
      TimedIncrementalSave(ctx.get(), state.get(), incremental, base.c_str(), err.get());
  if (rank != 0) return;
  // One logical checkpoint: the reader sees every byte of the state, most of them in the base's files.
  CheckStoredOnce(incremental, geometry.tensor_bytes() * kTensors, err.get());
  const uint64_t full_bytes = DataBytes(full), incremental_bytes = DataBytes(incremental);
  Reporter out(true);
  out.Print("incremental_full_bytes", full_bytes);
  out.Print("incremental_written_bytes", incremental_bytes);
  out.Print("incremental_bytes_ratio", static_cast<double>(incremental_bytes) / static_cast<double>(full_bytes));
  out.Print("incremental_full_save_s", full_timing.durable_s);
  out.Print("incremental_save_s", incremental_timing.durable_s);
  out.Print("incremental_time_ratio", incremental_timing.durable_s / full_timing.durable_s);
  out.Print("incremental_full_block_ms", full_timing.block_s * 1e3);
  out.Print("incremental_block_ms", incremental_timing.block_s * 1e3);
  std::filesystem::remove_all(base);
  std::filesystem::remove_all(full);
  std::filesystem::remove_all(incremental);
}

}  // namespace bench

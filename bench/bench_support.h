// What ckpt_bench's modes share: a rank's state as runs of whole rows of global tensors, filled with a pattern that
// every rank computes alike and checked after a load; owners of the C API's handles; and the `name value` output
// that bench/run reads. Like a user's trainer, it uses the public C API (ckpt.h) only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ckpt.h"

namespace bench {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kColumns = 1024;
constexpr uint64_t kRowBytes = kColumns * sizeof(float);
constexpr uint64_t kPageBytes = 4096;

// A failure to report: the benchmark stops and exits non-zero.
class BenchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The command line of every measuring mode.
struct Args {
  std::string mode;
  std::string dir;
  uint64_t bytes = 0;    // the whole checkpoint, whatever part of it this rank holds
  uint32_t tensors = 8;  // bench.t0 .. bench.t<T-1>, equal in size
  int32_t transport = CKPT_TRANSPORT_DEFAULT;
};

double SecondsSince(Clock::time_point start);

// Anonymous page-aligned memory, as a trainer's large host tensors are; unmapped (returned to the system) when
// destroyed, so that each phase of the benchmark holds only the memory it needs.
class PageBuffer {
 public:
  explicit PageBuffer(uint64_t size);
  ~PageBuffer();
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  uint64_t size_;
};

// The checkpoint's tensors: `tensors` F32 tensors of [rows_per_tensor, kColumns].
struct Geometry {
  uint32_t tensors;
  uint64_t rows_per_tensor;

  static Geometry Of(const Args& args) { return {args.tensors, args.bytes / args.tensors / kRowBytes}; }
  uint64_t tensor_bytes() const { return rows_per_tensor * kRowBytes; }
};

// Rows [first_row, first_row + rows) of tensor bench.t<tensor>, held at `offset` in a rank's buffer.
struct RowBlock {
  uint32_t tensor = 0;
  uint64_t first_row = 0;
  uint64_t rows = 0;
  std::vector<uint32_t> replica_id;  // empty: the only copy
  uint64_t offset = 0;

  uint64_t bytes() const { return rows * kRowBytes; }
};

// What one rank holds or asks for: row blocks laid end to end in one buffer.
class RankLayout {
 public:
  explicit RankLayout(Geometry geometry) : geometry_(geometry) {}

  // The whole of every tensor, with `replica_id` on each (empty: not replicated).
  static RankLayout Whole(Geometry geometry, const std::vector<uint32_t>& replica_id);

  void Add(uint32_t tensor, uint64_t first_row, uint64_t rows, std::vector<uint32_t> replica_id);

  const Geometry& geometry() const { return geometry_; }
  const std::vector<RowBlock>& blocks() const { return blocks_; }
  uint64_t bytes() const { return bytes_; }

 private:
  Geometry geometry_;
  std::vector<RowBlock> blocks_;
  uint64_t bytes_ = 0;
};

void FillPattern(const PageBuffer& buffer, const RankLayout& layout);
// Fails unless a sample of every block (one word per 4 KiB page, and the last word) holds the pattern: a page the
// load skipped or misplaced fails, at a cost of microseconds per MiB.
void VerifySample(const PageBuffer& buffer, const RankLayout& layout);

// Owners of the C API's handles.
struct ErrorFree {
  void operator()(ckpt_error_t* e) const { ckpt_error_free(e); }
};
struct ContextFree {
  void operator()(ckpt_context_t* c) const { ckpt_context_free(c); }
};
struct StateFree {
  void operator()(ckpt_state_t* s) const { ckpt_state_free(s); }
};
struct RequestFree {
  void operator()(ckpt_request_t* r) const { ckpt_request_free(r); }
};
struct ReaderFree {
  void operator()(ckpt_reader_t* r) const { ckpt_reader_free(r); }
};
using ErrorPtr = std::unique_ptr<ckpt_error_t, ErrorFree>;
using ContextPtr = std::unique_ptr<ckpt_context_t, ContextFree>;
using StatePtr = std::unique_ptr<ckpt_state_t, StateFree>;
using RequestPtr = std::unique_ptr<ckpt_request_t, RequestFree>;
using ReaderPtr = std::unique_ptr<ckpt_reader_t, ReaderFree>;

void Check(int32_t status, const ckpt_error_t* err, const std::string& what);
ErrorPtr MakeError();
// Collective: returns once every rank has connected, so the ranks leave it together.
ContextPtr MakeContext(int32_t transport, ckpt_error_t* err);
// Registers the layout's blocks over `buffer`.
StatePtr MakeState(const PageBuffer& buffer, const RankLayout& layout, ckpt_error_t* err);
// Registers the layout's blocks in CUDA memory of `device`: block i at block_memory[i].
StatePtr MakeDeviceState(const std::vector<void*>& block_memory, int32_t device, const RankLayout& layout,
                         ckpt_error_t* err);
struct SaveTiming {
  double block_s;    // until ckpt_save returned: the registered buffers may change again
  double durable_s;  // until ckpt_request_wait returned: the checkpoint is committed
};

// Collective: saves `state` to `dir` (through the memory tier for CKPT_TIER_MEMORY; CKPT_SAVE_* `flags`) and waits
// for the commit.
SaveTiming TimedSave(ckpt_context_t* ctx, ckpt_state_t* state, const std::string& dir, ckpt_error_t* err,
                     uint64_t tier = CKPT_TIER_STORAGE, uint64_t flags = 0);

// The baseline of a save's blocking time: one memcpy of the whole state into memory that is already faulted in.
double MemcpyMilliseconds(const PageBuffer& source);

// Lines the ranks up before a timed collective: an empty save into `dir`, waited for on every rank (its commit
// reaches every rank within a store round trip), then removed by rank 0.
void Synchronize(ckpt_context_t* ctx, const std::string& dir, ckpt_error_t* err);
// Fails unless the checkpoint at `dir` stores exactly `bytes` of tensor data: replicas were written once.
void CheckStoredOnce(const std::string& dir, uint64_t bytes, ckpt_error_t* err);

// The library's counters for this rank; false where this libckpt predates ckpt_context_stats_get.
bool LibraryStats(const ckpt_context_t* ctx, ckpt_context_stats* stats, ckpt_error_t* err);

// Collects `name value` lines and writes them to standard output in one write when destroyed, so that the lines
// of ranks sharing one output never interleave. `suffix` is appended to every name (".rank2": one value per rank).
class Reporter {
 public:
  explicit Reporter(bool enabled, std::string suffix = "") : enabled_(enabled), suffix_(std::move(suffix)) {}
  ~Reporter();
  Reporter(const Reporter&) = delete;
  Reporter& operator=(const Reporter&) = delete;

  void Print(const char* name, double value);
  void Print(const char* name, uint64_t value);

 private:
  bool enabled_;
  std::string suffix_;
  std::string lines_;
};

// The modes that measure loads across ranks and layouts (load_modes.cc).
void RunReshardSave(const Args& args);
void RunReshardLoad(const Args& args);
void RunReplicatedLoad(const Args& args);
// The modes that stage from CUDA memory (device_modes.cc).
// Prints "available" when ckpt accepts a shard in CUDA memory, else "unavailable: <ckpt's reason>".
void RunCudaProbe();
void RunDeviceSave(const Args& args);

// bench/replica_mode.cc: the stall that replicas checking each other (CKPT_SAVE_CHECK_REPLICAS) add to a save.
void RunReplicaCheck(const Args& args);
// bench/incremental_mode.cc: what an incremental save (CKPT_SAVE_INCREMENTAL) writes, beside a full save.
void RunIncremental(const Args& args);
// bench/compress_mode.cc: ckpt's block codec beside zstd (`codec`), and saves with and without CKPT_SAVE_COMPRESS
// (`throttled-save`); each parses its own command line (argv[1] is the mode).
void RunCodec(int argc, char** argv);
void RunThrottledSave(int argc, char** argv);
// bench/memory_modes.cc: the memory tier.
void RunMemory(const Args& args);
void RunMemoryCrash(const Args& args);

}  // namespace bench

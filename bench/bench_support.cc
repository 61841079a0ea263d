#include "bench/bench_support.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace bench {

double SecondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

PageBuffer::PageBuffer(uint64_t size) : size_(size) {
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) throw BenchError("cannot map " + std::to_string(size) + " bytes: " + strerror(errno));
  data_ = static_cast<char*>(data);
}

PageBuffer::~PageBuffer() { munmap(data_, size_); }

RankLayout RankLayout::Whole(Geometry geometry, const std::vector<uint32_t>& replica_id) {
  RankLayout layout(geometry);
  for (uint32_t t = 0; t < geometry.tensors; ++t) layout.Add(t, 0, geometry.rows_per_tensor, replica_id);
  return layout;
}

void RankLayout::Add(uint32_t tensor, uint64_t first_row, uint64_t rows, std::vector<uint32_t> replica_id) {
  if (tensor >= geometry_.tensors || rows == 0 || first_row + rows > geometry_.rows_per_tensor) {
    throw BenchError("rows [" + std::to_string(first_row) + ", " + std::to_string(first_row + rows) + ") of tensor " +
                     std::to_string(tensor) + " are not in the checkpoint's geometry");
  }
  RowBlock block;
  block.tensor = tensor;
  block.first_row = first_row;
  block.rows = rows;
  block.replica_id = std::move(replica_id);
  block.offset = bytes_;
  bytes_ += block.bytes();
  blocks_.push_back(std::move(block));
}

namespace {

// The value of word `index` (row-major, over the whole tensor) of tensor `tensor`: a hash, never zero, the same on
// every rank whatever part of the tensor it holds, so replicas agree and a buffer the load did not fill fails.
uint32_t PatternWord(uint32_t tensor, uint64_t index) {
  const uint64_t mixed = (index + 1) * 0x9E3779B97F4A7C15ull ^ (tensor + 1ull) * 0xBF58476D1CE4E5B9ull;
  return static_cast<uint32_t>(mixed >> 32) | 1u;
}

uint32_t* BlockWords(const PageBuffer& buffer, const RowBlock& block) {
  return reinterpret_cast<uint32_t*>(buffer.data() + block.offset);
}

void CheckWord(const RowBlock& block, const uint32_t* words, uint64_t local) {
  const uint64_t global = block.first_row * kColumns + local;
  if (words[local] == PatternWord(block.tensor, global)) return;
  char message[200];
  std::snprintf(message, sizeof message,
                "loaded tensor bench.t%u word %" PRIu64 " (row %" PRIu64 ") is 0x%08x, expected 0x%08x", block.tensor,
                global, global / kColumns, words[local], PatternWord(block.tensor, global));
  throw BenchError(message);
}

}  // namespace

void FillPattern(const PageBuffer& buffer, const RankLayout& layout) {
  for (const RowBlock& block : layout.blocks()) {
    uint32_t* words = BlockWords(buffer, block);
    const uint64_t first = block.first_row * kColumns;
    for (uint64_t i = 0; i < block.rows * kColumns; ++i) words[i] = PatternWord(block.tensor, first + i);
  }
}

void VerifySample(const PageBuffer& buffer, const RankLayout& layout) {
  const uint64_t words_per_page = kPageBytes / sizeof(uint32_t);
  for (const RowBlock& block : layout.blocks()) {
    const uint32_t* words = BlockWords(buffer, block);
    const uint64_t count = block.rows * kColumns;
    // The position within the page moves from page to page, so that a shifted copy fails too.
    for (uint64_t page = 0; page * words_per_page < count; ++page) {
      CheckWord(block, words, std::min(page * words_per_page + (page * 37) % words_per_page, count - 1));
    }
    CheckWord(block, words, count - 1);
  }
}

void Check(int32_t status, const ckpt_error_t* err, const std::string& what) {
  if (status == CKPT_OK) return;
  throw BenchError(what + " failed: " + ckpt_status_string(status) + ": " + ckpt_error_message(err));
}

ErrorPtr MakeError() {
  ckpt_error_t* err = nullptr;
  if (ckpt_error_create(&err) != CKPT_OK) throw BenchError("cannot create an error object");
  return ErrorPtr(err);
}

ContextPtr MakeContext(int32_t transport, ckpt_error_t* err) {
  ckpt_context_options options;
  ckpt_context_options_init(&options, sizeof options);
  options.transport = transport;
  ckpt_context_t* ctx = nullptr;
  Check(ckpt_context_create(&options, &ctx, err), err, "ckpt_context_create");
  return ContextPtr(ctx);
}

namespace {

// Registers the layout's blocks, block i at `block_data[i]` in memory of `memory_kind` (on `device` for CUDA).
StatePtr MakeStateOver(const std::vector<void*>& block_data, const RankLayout& layout, int32_t memory_kind,
                       int32_t device, ckpt_error_t* err) {
  ckpt_state_t* raw = nullptr;
  Check(ckpt_state_create(&raw, err), err, "ckpt_state_create");
  StatePtr state(raw);
  const uint64_t global_shape[2] = {layout.geometry().rows_per_tensor, kColumns};
  for (size_t i = 0; i < layout.blocks().size(); ++i) {
    const RowBlock& block = layout.blocks()[i];
    const std::string key = "bench.t" + std::to_string(block.tensor);
    const uint64_t local_shape[2] = {block.rows, kColumns};
    const uint64_t offset[2] = {block.first_row, 0};
    ckpt_tensor_shard shard;
    ckpt_tensor_shard_init(&shard, sizeof shard);
    shard.key = key.c_str();
    shard.dtype = CKPT_DTYPE_F32;
    shard.ndim = 2;
    shard.global_shape = global_shape;
    shard.local_shape = local_shape;
    shard.global_offset = offset;
    shard.replica_ndim = static_cast<uint32_t>(block.replica_id.size());
    shard.replica_id = block.replica_id.empty() ? nullptr : block.replica_id.data();
    shard.memory_kind = memory_kind;
    shard.device = device;
    shard.data = block_data[i];
    shard.data_size = block.bytes();
    Check(ckpt_state_add_tensor(state.get(), &shard, err), err, "ckpt_state_add_tensor " + key);
  }
  return state;
}

}  // namespace

StatePtr MakeState(const PageBuffer& buffer, const RankLayout& layout, ckpt_error_t* err) {
  std::vector<void*> block_data;
  for (const RowBlock& block : layout.blocks()) block_data.push_back(buffer.data() + block.offset);
  return MakeStateOver(block_data, layout, CKPT_MEMORY_HOST, 0, err);
}

StatePtr MakeDeviceState(const std::vector<void*>& block_memory, int32_t device, const RankLayout& layout,
                         ckpt_error_t* err) {
  if (block_memory.size() != layout.blocks().size()) {
    throw BenchError(std::to_string(block_memory.size()) + " device buffers for " +
                     std::to_string(layout.blocks().size()) + " row blocks");
  }
  return MakeStateOver(block_memory, layout, CKPT_MEMORY_CUDA, device, err);
}

void Synchronize(ckpt_context_t* ctx, const std::string& dir, ckpt_error_t* err) {
  ckpt_state_t* raw_state = nullptr;
  Check(ckpt_state_create(&raw_state, err), err, "ckpt_state_create");
  StatePtr empty(raw_state);
  ckpt_request_t* raw = nullptr;
  Check(ckpt_save(ctx, empty.get(), dir.c_str(), nullptr, &raw, err), err, "ckpt_save " + dir);
  RequestPtr request(raw);
  Check(ckpt_request_wait(request.get(), 0, err), err, "ckpt_request_wait for " + dir);
  if (ckpt_context_rank(ctx) == 0) std::filesystem::remove_all(dir);
}

SaveTiming TimedSave(ckpt_context_t* ctx, ckpt_state_t* state, const std::string& dir, ckpt_error_t* err, uint64_t tier,
                     uint64_t flags) {
  ckpt_request_t* raw = nullptr;
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.tier = tier;
  opts.flags = flags;
  // No options for a plain save to storage: a library older than these fields refuses the larger struct.
  const ckpt_save_options* options = tier == CKPT_TIER_STORAGE && flags == 0 ? nullptr : &opts;
  const auto start = Clock::now();
  Check(ckpt_save(ctx, state, dir.c_str(), options, &raw, err), err, "ckpt_save " + dir);
  const double block_s = SecondsSince(start);
  RequestPtr request(raw);
  Check(ckpt_request_wait(request.get(), 0, err), err, "ckpt_request_wait for " + dir);
  return {block_s, SecondsSince(start)};
}

void CheckStoredOnce(const std::string& dir, uint64_t bytes, ckpt_error_t* err) {
  ckpt_reader_t* raw = nullptr;
  Check(ckpt_reader_open(dir.c_str(), &raw, err), err, "ckpt_reader_open " + dir);
  ReaderPtr reader(raw);
  ckpt_checkpoint_info info = CKPT_CHECKPOINT_INFO_INIT;
  Check(ckpt_reader_info(reader.get(), &info, err), err, "ckpt_reader_info");
  if (info.total_bytes != bytes) {
    throw BenchError("the state of " + std::to_string(bytes) + " distinct bytes was stored as " +
                     std::to_string(info.total_bytes) + " bytes in " + dir);
  }
}

// Weak, so that this benchmark also runs against a libckpt built before the call existed (comparing versions is
// what it is for); the call's address is then null.
#pragma weak ckpt_context_stats_get

bool LibraryStats(const ckpt_context_t* ctx, ckpt_context_stats* stats, ckpt_error_t* err) {
  if (&ckpt_context_stats_get == nullptr) return false;
  *stats = CKPT_CONTEXT_STATS_INIT;
  Check(ckpt_context_stats_get(ctx, stats, err), err, "ckpt_context_stats_get");
  return true;
}

Reporter::~Reporter() {
  if (lines_.empty()) return;
  std::fwrite(lines_.data(), 1, lines_.size(), stdout);
  std::fflush(stdout);
}

void Reporter::Print(const char* name, double value) {
  if (!enabled_) return;
  char line[160];
  std::snprintf(line, sizeof line, "%s%s %.6f\n", name, suffix_.c_str(), value);
  lines_ += line;
}

void Reporter::Print(const char* name, uint64_t value) {
  if (!enabled_) return;
  char line[160];
  std::snprintf(line, sizeof line, "%s%s %" PRIu64 "\n", name, suffix_.c_str(), value);
  lines_ += line;
}

// The baseline of the save's blocking time: one memcpy of the whole state into memory that is already faulted in.
double MemcpyMilliseconds(const PageBuffer& source) {
  PageBuffer target(source.size());
  std::memset(target.data(), 0, target.size());
  const auto start = Clock::now();
  std::memcpy(target.data(), source.data(), source.size());
  const double ms = SecondsSince(start) * 1e3;
  // Reading the copy back keeps the compiler from dropping a copy whose target is never used.
  if (std::memcmp(target.data() + target.size() - kPageBytes, source.data() + source.size() - kPageBytes, kPageBytes) !=
      0) {
    throw BenchError("the memcpy baseline produced a different copy");
  }
  return ms;
}

}  // namespace bench

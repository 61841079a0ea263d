// The helpers every scenario program shares; see scenario_common.h.
#include "scenario_common.h"

#include <cstdio>
#include <cstdlib>

namespace scenario {

[[noreturn]] void Die(int rank, const std::string& why) {
  if (rank < 0) {
    std::fprintf(stderr, "scenario FAILED before its context existed: %s\n", why.c_str());
  } else {
    std::fprintf(stderr, "scenario rank %d FAILED: %s\n", rank, why.c_str());
  }
  std::exit(1);
}

Session::Session(ckpt_log_fn log, void* log_user) {
  ckpt_error_create(&err);
  ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
  // CKPT_TIMEOUT_MS, where a scenario sets it, wins: 0 takes the timeout from the environment.
  opts.timeout_ms = std::getenv("CKPT_TIMEOUT_MS") != nullptr ? 0 : 20000;
  opts.log = log;
  opts.log_user = log_user;
  if (ckpt_context_create(&opts, &ctx, err) != CKPT_OK) Die(-1, ckpt_error_message(err));
  rank = ckpt_context_rank(ctx);
  world = ckpt_context_world_size(ctx);
}

Session::~Session() {
  ckpt_context_free(ctx);
  ckpt_error_free(err);
}

void Session::Check(int32_t status, const char* what) const {
  if (status != CKPT_OK) Die(rank, std::string(what) + ": " + ckpt_error_message(err));
}

float ValueAt(uint64_t tensor_seed, uint64_t flat_index) {
  return static_cast<float>((tensor_seed * 7919 + flat_index) % 16777216);
}

std::vector<float> RowSlab(uint64_t seed, uint64_t cols, uint64_t row_begin, uint64_t row_end) {
  std::vector<float> out((row_end - row_begin) * cols);
  for (uint64_t r = row_begin; r < row_end; ++r) {
    for (uint64_t c = 0; c < cols; ++c) out[(r - row_begin) * cols + c] = ValueAt(seed, r * cols + c);
  }
  return out;
}

uint64_t SplitPoint(uint64_t extent, int part, int parts) { return extent * part / parts; }

std::vector<float>& Buffers::New(size_t n) {
  floats.emplace_back(n, -1.0f);
  return floats.back();
}

void AddShard(const Session& s, ckpt_state_t* state, const char* key, const std::vector<uint64_t>& global,
              const std::vector<uint64_t>& local, const std::vector<uint64_t>& offset, std::vector<float>& data,
              uint32_t flags, const uint32_t* replica, uint32_t replica_ndim) {
  AddTypedShard(s, state, key, CKPT_DTYPE_F32, global, local, offset, data.data(), data.size(), flags, 0, 0, replica,
                replica_ndim);
}

void RegisterLayout(const Session& s, ckpt_state_t* state, Buffers& buffers, bool fill) {
  const uint64_t r0 = SplitPoint(kRows, s.rank, s.world), r1 = SplitPoint(kRows, s.rank + 1, s.world);
  auto& w = buffers.New((r1 - r0) * kCols);
  if (fill) w = RowSlab(1, kCols, r0, r1);
  AddShard(s, state, "w", {kRows, kCols}, {r1 - r0, kCols}, {r0, 0}, w);

  auto& bias = buffers.New(kVec);
  if (fill) bias = RowSlab(2, kVec, 0, 1);
  const uint32_t replica = static_cast<uint32_t>(s.rank);
  AddShard(s, state, "bias", {kVec}, {kVec}, {0}, bias, 0, &replica, 1);

  const uint64_t total = kOptRows * kOptCols;
  const uint64_t f0 = SplitPoint(total, s.rank, s.world), f1 = SplitPoint(total, s.rank + 1, s.world);
  auto& m = buffers.New(f1 - f0);
  if (fill) {
    for (uint64_t i = f0; i < f1; ++i) m[i - f0] = ValueAt(3, i);
  }
  AddTypedShard(s, state, "adam.m", CKPT_DTYPE_F32, {kOptRows, kOptCols}, {kOptRows, kOptCols}, {0, 0}, m.data(),
                m.size(), CKPT_SHARD_FLATTENED, f0, f1);
}

void AddTypedShard(const Session& s, ckpt_state_t* state, const char* key, int32_t dtype,
                   const std::vector<uint64_t>& global, const std::vector<uint64_t>& local,
                   const std::vector<uint64_t>& offset, void* data, uint64_t elements, uint32_t flags,
                   uint64_t flat_start, uint64_t flat_end, const uint32_t* replica, uint32_t replica_ndim) {
  ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
  shard.key = key;
  shard.dtype = dtype;
  shard.ndim = static_cast<uint32_t>(global.size());
  shard.global_shape = global.data();
  shard.local_shape = local.data();
  shard.global_offset = offset.data();
  shard.flags = flags;
  shard.flat_start = flat_start;
  shard.flat_end = flat_end;
  shard.replica_id = replica;
  shard.replica_ndim = replica_ndim;
  shard.data = data;
  shard.data_size = elements * ckpt_dtype_size(dtype);
  s.Check(ckpt_state_add_tensor(state, &shard, s.err), key);
}

CheckpointReader::CheckpointReader(const std::string& dir) {
  ckpt_error_create(&err_);
  Check(ckpt_reader_open(dir.c_str(), &reader_, err_));
  Check(ckpt_reader_info(reader_, &info_, err_));
}

CheckpointReader::~CheckpointReader() {
  ckpt_reader_free(reader_);
  ckpt_error_free(err_);
}

ckpt_tensor_info CheckpointReader::Tensor(uint64_t tensor) const {
  ckpt_tensor_info info = CKPT_TENSOR_INFO_INIT;
  Check(ckpt_reader_tensor(reader_, tensor, &info, err_));
  return info;
}

ckpt_chunk_info CheckpointReader::Chunk(uint64_t tensor, uint64_t chunk) const {
  ckpt_chunk_info info = CKPT_CHUNK_INFO_INIT;
  Check(ckpt_reader_chunk(reader_, tensor, chunk, &info, err_));
  return info;
}

void CheckpointReader::Verify() const { Check(ckpt_reader_verify(reader_, err_)); }

void CheckpointReader::Check(int32_t status) const {
  if (status != CKPT_OK) Die(0, ckpt_error_message(err_));
}

void CheckRows(const Session& s, const char* key, uint64_t seed, const std::vector<float>& got, uint64_t first_flat) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != ValueAt(seed, first_flat + i)) {
      Die(s.rank, std::string(key) + ": element " + std::to_string(first_flat + i) + " is " + std::to_string(got[i]) +
                      ", expected " + std::to_string(ValueAt(seed, first_flat + i)));
    }
  }
}

void ExpectStatus(const Session& s, int32_t got, int32_t expected, const char* what,
                  const std::vector<std::string>& texts) {
  const std::string message = ckpt_error_message(s.err);
  if (got != expected) {
    Die(s.rank, std::string(what) + ": expected " + ckpt_status_string(expected) + ", got " + ckpt_status_string(got) +
                    ": " + message);
  }
  for (const auto& text : texts) {
    if (message.find(text) == std::string::npos)
      Die(s.rank, std::string(what) + ": message lacks '" + text + "': " + message);
  }
}

ckpt_context_stats Stats(const Session& s) {
  ckpt_context_stats stats = CKPT_CONTEXT_STATS_INIT;
  s.Check(ckpt_context_stats_get(s.ctx, &stats, s.err), "stats");
  return stats;
}

uint64_t DataBytes(const std::string& dir) {
  const std::string command = "du -sb --apparent-size '" + dir + "/data' | cut -f1";
  FILE* pipe = popen(command.c_str(), "r");
  unsigned long long bytes = 0;
  const bool measured = pipe != nullptr && std::fscanf(pipe, "%llu", &bytes) == 1;
  if (pipe != nullptr) pclose(pipe);
  if (!measured) Die(0, "cannot measure the data files of " + dir);
  return bytes;
}

void SaveAndWait(const Session& s, ckpt_state_t* state, const char* dir, const std::string& what) {
  ckpt_request_t* request = nullptr;
  s.Check(ckpt_save(s.ctx, state, dir, nullptr, &request, s.err), what.c_str());
  s.Check(ckpt_request_wait(request, 0, s.err), (what + "'s wait").c_str());
  ckpt_request_free(request);
}

}  // namespace scenario

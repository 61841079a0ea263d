// Shared by the multi-process scenario programs (scenario_core, scenario_async, scenario_exchange): a rank's
// context, deterministic tensor values any rank can check, and the common layout that save and load register.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt.h"

namespace scenario {

// Prints why this rank failed and exits 1; a negative rank means the rank is not known yet (no context).
[[noreturn]] void Die(int rank, const std::string& why);

// This rank's context, created from the launcher's environment; any failure to create it is fatal.
struct Session {
  ckpt_context_t* ctx = nullptr;
  ckpt_error_t* err = nullptr;
  int rank = 0;
  int world = 1;

  explicit Session(ckpt_log_fn log = nullptr, void* log_user = nullptr);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Dies naming `what` and the error message unless `status` is CKPT_OK.
  void Check(int32_t status, const char* what) const;
};

// Every element's value is a function of its tensor and global index, so any rank can check any element.
float ValueAt(uint64_t tensor_seed, uint64_t flat_index);

// A row-major [rows, cols] F32 tensor's rows [row_begin, row_end), filled with its values.
std::vector<float> RowSlab(uint64_t seed, uint64_t cols, uint64_t row_begin, uint64_t row_end);

// Where part `part` of `parts` near-equal parts of [0, extent) begins.
uint64_t SplitPoint(uint64_t extent, int part, int parts);

// Keeps registered tensors' memory alive (and at a stable address) for as long as the state uses it.
struct Buffers {
  std::vector<std::vector<float>> floats;
  std::vector<float>& New(size_t n);
};

// Registers an F32 shard of `key`; dies if the state refuses it.
void AddShard(const Session& s, ckpt_state_t* state, const char* key, const std::vector<uint64_t>& global,
              const std::vector<uint64_t>& local, const std::vector<uint64_t>& offset, std::vector<float>& data,
              uint32_t flags = 0, const uint32_t* replica = nullptr, uint32_t replica_ndim = 0);

constexpr uint64_t kRows = 37, kCols = 23;       // "w": rows split over the world (uneven)
constexpr uint64_t kVec = 101;                   // "bias": replicated on every rank
constexpr uint64_t kOptRows = 11, kOptCols = 9;  // "adam.m": flattened ranges over the world

constexpr uint64_t kBigRows = 512, kBigCols = 1024;  // save-replicated's "big": 2 MiB F32, replicated on every rank

// The common tensors of save and load: sharded rows "w", a replicated vector "bias" and flattened optimizer state
// "adam.m", in that order in `buffers`, holding their values if `fill`. Every rank's registration depends on world
// size only, so a load from a different world size reshards.
void RegisterLayout(const Session& s, ckpt_state_t* state, Buffers& buffers, bool fill);

// Registers a shard of `key` in `dtype`, `elements` of it at `data`; dies if the state refuses it.
void AddTypedShard(const Session& s, ckpt_state_t* state, const char* key, int32_t dtype,
                   const std::vector<uint64_t>& global, const std::vector<uint64_t>& local,
                   const std::vector<uint64_t>& offset, void* data, uint64_t elements, uint32_t flags = 0,
                   uint64_t flat_start = 0, uint64_t flat_end = 0, const uint32_t* replica = nullptr,
                   uint32_t replica_ndim = 0);

// A checkpoint opened with the C reader, for the modes that run without a context; any failure is fatal, naming it.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& dir);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const ckpt_checkpoint_info& info() const { return info_; }
  ckpt_tensor_info Tensor(uint64_t tensor) const;
  ckpt_chunk_info Chunk(uint64_t tensor, uint64_t chunk) const;
  // Reads every chunk back and checks it against its checksums.
  void Verify() const;

 private:
  void Check(int32_t status) const;

  ckpt_error_t* err_ = nullptr;
  ckpt_reader_t* reader_ = nullptr;
  ckpt_checkpoint_info info_ = CKPT_CHECKPOINT_INFO_INIT;
};

// Dies unless `got` holds tensor `seed`'s values from flat index `first_flat` on.
void CheckRows(const Session& s, const char* key, uint64_t seed, const std::vector<float>& got, uint64_t first_flat);

// Dies unless `got` is `expected` and the error message holds every one of `texts`.
void ExpectStatus(const Session& s, int32_t got, int32_t expected, const char* what,
                  const std::vector<std::string>& texts);

ckpt_context_stats Stats(const Session& s);

// Saves `state` to `dir` and waits until it is committed; dies naming `what` otherwise.
void SaveAndWait(const Session& s, ckpt_state_t* state, const char* dir, const std::string& what);

// The bytes of the checkpoint `dir`'s data files (their apparent sizes); dies if they cannot be measured.
uint64_t DataBytes(const std::string& dir);

}  // namespace scenario

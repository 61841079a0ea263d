// Compressed saves (CKPT_SAVE_COMPRESS, CKPT_SHARD_COMPRESS) on real ranks (tests/compress.cmake). The state: "w"
// (3 MiB of BF16 weights, rows split over the ranks), "m" (2 MiB of F32, replicated on every rank), "ids" (1 MiB of
// I32, rows split) and a common entry of 96 KiB of text, each in values a function of the step:
//   save DIR all|shard|cow  saves step 1 compressed: everything (written by the workers after the call, or
//                        copy-on-write), or only "w", whose shards ask for it; rank 0 checks that the data files are
//                        smaller than the bytes saved (by a quarter, or by a sixth of "w" alone), that the checkpoint
//                        is format 3, and that the reader verifies it
//   load DIR             every rank loads whole tensors, then a column slice of each (ranged reads inside the
//                        compressed blocks), and checks every element
//   corrupt DIR          (one rank) after a byte of a compressed data file was flipped: the load and the reader's
//                        verification fail with CKPT_E_CORRUPT
//   refused DIR          CKPT_SAVE_COMPRESS with CKPT_SAVE_IN_PLACE, or with a memory tier, is CKPT_E_INVALID_ARGUMENT
//   increment BASE NEXT  step 1 compressed and incremental, then step 2 against it, where only "ids" changed: NEXT
//                        writes less than "ids" takes uncompressed, refers to BASE's compressed boxes, and loads
//                        back exactly
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ckpt.h"
#include "scenario_common.h"

using namespace scenario;

namespace {

constexpr uint64_t kWRows = 1536, kWCols = 1024;     // BF16
constexpr uint64_t kMRows = 512, kMCols = 1024;      // F32, replicated
constexpr uint64_t kIdsRows = 256, kIdsCols = 1024;  // I32
constexpr uint64_t kCommonBytes = 96 << 10;

// A weight-like value: small, of both signs, spread over a few binary orders of magnitude.
float Weight(uint64_t seed, uint64_t i) {
  uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (seed << 32);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return (static_cast<double>(h % 20001) - 10000.0) * 1e-6;
}

uint16_t ToBF16(float f) {
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  return static_cast<uint16_t>(bits >> 16);
}

uint16_t WAt(uint64_t step, uint64_t i) { return ToBF16(Weight(10 + step, i)); }
float MAt(uint64_t step, uint64_t i) { return Weight(20 + step, i); }
int32_t IdsAt(uint64_t step, uint64_t i) { return static_cast<int32_t>((i * 7 + step * 13) % 1000); }
std::string CommonOf(uint64_t step) {
  std::string text;
  while (text.size() < kCommonBytes) text += "step " + std::to_string(step) + " of a compressed save; ";
  text.resize(kCommonBytes);
  return text;
}

// The tensors' memory of one state.
struct Tensors {
  std::vector<uint16_t> w;
  std::vector<float> m;
  std::vector<int32_t> ids;
};

// A box of rows [r0, r1) and columns [c0, c1).
struct Box2 {
  uint64_t r0, r1, c0, c1;
  uint64_t size() const { return (r1 - r0) * (c1 - c0); }
};

Box2 RowsOf(const Session& s, uint64_t rows, uint64_t cols) {
  return {SplitPoint(rows, s.rank, s.world), SplitPoint(rows, s.rank + 1, s.world), 0, cols};
}

template <typename T, typename F>
void Fill(std::vector<T>& data, const Box2& b, uint64_t cols, F value) {
  data.resize(b.size());
  for (uint64_t r = b.r0; r < b.r1; ++r) {
    for (uint64_t c = b.c0; c < b.c1; ++c) data[(r - b.r0) * (b.c1 - b.c0) + (c - b.c0)] = value(r * cols + c);
  }
}

void Add(const Session& s, ckpt_state_t* state, const char* key, int32_t dtype, uint64_t rows, uint64_t cols,
         const Box2& b, void* data, uint32_t flags, const uint32_t* replica) {
  AddTypedShard(s, state, key, dtype, {rows, cols}, {b.r1 - b.r0, b.c1 - b.c0}, {b.r0, b.c0}, data, b.size(), flags, 0,
                0, replica, replica != nullptr ? 1 : 0);
}

// The state of `step` as saved: "w" and "ids" rows split, "m" replicated; `w_flags` on "w"'s shard.
ckpt_state_t* SavedState(const Session& s, Tensors& t, uint64_t step, uint32_t w_flags, const std::string& common) {
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "ckpt_state_create");
  const Box2 w = RowsOf(s, kWRows, kWCols), ids = RowsOf(s, kIdsRows, kIdsCols), m{0, kMRows, 0, kMCols};
  Fill(t.w, w, kWCols, [&](uint64_t i) { return WAt(step, i); });
  Fill(t.m, m, kMCols, [&](uint64_t i) { return MAt(step, i); });
  Fill(t.ids, ids, kIdsCols, [&](uint64_t i) { return IdsAt(step, i); });
  const uint32_t replica = static_cast<uint32_t>(s.rank);
  Add(s, state, "w", CKPT_DTYPE_BF16, kWRows, kWCols, w, t.w.data(), w_flags, nullptr);
  Add(s, state, "m", CKPT_DTYPE_F32, kMRows, kMCols, m, t.m.data(), 0, &replica);
  Add(s, state, "ids", CKPT_DTYPE_I32, kIdsRows, kIdsCols, ids, t.ids.data(), 0, nullptr);
  s.Check(ckpt_state_add_common(state, "notes", common.data(), common.size(), s.err), "ckpt_state_add_common");
  return state;
}

void Save(const Session& s, const char* dir, uint64_t step, uint64_t flags, uint32_t w_flags, const char* base) {
  Tensors t;
  const std::string common = CommonOf(step);
  ckpt_state_t* state = SavedState(s, t, step, w_flags, common);
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.flags = flags;
  opts.base = base;
  ckpt_request_t* request = nullptr;
  s.Check(ckpt_save(s.ctx, state, dir, &opts, &request, s.err), "ckpt_save");
  // The buffers change once the call returns: the checkpoint must hold the values at the call.
  for (uint16_t& v : t.w) v = 0;
  for (float& v : t.m) v = -1;
  s.Check(ckpt_request_wait(request, 0, s.err), dir);
  ckpt_request_free(request);
  ckpt_state_free(state);
}

constexpr uint64_t kWBytes = kWRows * kWCols * 2;
constexpr uint64_t kRawBytes = kWBytes + kMRows * kMCols * 4 + kIdsRows * kIdsCols * 4 + kCommonBytes;

int SaveMode(const char* dir, const std::string& how) {
  Session s;
  const uint64_t flags = how == "shard" ? 0
                         : how == "cow" ? CKPT_SAVE_COMPRESS | CKPT_SAVE_COPY_ON_WRITE
                                        : CKPT_SAVE_COMPRESS;
  Save(s, dir, 1, flags, how == "shard" ? CKPT_SHARD_COMPRESS : 0, nullptr);
  if (s.rank == 0) {
    const uint64_t bytes = DataBytes(dir);
    std::printf("%s: %llu data bytes for %llu saved\n", how.c_str(), static_cast<unsigned long long>(bytes),
                static_cast<unsigned long long>(kRawBytes));
    const uint64_t most = how == "shard" ? kRawBytes - kWBytes / 6 : kRawBytes * 3 / 4;
    if (bytes > most || (how == "shard" && bytes < kRawBytes - kWBytes)) {
      Die(0, how + ": " + std::to_string(bytes) + " data bytes, expected at most " + std::to_string(most));
    }
    CheckpointReader reader(dir);
    if (reader.info().format_major != 3) Die(0, "format " + std::to_string(reader.info().format_major) + ", not 3");
    reader.Verify();
  }
  return 0;
}

// The boxes a rank loads: whole tensors, or with `columns` a slice of columns of each (ranged reads inside blocks).
struct Parts {
  Box2 w, m, ids;
};

Parts PartsOf(const Session& s, bool columns) {
  auto part = [&](uint64_t rows, uint64_t cols) {
    return columns ? Box2{0, rows, SplitPoint(cols, s.rank, s.world) + 3, SplitPoint(cols, s.rank + 1, s.world)}
                   : Box2{0, rows, 0, cols};
  };
  return {part(kWRows, kWCols), part(kMRows, kMCols), part(kIdsRows, kIdsCols)};
}

// A state to load the parts into, `got` sized for them.
ckpt_state_t* LoadingState(const Session& s, const Parts& p, Tensors& got) {
  got.w.resize(p.w.size());
  got.m.resize(p.m.size());
  got.ids.resize(p.ids.size());
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "ckpt_state_create");
  Add(s, state, "w", CKPT_DTYPE_BF16, kWRows, kWCols, p.w, got.w.data(), 0, nullptr);
  Add(s, state, "m", CKPT_DTYPE_F32, kMRows, kMCols, p.m, got.m.data(), 0, nullptr);
  Add(s, state, "ids", CKPT_DTYPE_I32, kIdsRows, kIdsCols, p.ids, got.ids.data(), 0, nullptr);
  return state;
}

// Dies unless the parts loaded into `got` hold "w" and "m" of `step` and "ids" of `ids_step`.
void CheckParts(const Session& s, const std::string& what, const Parts& p, const Tensors& got, uint64_t step,
                uint64_t ids_step) {
  Tensors want;
  Fill(want.w, p.w, kWCols, [&](uint64_t i) { return WAt(step, i); });
  Fill(want.m, p.m, kMCols, [&](uint64_t i) { return MAt(step, i); });
  Fill(want.ids, p.ids, kIdsCols, [&](uint64_t i) { return IdsAt(ids_step, i); });
  if (got.w != want.w) Die(s.rank, what + ": 'w' differs from step " + std::to_string(step) + "'s");
  if (got.m != want.m) Die(s.rank, what + ": 'm' differs from step " + std::to_string(step) + "'s");
  if (got.ids != want.ids) Die(s.rank, what + ": 'ids' differs from step " + std::to_string(ids_step) + "'s");
}

// Loads `dir` into this rank's parts and checks step `step`'s values, the common entry's included.
void LoadPart(const Session& s, const std::string& dir, uint64_t step, bool columns) {
  const Parts parts = PartsOf(s, columns);
  Tensors got;
  ckpt_state_t* state = LoadingState(s, parts, got);
  s.Check(ckpt_load(s.ctx, state, dir.c_str(), nullptr, s.err), ("loading " + dir).c_str());
  const void* notes = nullptr;
  uint64_t notes_size = 0;
  s.Check(ckpt_state_common(state, "notes", &notes, &notes_size, s.err), "ckpt_state_common");
  const std::string common(static_cast<const char*>(notes), notes_size);
  ckpt_state_free(state);
  const std::string what = dir + (columns ? " (column slices)" : " (whole tensors)");
  CheckParts(s, what, parts, got, step, step);
  if (common != CommonOf(step)) Die(s.rank, what + ": 'notes' differs");
}

int LoadMode(const char* dir, uint64_t step) {
  Session s;
  LoadPart(s, dir, step, false);
  LoadPart(s, dir, step, true);
  return 0;
}

int CorruptMode(const char* dir) {
  Session s;
  const std::string file = std::string(dir) + "/data/0-0.bin";
  FILE* f = std::fopen(file.c_str(), "r+b");
  if (f == nullptr) Die(s.rank, "cannot open " + file);
  std::fseek(f, 0, SEEK_END);
  const long at = std::ftell(f) / 2;
  std::fseek(f, at, SEEK_SET);
  const int byte = std::fgetc(f);
  std::fseek(f, at, SEEK_SET);
  std::fputc(byte ^ 0x10, f);
  std::fclose(f);
  Tensors got;
  ckpt_state_t* state = LoadingState(s, PartsOf(s, false), got);
  ExpectStatus(s, ckpt_load(s.ctx, state, dir, nullptr, s.err), CKPT_E_CORRUPT, "loading a flipped byte",
               {"data/0-0.bin"});
  ckpt_state_free(state);
  ckpt_reader_t* reader = nullptr;
  int32_t status = ckpt_reader_open(dir, &reader, s.err);
  if (status == CKPT_OK) status = ckpt_reader_verify(reader, s.err);
  ExpectStatus(s, status, CKPT_E_CORRUPT, "verifying a flipped byte", {"0-0.bin"});
  ckpt_reader_free(reader);
  return 0;
}

int RefusedMode(const char* dir) {
  Session s;
  Tensors t;
  const std::string common = CommonOf(1);
  ckpt_state_t* state = SavedState(s, t, 1, 0, common);
  const uint64_t refused[][2] = {{CKPT_SAVE_COMPRESS | CKPT_SAVE_IN_PLACE, CKPT_TIER_STORAGE},
                                 {CKPT_SAVE_COMPRESS, CKPT_TIER_MEMORY}};
  for (const auto& [flags, tier] : refused) {
    ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
    opts.flags = flags;
    opts.tier = tier;
    ckpt_request_t* request = nullptr;
    ExpectStatus(s, ckpt_save(s.ctx, state, dir, &opts, &request, s.err), CKPT_E_INVALID_ARGUMENT,
                 "a compressed save that cannot be", {"CKPT_SAVE_COMPRESS"});
  }
  ckpt_state_free(state);
  struct stat st;
  if (stat(dir, &st) == 0) Die(s.rank, std::string("a refused save left ") + dir + " behind");
  return 0;
}

int IncrementMode(const char* base, const char* next) {
  Session s;
  Save(s, base, 1, CKPT_SAVE_COMPRESS | CKPT_SAVE_INCREMENTAL, 0, nullptr);
  // Step 2 changes "ids" and the common entry only: "w" and "m" are step 1's.
  Tensors t;
  const std::string common = CommonOf(2);
  ckpt_state_t* state = SavedState(s, t, 1, 0, common);
  Fill(t.ids, RowsOf(s, kIdsRows, kIdsCols), kIdsCols, [&](uint64_t i) { return IdsAt(2, i); });
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.flags = CKPT_SAVE_COMPRESS | CKPT_SAVE_INCREMENTAL;
  opts.base = base;
  ckpt_request_t* request = nullptr;
  s.Check(ckpt_save(s.ctx, state, next, &opts, &request, s.err), "ckpt_save");
  s.Check(ckpt_request_wait(request, 0, s.err), next);
  ckpt_request_free(request);
  ckpt_state_free(state);
  if (s.rank == 0) {
    const uint64_t bytes = DataBytes(next);
    std::printf("the incremental step wrote %llu data bytes\n", static_cast<unsigned long long>(bytes));
    if (bytes > kIdsRows * kIdsCols * 4) Die(0, "the incremental step wrote " + std::to_string(bytes) + " bytes");
  }
  // "w" and "m" as step 1's, "ids" as step 2's.
  const Parts parts = PartsOf(s, false);
  Tensors got;
  ckpt_state_t* loaded = LoadingState(s, parts, got);
  s.Check(ckpt_load(s.ctx, loaded, next, nullptr, s.err), "loading the incremental step");
  ckpt_state_free(loaded);
  CheckParts(s, next, parts, got, 1, 2);
  if (s.rank == 0) CheckpointReader(next).Verify();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 2 ? argv[1] : "";
  if (mode == "save" && argc > 3) return SaveMode(argv[2], argv[3]);
  if (mode == "load") return LoadMode(argv[2], 1);
  if (mode == "corrupt") return CorruptMode(argv[2]);
  if (mode == "refused") return RefusedMode(argv[2]);
  if (mode == "increment" && argc > 3) return IncrementMode(argv[2], argv[3]);
  std::fprintf(stderr,
               "usage: %s save DIR all|shard|cow | load DIR | corrupt DIR | refused DIR | increment BASE NEXT\n",
               argv[0]);
  return 2;
}

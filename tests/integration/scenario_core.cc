// Saving and loading across world sizes, and what must be refused, run on N ranks by ckpt-launch from
// tests/integration/run.sh. Each mode checks what every rank sees through the public C API and exits non-zero,
// saying why, if a behaviour is broken. Usage: ckpt_scenario_core MODE ARGS...
//
//   save DIR                    tensors (sharded, replicated, flattened), objects, common entries
//   save-in-place DIR           the same with CKPT_SAVE_IN_PLACE: durable on return, buffers overwritten then
//   load DIR                    loads the same data with this world's layout and checks every element
//   save-replicated DIR         one large tensor replicated on every rank, plus small replicated ones
//   check-dedup DIR             (1 rank) every unique byte stored once, writers balanced
//   save-invalid KIND DIR       a bad global state: every rank must get CKPT_E_MISMATCH, nothing created
//   load-expect DIR CODE TEXT.. load must fail with CODE on every rank, the message holding each TEXT
//   load-strict DIR             missing/unexpected keys under each strictness
//   load-shape-mismatch DIR     zero-padding and stripping with CKPT_SHARD_ALLOW_SHAPE_MISMATCH
//   load-cast DIR               the F32 layout of `save` loaded as BF16 (and F64) with CKPT_SHARD_ALLOW_DTYPE_CAST
//   dead-rank DIR               the last rank exits during a save; the others fail naming it
//   save-exists DIR             saving onto a committed checkpoint fails with CKPT_E_ALREADY_EXISTS
//   corrupt-chunk DIR KEY       (no context) flips a bit inside KEY's first chunk, prints the file name
//   xor-byte FILE OFFSET MASK   (no context) XORs one byte of a file
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ckpt.h"
#include "scenario_common.h"

namespace scenario {
namespace {

// With CKPT_SAVE_IN_PLACE in `flags`, every byte of this rank's must be durable when ckpt_save returns.
int Save(const char* dir, int32_t expected, uint64_t flags) {
  Session s;
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  Buffers buffers;
  RegisterLayout(s, state, buffers, true);
  std::string rng = "rng-of-rank-" + std::to_string(s.rank);
  const uint64_t grid = static_cast<uint64_t>(s.world), index = static_cast<uint64_t>(s.rank);
  s.Check(ckpt_state_add_object(state, "rng", 1, &grid, &index, rng.data(), rng.size(), s.err), "object");
  const uint64_t step = 1234;
  s.Check(ckpt_state_add_common(state, "step", &step, sizeof step, s.err), "common step");
  std::string big(200000, 'x');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
  s.Check(ckpt_state_add_common(state, "config", big.data(), big.size(), s.err), "common config");
  ckpt_request_t* request = nullptr;
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.flags = flags;
  const int32_t status = ckpt_save(s.ctx, state, dir, &opts, &request, s.err);
  ExpectStatus(s, status, expected, "save", {});
  if (status == CKPT_OK && (flags & CKPT_SAVE_IN_PLACE) != 0) {
    ckpt_request_stats stats = CKPT_REQUEST_STATS_INIT;
    s.Check(ckpt_request_stats_get(request, &stats, s.err), "request stats");
    if (stats.bytes_written != stats.bytes_to_write || stats.bytes_to_write == 0) {
      Die(s.rank, "ckpt_save in place returned with " + std::to_string(stats.bytes_written) + " of " +
                      std::to_string(stats.bytes_to_write) + " bytes written");
    }
    // The buffers may change once the call returns: what was saved must not.
    for (std::vector<float>& floats : buffers.floats) std::fill(floats.begin(), floats.end(), -1.0f);
  }
  if (status == CKPT_OK) s.Check(ckpt_request_wait(request, 0, s.err), "wait");
  ckpt_request_free(request);
  ckpt_state_free(state);
  return 0;
}

int Load(const char* dir) {
  Session s;
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  Buffers buffers;
  RegisterLayout(s, state, buffers, false);
  ckpt_load_options opts = CKPT_LOAD_OPTIONS_INIT;
  opts.unexpected_keys = CKPT_STRICT_IGNORE;  // "rng" is saved by a world of another size
  s.Check(ckpt_load(s.ctx, state, dir, &opts, s.err), "load");
  const uint64_t r0 = SplitPoint(kRows, s.rank, s.world);
  CheckRows(s, "w", 1, buffers.floats[0], r0 * kCols);
  CheckRows(s, "bias", 2, buffers.floats[1], 0);
  CheckRows(s, "adam.m", 3, buffers.floats[2], SplitPoint(kOptRows * kOptCols, s.rank, s.world));
  const void* data = nullptr;
  uint64_t size = 0;
  s.Check(ckpt_state_common(state, "step", &data, &size, s.err), "common step");
  if (size != 8 || *static_cast<const uint64_t*>(data) != 1234) Die(s.rank, "common 'step' is wrong");
  s.Check(ckpt_state_common(state, "config", &data, &size, s.err), "common config");
  if (size != 200000 || static_cast<const char*>(data)[27] != 'b') Die(s.rank, "common 'config' is wrong");
  ckpt_state_free(state);
  if (s.rank == 0) std::printf("load: %d ranks, every element checked\n", s.world);
  return 0;
}

int SaveReplicated(const char* dir) {
  Session s;
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  Buffers buffers;
  auto& big = buffers.New(kBigRows * kBigCols);
  big = RowSlab(4, kBigCols, 0, kBigRows);
  const uint32_t replica = static_cast<uint32_t>(s.rank);
  AddShard(s, state, "big", {kBigRows, kBigCols}, {kBigRows, kBigCols}, {0, 0}, big, 0, &replica, 1);
  for (int i = 0; i < 8; ++i) {
    const uint64_t n = 1000 * (i + 1);
    auto& small = buffers.New(n);
    small = RowSlab(10 + i, n, 0, 1);
    const std::string key = "small." + std::to_string(i);
    AddShard(s, state, key.c_str(), {n}, {n}, {0}, small, 0, &replica, 1);
  }
  ckpt_request_t* request = nullptr;
  s.Check(ckpt_save(s.ctx, state, dir, nullptr, &request, s.err), "save");
  s.Check(ckpt_request_wait(request, 0, s.err), "wait");
  ckpt_request_free(request);
  ckpt_state_free(state);
  return 0;
}

uint64_t FileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

int CheckDedup(const char* dir) {
  const CheckpointReader reader(dir);
  const ckpt_checkpoint_info& info = reader.info();
  uint64_t unique = 0, chunks = 0, largest_chunk = 0;
  std::map<std::string, uint64_t> bytes_per_file;
  for (uint64_t t = 0; t < info.tensor_count; ++t) {
    const ckpt_tensor_info tensor = reader.Tensor(t);
    uint64_t volume = 1;
    for (uint32_t d = 0; d < tensor.ndim; ++d) volume *= tensor.shape[d];
    unique += volume * ckpt_dtype_size(tensor.dtype);
    for (uint64_t c = 0; c < tensor.chunk_count; ++c) {
      const ckpt_chunk_info chunk = reader.Chunk(t, c);
      bytes_per_file[chunk.file] += chunk.byte_length;
      largest_chunk = chunk.byte_length > largest_chunk ? chunk.byte_length : largest_chunk;
      ++chunks;
    }
  }
  // Data files are named data/<rank>-<worker>.bin: a writer's bytes are those of its files together.
  std::map<std::string, uint64_t> bytes_per_writer;
  uint64_t stored = 0, on_disk = 0, most = 0, least = UINT64_MAX;
  for (const auto& [file, bytes] : bytes_per_file) {
    stored += bytes;
    on_disk += FileSize(std::string(dir) + "/" + file);
    bytes_per_writer[file.substr(0, file.find('-'))] += bytes;
  }
  for (const auto& [writer, bytes] : bytes_per_writer) {
    most = bytes > most ? bytes : most;
    least = bytes < least ? bytes : least;
  }
  std::printf(
      "unique %llu B, stored %llu B in %zu files (%llu B on disk), writers %llu..%llu B, largest chunk %llu B\n",
      (unsigned long long)unique, (unsigned long long)stored, bytes_per_file.size(), (unsigned long long)on_disk,
      (unsigned long long)least, (unsigned long long)most, (unsigned long long)largest_chunk);
  if (stored != unique) Die(0, "stored bytes differ from the unique bytes: a replica was written twice");
  if (on_disk > unique + chunks * 4096) Die(0, "data files hold more than the unique bytes plus alignment padding");
  if (bytes_per_writer.size() != info.world_size) Die(0, "not every rank wrote: the writing is not balanced");
  if (most - least > largest_chunk) Die(0, "writers' byte counts differ by more than one shard");
  reader.Verify();
  return 0;
}

bool DirectoryHasEntryStartingWith(const std::string& parent, const std::string& prefix) {
  DIR* d = opendir(parent.c_str());
  if (d == nullptr) return false;
  bool found = false;
  while (dirent* e = readdir(d)) found |= std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0;
  closedir(d);
  return found;
}

// Registers a state that is fine on each rank but wrong together; KIND says how.
int SaveInvalid(const char* kind, const char* dir) {
  Session s;
  if (s.world < 2) Die(s.rank, "save-invalid needs at least 2 ranks");
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  Buffers buffers;
  const std::string k = kind;
  uint64_t rows = 8, r0 = SplitPoint(rows, s.rank, s.world), r1 = SplitPoint(rows, s.rank + 1, s.world);
  const bool last = s.rank == s.world - 1;
  if (k == "overlap" && last) r0 -= 1;  // the last rank's box reaches into its neighbour's
  if (k == "gap" && last) r1 -= 1;      // nobody holds the last row
  uint64_t global_cols = (k == "shape" && last) ? 5 : 4;
  auto& data = buffers.New((r1 - r0) * global_cols);
  ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
  const uint64_t global[2] = {rows, global_cols}, local[2] = {r1 - r0, global_cols}, offset[2] = {r0, 0};
  shard.key = "layer.weight";
  shard.dtype = (k == "dtype" && last) ? CKPT_DTYPE_I32 : CKPT_DTYPE_F32;
  shard.ndim = 2;
  shard.global_shape = global;
  shard.local_shape = local;
  shard.global_offset = offset;
  shard.data = data.data();
  shard.data_size = data.size() * sizeof(float);
  s.Check(ckpt_state_add_tensor(state, &shard, s.err), "add");
  ckpt_request_t* request = nullptr;
  const int32_t status = ckpt_save(s.ctx, state, dir, nullptr, &request, s.err);
  const std::string message = ckpt_error_message(s.err);
  if (status != CKPT_E_MISMATCH) {
    Die(s.rank, "expected CKPT_E_MISMATCH, got " + std::string(ckpt_status_string(status)) + ": " + message);
  }
  if (message.find("layer.weight") == std::string::npos || message.find("rank") == std::string::npos) {
    Die(s.rank, "the error does not name the key and the ranks: " + message);
  }
  const std::string path = dir;
  // Rank 0 removes the temporary directory it claimed once the save is refused, which the other ranks may learn
  // first: a collective call (a load of nothing, refused alike everywhere) lets rank 0 finish before anyone looks.
  const std::string absent = path + "-absent";
  if (ckpt_load(s.ctx, state, absent.c_str(), nullptr, s.err) != CKPT_E_NOT_FOUND) Die(s.rank, "load of nothing");
  const std::string parent = path.substr(0, path.find_last_of('/'));
  const std::string name = path.substr(path.find_last_of('/') + 1);
  if (DirectoryHasEntryStartingWith(parent, name)) Die(s.rank, "a refused save left " + path + "*");
  if (s.rank == 0) std::printf("%s refused on every rank: %s\n", kind, message.c_str());
  ckpt_state_free(state);
  return 0;
}

int LoadExpect(int argc, char** argv) {
  Session s;
  const char* dir = argv[2];
  const int32_t expected = std::atoi(argv[3]);
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  Buffers buffers;
  RegisterLayout(s, state, buffers, false);
  ckpt_load_options opts = CKPT_LOAD_OPTIONS_INIT;
  opts.unexpected_keys = CKPT_STRICT_IGNORE;
  const int32_t status = ckpt_load(s.ctx, state, dir, &opts, s.err);
  const std::string message = ckpt_error_message(s.err);
  if (status != expected) {
    Die(s.rank, "expected status " + std::to_string(expected) + ", got " + ckpt_status_string(status) + ": " + message);
  }
  for (int i = 4; i < argc; ++i) {
    if (message.find(argv[i]) == std::string::npos)
      Die(s.rank, "message lacks '" + std::string(argv[i]) + "': " + message);
  }
  if (s.rank == 0) std::printf("load refused as expected: %s\n", message.c_str());
  ckpt_state_free(state);
  return 0;
}

void LogToString(void* user, int32_t, const char* message) { *static_cast<std::string*>(user) += message; }

// Asks for "w" as saved plus a key the checkpoint lacks; "bias", "adam.m" and "rng" are never asked for.
int32_t LoadWithStrictness(const Session& s, const char* dir, int32_t missing, int32_t unexpected,
                           std::vector<float>* w) {
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  const uint64_t r0 = SplitPoint(kRows, s.rank, s.world), r1 = SplitPoint(kRows, s.rank + 1, s.world);
  w->assign((r1 - r0) * kCols, -1.0f);
  std::vector<float> extra(4);
  AddShard(s, state, "w", {kRows, kCols}, {r1 - r0, kCols}, {r0, 0}, *w);
  AddShard(s, state, "not.in.checkpoint", {4}, {4}, {0}, extra);
  ckpt_load_options opts = CKPT_LOAD_OPTIONS_INIT;
  opts.missing_keys = missing;
  opts.unexpected_keys = unexpected;
  const int32_t status = ckpt_load(s.ctx, state, dir, &opts, s.err);
  ckpt_state_free(state);
  return status;
}

int LoadStrict(const char* dir) {
  std::string log;
  Session s(LogToString, &log);
  std::vector<float> w;
  const uint64_t first = SplitPoint(kRows, s.rank, s.world) * kCols;

  ExpectStatus(s, LoadWithStrictness(s, dir, CKPT_STRICT_FAIL, CKPT_STRICT_IGNORE, &w), CKPT_E_MISMATCH,
               "missing keys under FAIL", {"not.in.checkpoint"});

  ExpectStatus(s, LoadWithStrictness(s, dir, CKPT_STRICT_LOG, CKPT_STRICT_IGNORE, &w), CKPT_OK, "missing under LOG",
               {});
  if (log.find("not.in.checkpoint") == std::string::npos) Die(s.rank, "the missing key was not logged: " + log);
  CheckRows(s, "w", 1, w, first);

  ExpectStatus(s, LoadWithStrictness(s, dir, CKPT_STRICT_IGNORE, CKPT_STRICT_FAIL, &w), CKPT_E_MISMATCH,
               "unexpected keys under FAIL", {"bias", "adam.m"});

  log.clear();
  ExpectStatus(s, LoadWithStrictness(s, dir, CKPT_STRICT_IGNORE, CKPT_STRICT_LOG, &w), CKPT_OK, "unexpected under LOG",
               {});
  if (s.rank == 0 && log.find("bias") == std::string::npos) Die(s.rank, "unexpected keys were not logged: " + log);
  if (log.find("not.in.checkpoint") != std::string::npos) Die(s.rank, "a missing key was logged under IGNORE");
  CheckRows(s, "w", 1, w, first);
  if (s.rank == 0) std::printf("strictness: fail, log and ignore behave on every rank\n");
  return 0;
}

// "w" saved as [37, 23] is loaded as [40, 20]: rows 37..39 must be zero, columns 20..22 dropped.
int LoadShapeMismatch(const char* dir) {
  Session s;
  const uint64_t rows = 40, cols = 20;
  const uint64_t r0 = SplitPoint(rows, s.rank, s.world), r1 = SplitPoint(rows, s.rank + 1, s.world);
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  Buffers buffers;
  auto& w = buffers.New((r1 - r0) * cols);
  AddShard(s, state, "w", {rows, cols}, {r1 - r0, cols}, {r0, 0}, w);
  ckpt_load_options opts = CKPT_LOAD_OPTIONS_INIT;
  opts.unexpected_keys = CKPT_STRICT_IGNORE;
  ExpectStatus(s, ckpt_load(s.ctx, state, dir, &opts, s.err), CKPT_E_MISMATCH, "shape mismatch without the flag",
               {"'w'", "[37, 23]", "[40, 20]"});
  ckpt_state_free(state);

  s.Check(ckpt_state_create(&state, s.err), "state");
  AddShard(s, state, "w", {rows, cols}, {r1 - r0, cols}, {r0, 0}, w, CKPT_SHARD_ALLOW_SHAPE_MISMATCH);
  s.Check(ckpt_load(s.ctx, state, dir, &opts, s.err), "load with CKPT_SHARD_ALLOW_SHAPE_MISMATCH");
  for (uint64_t r = r0; r < r1; ++r) {
    for (uint64_t c = 0; c < cols; ++c) {
      const float expected = r < kRows ? ValueAt(1, r * kCols + c) : 0.0f;
      if (w[(r - r0) * cols + c] != expected) {
        Die(s.rank, "w[" + std::to_string(r) + "][" + std::to_string(c) + "] is " +
                        std::to_string(w[(r - r0) * cols + c]) + ", expected " + std::to_string(expected));
      }
    }
  }
  ckpt_state_free(state);
  if (s.rank == 0) std::printf("shape mismatch: padded with zeros and stripped\n");
  return 0;
}

// The BF16 bits nearest to the finite `value`, ties to the even ones: the nearer of the two BF16 values around it,
// measured in double, a reference that shares nothing with the library's conversion.
uint16_t NearestBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint32_t low = bits & 0xFFFF0000u, high = low + 0x10000u;  // toward zero, and the next away from it
  float low_value, high_value;
  std::memcpy(&low_value, &low, sizeof low);
  std::memcpy(&high_value, &high, sizeof high);
  const double below = std::fabs(static_cast<double>(value) - low_value);
  const double above = std::fabs(static_cast<double>(high_value) - value);
  const uint32_t nearest = below < above ? low : above < below ? high : ((low >> 16) & 1) ? high : low;
  return static_cast<uint16_t>(nearest >> 16);
}

// Dies unless `got` holds tensor `seed`'s values from flat index `first_flat` on, rounded to BF16.
void CheckBf16(const Session& s, const char* key, uint64_t seed, const std::vector<uint16_t>& got,
               uint64_t first_flat) {
  for (size_t i = 0; i < got.size(); ++i) {
    const float value = ValueAt(seed, first_flat + i);
    if (got[i] != NearestBf16(value)) {
      Die(s.rank, std::string(key) + ": element " + std::to_string(first_flat + i) + " (" + std::to_string(value) +
                      ") loaded as BF16 bits " + std::to_string(got[i]) + ", expected " +
                      std::to_string(NearestBf16(value)));
    }
  }
}

// The F32 tensors of `save`, loaded as BF16, resharded over this world: the rows of "w", the flattened ranges of
// "adam.m", and the replicated "bias", which odd ranks ask for as F64 (ranks may convert one tensor to different
// dtypes). Every element is checked against its rounding. Without the flag, every rank is refused.
int LoadCast(const char* dir) {
  Session s;
  ckpt_load_options opts = CKPT_LOAD_OPTIONS_INIT;
  opts.unexpected_keys = CKPT_STRICT_IGNORE;
  const uint64_t r0 = SplitPoint(kRows, s.rank, s.world), r1 = SplitPoint(kRows, s.rank + 1, s.world);
  std::vector<uint16_t> w((r1 - r0) * kCols);
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  AddTypedShard(s, state, "w", CKPT_DTYPE_BF16, {kRows, kCols}, {r1 - r0, kCols}, {r0, 0}, w.data(), w.size(), 0);
  ExpectStatus(s, ckpt_load(s.ctx, state, dir, &opts, s.err), CKPT_E_MISMATCH, "a cast without the flag",
               {"tensor 'w': stored as F32, registered as BF16 without CKPT_SHARD_ALLOW_DTYPE_CAST"});
  ckpt_state_free(state);

  s.Check(ckpt_state_create(&state, s.err), "state");
  const uint32_t cast = CKPT_SHARD_ALLOW_DTYPE_CAST;
  AddTypedShard(s, state, "w", CKPT_DTYPE_BF16, {kRows, kCols}, {r1 - r0, kCols}, {r0, 0}, w.data(), w.size(), cast);
  const bool wide = s.rank % 2 == 1;
  std::vector<uint16_t> bias(kVec);
  std::vector<double> wide_bias(kVec);
  AddTypedShard(s, state, "bias", wide ? CKPT_DTYPE_F64 : CKPT_DTYPE_BF16, {kVec}, {kVec}, {0},
                wide ? static_cast<void*>(wide_bias.data()) : bias.data(), kVec, cast);
  const uint64_t f0 = SplitPoint(kOptRows * kOptCols, s.rank, s.world);
  const uint64_t f1 = SplitPoint(kOptRows * kOptCols, s.rank + 1, s.world);
  std::vector<uint16_t> m(f1 - f0);
  AddTypedShard(s, state, "adam.m", CKPT_DTYPE_BF16, {kOptRows, kOptCols}, {kOptRows, kOptCols}, {0, 0}, m.data(),
                m.size(), cast | CKPT_SHARD_FLATTENED, f0, f1);
  s.Check(ckpt_load(s.ctx, state, dir, &opts, s.err), "load with CKPT_SHARD_ALLOW_DTYPE_CAST");
  ckpt_state_free(state);
  CheckBf16(s, "w", 1, w, r0 * kCols);
  CheckBf16(s, "adam.m", 3, m, f0);
  if (!wide) CheckBf16(s, "bias", 2, bias, 0);
  for (uint64_t i = 0; wide && i < kVec; ++i) {
    if (wide_bias[i] != ValueAt(2, i)) Die(s.rank, "bias: element " + std::to_string(i) + " is not exact in F64");
  }
  if (s.rank == 0) std::printf("cast: %d ranks loaded F32 as BF16 and F64, every element checked\n", s.world);
  return 0;
}

// The last rank leaves without a word before the save; every other rank must fail with CKPT_E_PEER_FAILED naming
// it, well within the timeout.
int DeadRank(const char* dir) {
  Session s;
  if (s.rank == s.world - 1) _exit(0);
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  Buffers buffers;
  auto& v = buffers.New(16);
  AddShard(s, state, "v", {16}, {16}, {0}, v);
  ckpt_request_t* request = nullptr;
  const int32_t status = ckpt_save(s.ctx, state, dir, nullptr, &request, s.err);
  ExpectStatus(s, status, CKPT_E_PEER_FAILED, "save with a dead rank", {"rank " + std::to_string(s.world - 1)});
  if (access(dir, F_OK) == 0) Die(s.rank, "a failed save left a directory at the target");
  if (s.rank == 0) std::printf("dead rank reported: %s\n", ckpt_error_message(s.err));
  ckpt_state_free(state);
  return 0;
}

// XORs one byte of a file with `mask`.
void XorByte(const std::string& file, uint64_t offset, int mask) {
  FILE* f = std::fopen(file.c_str(), "r+b");
  if (f == nullptr) Die(0, "cannot open " + file + ": " + std::strerror(errno));
  std::fseek(f, static_cast<long>(offset), SEEK_SET);
  const int c = std::fgetc(f);
  std::fseek(f, static_cast<long>(offset), SEEK_SET);
  std::fputc(c ^ mask, f);
  std::fclose(f);
}

// Flips one bit in the middle of the first chunk of `key` and prints the data file's name.
int CorruptChunk(const char* dir, const char* key) {
  const CheckpointReader reader(dir);
  for (uint64_t t = 0; t < reader.info().tensor_count; ++t) {
    if (std::strcmp(reader.Tensor(t).key, key) != 0) continue;
    const ckpt_chunk_info chunk = reader.Chunk(t, 0);
    XorByte(std::string(dir) + "/" + chunk.file, chunk.file_offset + chunk.byte_length / 2, 0x10);
    std::printf("%s\n", chunk.file);
    return 0;
  }
  Die(0, std::string("no tensor ") + key);
}

}  // namespace
}  // namespace scenario

int main(int argc, char** argv) {
  using namespace scenario;
  if (argc < 3) {
    std::fprintf(stderr, "usage: ckpt_scenario_core MODE ARGS... (see the comment at the top of scenario_core.cc)\n");
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "save") return Save(argv[2], CKPT_OK, 0);
  if (mode == "save-in-place") return Save(argv[2], CKPT_OK, CKPT_SAVE_IN_PLACE);
  if (mode == "save-exists") return Save(argv[2], CKPT_E_ALREADY_EXISTS, 0);
  if (mode == "load") return Load(argv[2]);
  if (mode == "save-replicated") return SaveReplicated(argv[2]);
  if (mode == "check-dedup") return CheckDedup(argv[2]);
  if (mode == "save-invalid" && argc == 4) return SaveInvalid(argv[2], argv[3]);
  if (mode == "load-expect" && argc >= 4) return LoadExpect(argc, argv);
  if (mode == "load-strict") return LoadStrict(argv[2]);
  if (mode == "load-shape-mismatch") return LoadShapeMismatch(argv[2]);
  if (mode == "load-cast") return LoadCast(argv[2]);
  if (mode == "dead-rank") return DeadRank(argv[2]);
  if (mode == "corrupt-chunk" && argc == 4) return CorruptChunk(argv[2], argv[3]);
  if (mode == "xor-byte" && argc == 5) {
    XorByte(argv[2], std::strtoull(argv[3], nullptr, 0), static_cast<int>(std::strtol(argv[4], nullptr, 0)));
    return 0;
  }
  std::fprintf(stderr, "ckpt_scenario_core: unknown mode or wrong arguments: %s\n", mode.c_str());
  return 2;
}

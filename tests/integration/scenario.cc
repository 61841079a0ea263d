// Multi-process scenarios, run on N ranks by ckpt-launch from tests/integration/run.sh. Each mode checks what every
// rank sees through the public C API and exits non-zero, saying why, if a behaviour is broken.
//
//   scenario save DIR                    tensors (sharded, replicated, flattened), objects, common entries
//   scenario load DIR                    loads the same data with this world's layout and checks every element
//   scenario save-replicated DIR         one large tensor replicated on every rank, plus small replicated ones
//   scenario check-dedup DIR             (1 rank) every unique byte stored once, writers balanced
//   scenario save-invalid KIND DIR       a bad global state: every rank must get CKPT_E_MISMATCH, nothing created
//   scenario load-expect DIR CODE TEXT.. load must fail with CODE on every rank, the message holding each TEXT
//   scenario load-strict DIR             missing/unexpected keys under each strictness
//   scenario load-shape-mismatch DIR     zero-padding and stripping with CKPT_SHARD_ALLOW_SHAPE_MISMATCH
//   scenario dead-rank DIR               the last rank exits during a save; the others fail naming it
//   scenario save-exists DIR             saving onto a committed checkpoint fails with CKPT_E_ALREADY_EXISTS
//   scenario corrupt-chunk DIR KEY       (no context) flips a bit inside KEY's first chunk, prints the file name
//   scenario xor-byte FILE OFFSET MASK   (no context) XORs one byte of a file
//   scenario async DIR                   buffers overwritten as soon as ckpt_save returns; back-to-back saves
//   scenario plan-cache DIR              an unchanged structure reuses the plan; a change on one rank replans
//   scenario worker-killed ROOT          a worker killed during a save fails it on every rank; latest untouched
//   scenario full-disk ROOT              ENOSPC fails the save on every rank; latest untouched
//   scenario big-state DIR               a state 4x the staging arena: saved, loaded, memory bounded
//   scenario context-fails CODE TEXT     creating the context must fail with CODE on this rank, naming TEXT
//   scenario load-replicated DIR         every rank loads the whole of save-replicated's state; prints bytes read
//   scenario load-replicated-expect-failure DIR   the same with a rank dying (CKPT_FAULT_EXIT_BEFORE_EXCHANGE):
//                                        every surviving rank must fail with CKPT_E_PEER_FAILED or CKPT_E_TIMEOUT
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ckpt.h"

namespace {

[[noreturn]] void Die(int rank, const std::string& why) {
  std::fprintf(stderr, "scenario rank %d FAILED: %s\n", rank, why.c_str());
  std::exit(1);
}

struct Session {
  ckpt_context_t* ctx = nullptr;
  ckpt_error_t* err = nullptr;
  int rank = 0;
  int world = 1;

  explicit Session(ckpt_log_fn log = nullptr, void* log_user = nullptr) {
    ckpt_error_create(&err);
    ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
    opts.timeout_ms = 20000;
    opts.log = log;
    opts.log_user = log_user;
    if (ckpt_context_create(&opts, &ctx, err) != CKPT_OK) Die(-1, ckpt_error_message(err));
    rank = ckpt_context_rank(ctx);
    world = ckpt_context_world_size(ctx);
  }
  ~Session() {
    ckpt_context_free(ctx);
    ckpt_error_free(err);
  }
  void Check(int32_t status, const char* what) const {
    if (status != CKPT_OK) Die(rank, std::string(what) + ": " + ckpt_error_message(err));
  }
};

// Every element's value is a function of its tensor and global index, so any rank can check any element.
float ValueAt(uint64_t tensor_seed, uint64_t flat_index) {
  return static_cast<float>((tensor_seed * 7919 + flat_index) % 16777216);
}

// A row-major [rows, cols] F32 tensor's rows [row_begin, row_end), filled with its values.
std::vector<float> RowSlab(uint64_t seed, uint64_t cols, uint64_t row_begin, uint64_t row_end) {
  std::vector<float> out((row_end - row_begin) * cols);
  for (uint64_t r = row_begin; r < row_end; ++r) {
    for (uint64_t c = 0; c < cols; ++c) out[(r - row_begin) * cols + c] = ValueAt(seed, r * cols + c);
  }
  return out;
}

uint64_t SplitPoint(uint64_t extent, int part, int parts) { return extent * part / parts; }

struct Buffers {
  std::vector<std::vector<float>> floats;
  std::vector<float>& New(size_t n) {
    floats.emplace_back(n, -1.0f);
    return floats.back();
  }
};

void AddShard(const Session& s, ckpt_state_t* state, const char* key, const std::vector<uint64_t>& global,
              const std::vector<uint64_t>& local, const std::vector<uint64_t>& offset, std::vector<float>& data,
              uint32_t flags = 0, const uint32_t* replica = nullptr, uint32_t replica_ndim = 0) {
  ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
  shard.key = key;
  shard.dtype = CKPT_DTYPE_F32;
  shard.ndim = static_cast<uint32_t>(global.size());
  shard.global_shape = global.data();
  shard.local_shape = local.data();
  shard.global_offset = offset.data();
  shard.flags = flags;
  shard.replica_id = replica;
  shard.replica_ndim = replica_ndim;
  shard.data = data.data();
  shard.data_size = data.size() * sizeof(float);
  s.Check(ckpt_state_add_tensor(state, &shard, s.err), key);
}

constexpr uint64_t kRows = 37, kCols = 23;       // "w": rows split over the world (uneven)
constexpr uint64_t kVec = 101;                   // "bias": replicated on every rank
constexpr uint64_t kOptRows = 11, kOptCols = 9;  // "adam.m": flattened ranges over the world

// The common layout used by save and load: sharded rows, a replicated vector, flattened optimizer state, an
// object per rank and common entries. Every rank's registration depends on world size only, so a load from a
// different world size reshards.
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
  ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
  const uint64_t shape[2] = {kOptRows, kOptCols}, zero[2] = {0, 0};
  shard.key = "adam.m";
  shard.dtype = CKPT_DTYPE_F32;
  shard.ndim = 2;
  shard.global_shape = shape;
  shard.local_shape = shape;
  shard.global_offset = zero;
  shard.flags = CKPT_SHARD_FLATTENED;
  shard.flat_start = f0;
  shard.flat_end = f1;
  shard.data = m.data();
  shard.data_size = m.size() * sizeof(float);
  s.Check(ckpt_state_add_tensor(state, &shard, s.err), "adam.m");
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

int Save(const char* dir, int32_t expected) {
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
  const int32_t status = ckpt_save(s.ctx, state, dir, nullptr, &request, s.err);
  ExpectStatus(s, status, expected, "save", {});
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

constexpr uint64_t kBigRows = 512, kBigCols = 1024;  // 2 MiB F32, replicated on every rank

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
  ckpt_error_t* err = nullptr;
  ckpt_error_create(&err);
  ckpt_reader_t* reader = nullptr;
  if (ckpt_reader_open(dir, &reader, err) != CKPT_OK) Die(0, ckpt_error_message(err));
  ckpt_checkpoint_info info = CKPT_CHECKPOINT_INFO_INIT;
  ckpt_reader_info(reader, &info, err);
  uint64_t unique = 0, chunks = 0, largest_chunk = 0;
  std::map<std::string, uint64_t> bytes_per_file;
  for (uint64_t t = 0; t < info.tensor_count; ++t) {
    ckpt_tensor_info tensor = CKPT_TENSOR_INFO_INIT;
    ckpt_reader_tensor(reader, t, &tensor, err);
    uint64_t volume = 1;
    for (uint32_t d = 0; d < tensor.ndim; ++d) volume *= tensor.shape[d];
    unique += volume * ckpt_dtype_size(tensor.dtype);
    for (uint64_t c = 0; c < tensor.chunk_count; ++c) {
      ckpt_chunk_info chunk = CKPT_CHUNK_INFO_INIT;
      ckpt_reader_chunk(reader, t, c, &chunk, err);
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
  if (ckpt_reader_verify(reader, err) != CKPT_OK) Die(0, ckpt_error_message(err));
  ckpt_reader_free(reader);
  ckpt_error_free(err);
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
  const std::string parent = path.substr(0, path.find_last_of('/'));
  const std::string name = path.substr(path.find_last_of('/') + 1);
  if (DirectoryHasEntryStartingWith(parent, name)) Die(s.rank, "a refused save created " + path + "*");
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

// Saves the layout of RegisterLayout with values shifted by `bump`, returns the request unwaited.
ckpt_request_t* StartLayoutSave(const Session& s, ckpt_state_t* state, const std::string& dir) {
  ckpt_request_t* request = nullptr;
  s.Check(ckpt_save(s.ctx, state, dir.c_str(), nullptr, &request, s.err), "save");
  return request;
}

ckpt_context_stats Stats(const Session& s) {
  ckpt_context_stats stats = CKPT_CONTEXT_STATS_INIT;
  s.Check(ckpt_context_stats_get(s.ctx, &stats, s.err), "stats");
  return stats;
}

// The moment ckpt_save returns, the buffers belong to the caller again: the checkpoint holds the old values.
// Two saves issued back to back both commit, each with its own values.
int Async(const char* dir) {
  Session s;
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  Buffers buffers;
  RegisterLayout(s, state, buffers, true);
  const std::string first = std::string(dir) + "/first", second = std::string(dir) + "/second";
  ckpt_request_t* one = StartLayoutSave(s, state, first);
  for (auto& buffer : buffers.floats) {
    for (float& v : buffer) v = -7.0f;  // overwritten while the first save may still be writing
  }
  ckpt_request_t* two = StartLayoutSave(s, state, second);
  s.Check(ckpt_request_wait(two, 0, s.err), "second save");
  s.Check(ckpt_request_wait(one, 0, s.err), "first save");
  ckpt_request_free(one);
  ckpt_request_free(two);
  ckpt_state_free(state);

  s.Check(ckpt_state_create(&state, s.err), "state");
  Buffers loaded;
  RegisterLayout(s, state, loaded, false);
  ckpt_load_options opts = CKPT_LOAD_OPTIONS_INIT;
  s.Check(ckpt_load(s.ctx, state, first.c_str(), &opts, s.err), "load first");
  CheckRows(s, "w", 1, loaded.floats[0], SplitPoint(kRows, s.rank, s.world) * kCols);
  s.Check(ckpt_load(s.ctx, state, second.c_str(), &opts, s.err), "load second");
  for (float v : loaded.floats[0]) {
    if (v != -7.0f) Die(s.rank, "the second save does not hold the overwritten values");
  }
  ckpt_state_free(state);
  if (s.rank == 0) std::printf("async: old values kept after overwrite; back-to-back saves both committed\n");
  return 0;
}

int PlanCache(const char* dir) {
  Session s;
  Buffers buffers;
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  RegisterLayout(s, state, buffers, true);
  for (int i = 0; i < 2; ++i) {
    ckpt_request_t* request = StartLayoutSave(s, state, std::string(dir) + "/same-" + std::to_string(i));
    s.Check(ckpt_request_wait(request, 0, s.err), "save");
    ckpt_request_free(request);
  }
  ckpt_context_stats stats = Stats(s);
  if (stats.plans_computed != 1 || stats.plans_reused != 1) {
    Die(s.rank, "two saves of one structure: expected 1 plan computed and 1 reused, got " +
                    std::to_string(stats.plans_computed) + " and " + std::to_string(stats.plans_reused));
  }
  // Only the last rank changes its structure: every rank must notice and plan again.
  auto& extra = buffers.New(5);
  if (s.rank == s.world - 1) AddShard(s, state, "only.on.last.rank", {5}, {5}, {0}, extra);
  ckpt_request_t* request = StartLayoutSave(s, state, std::string(dir) + "/changed");
  s.Check(ckpt_request_wait(request, 0, s.err), "save after a change");
  ckpt_request_free(request);
  stats = Stats(s);
  if (stats.plans_computed != 2 || stats.plans_reused != 1) {
    Die(s.rank, "a structure change on one rank was not detected everywhere: " + std::to_string(stats.plans_computed) +
                    " computed, " + std::to_string(stats.plans_reused) + " reused");
  }
  ckpt_state_free(state);
  if (s.rank == 0) std::printf("plan cache: reused while unchanged, replanned on every rank after a change\n");
  return 0;
}

// The I/O worker processes of this rank.
std::vector<pid_t> WorkerPids() {
  std::vector<pid_t> pids;
  DIR* proc = opendir("/proc");
  while (dirent* e = proc ? readdir(proc) : nullptr) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    FILE* f = std::fopen(("/proc/" + std::string(e->d_name) + "/stat").c_str(), "r");
    if (f == nullptr) continue;
    char comm[64] = {};
    char state = 0;
    int ppid = 0;
    if (std::fscanf(f, "%*d (%63[^)]) %c %d", comm, &state, &ppid) == 3 && ppid == getpid() &&
        std::strcmp(comm, "ckpt-io-worker") == 0) {
      pids.push_back(pid);
    }
    std::fclose(f);
  }
  if (proc) closedir(proc);
  return pids;
}

struct Managed {
  ckpt_manager_t* manager = nullptr;
  Buffers buffers;
  ckpt_state_t* state = nullptr;
};

void OpenManaged(const Session& s, const char* root, Managed* m, uint64_t rows_per_rank) {
  ckpt_manager_options opts = CKPT_MANAGER_OPTIONS_INIT;
  opts.keep_last = 3;
  s.Check(ckpt_manager_open(s.ctx, root, &opts, &m->manager, s.err), "manager open");
  s.Check(ckpt_state_create(&m->state, s.err), "state");
  const uint64_t rows = rows_per_rank * static_cast<uint64_t>(s.world), cols = 1024;
  auto& w = m->buffers.New(rows_per_rank * cols);
  w = RowSlab(9, cols, rows_per_rank * s.rank, rows_per_rank * (s.rank + 1));
  AddShard(s, m->state, "w", {rows, cols}, {rows_per_rank, cols}, {rows_per_rank * s.rank, 0}, w);
}

int32_t ManagedSave(const Session& s, Managed& m, uint64_t step) {
  ckpt_request_t* request = nullptr;
  int32_t status = ckpt_manager_save(m.manager, m.state, step, nullptr, &request, s.err);
  if (status == CKPT_OK) status = ckpt_request_wait(request, 0, s.err);
  ckpt_request_free(request);
  return status;
}

void ExpectLatest(const Session& s, const Managed& m, uint64_t expected) {
  uint64_t latest = 0;
  s.Check(ckpt_manager_latest(m.manager, &latest, s.err), "latest");
  if (latest != expected) Die(s.rank, "latest is " + std::to_string(latest) + ", expected " + std::to_string(expected));
}

bool StepExists(const Managed& m, uint64_t step) {
  char path[4096];
  ckpt_manager_step_path(m.manager, step, path, sizeof path, nullptr);
  return access(path, F_OK) == 0;
}

// A worker of the last rank is stopped, the save queued behind it, and the worker killed: the save fails on every
// rank (naming the worker), step 2 never appears, latest stays at 1, and the next save succeeds.
int WorkerKilled(const char* root) {
  Session s;
  Managed m;
  OpenManaged(s, root, &m, 64);
  s.Check(ManagedSave(s, m, 1), "step 1");
  std::vector<pid_t> victims;
  if (s.rank == s.world - 1) {
    victims = WorkerPids();
    if (victims.empty()) Die(s.rank, "no ckpt-io-worker child found");
    for (pid_t pid : victims) kill(pid, SIGSTOP);
  }
  ckpt_request_t* request = nullptr;
  s.Check(ckpt_manager_save(m.manager, m.state, 2, nullptr, &request, s.err), "step 2 start");
  for (pid_t pid : victims) kill(pid, SIGKILL);
  ExpectStatus(s, ckpt_request_wait(request, 0, s.err), CKPT_E_IO, "save with a killed worker",
               {"rank " + std::to_string(s.world - 1), "signal 9"});
  if (s.rank == 0) std::printf("worker killed: %s\n", ckpt_error_message(s.err));
  ckpt_request_free(request);
  ExpectLatest(s, m, 1);
  if (StepExists(m, 2)) Die(s.rank, "the failed save left step 2 behind");
  s.Check(ManagedSave(s, m, 3), "step 3, after the worker was restarted");
  ExpectLatest(s, m, 3);
  if (s.rank == 0) std::printf("worker killed: every rank failed, latest kept, next save committed\n");
  ckpt_state_free(m.state);
  ckpt_manager_free(m.manager);
  return 0;
}

// ROOT is a small tmpfs: step 1 fits, step 2 does not.
int FullDisk(const char* root) {
  Session s;
  Managed small;
  OpenManaged(s, root, &small, 16);
  s.Check(ManagedSave(s, small, 1), "step 1");
  Managed big;
  OpenManaged(s, root, &big, 4096);
  ExpectStatus(s, ManagedSave(s, big, 2), CKPT_E_NO_SPACE, "save onto a full disk", {"rank"});
  if (s.rank == 0) std::printf("full disk: %s\n", ckpt_error_message(s.err));
  ExpectLatest(s, small, 1);
  if (StepExists(big, 2)) Die(s.rank, "the failed save left step 2 behind");
  ckpt_state_free(small.state);
  ckpt_state_free(big.state);
  ckpt_manager_free(small.manager);
  ckpt_manager_free(big.manager);
  return 0;
}

uint64_t PeakRssKib(pid_t pid) {
  FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/status").c_str(), "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kib = 0;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "VmHWM: %llu kB", reinterpret_cast<unsigned long long*>(&kib)) == 1) break;
  }
  std::fclose(f);
  return kib;
}

// 256 MiB of state per rank through a 64 MiB arena: saved and loaded intact, and no worker holds more than the
// arena, nor does the rank grow by much more than the arena.
int BigState(const char* dir) {
  ckpt_error_t* err = nullptr;
  ckpt_error_create(&err);
  ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
  opts.arena_bytes = 64ull << 20;
  opts.timeout_ms = 60000;
  ckpt_context_t* ctx = nullptr;
  if (ckpt_context_create(&opts, &ctx, err) != CKPT_OK) Die(-1, ckpt_error_message(err));
  Session* none = nullptr;
  (void)none;
  const int rank = ckpt_context_rank(ctx), world = ckpt_context_world_size(ctx);
  const uint64_t rows = 65536, cols = 1024;  // 256 MiB of F32
  std::vector<float> w = RowSlab(5, cols, 0, rows);
  const uint64_t baseline = PeakRssKib(getpid());
  ckpt_state_t* state = nullptr;
  ckpt_state_create(&state, err);
  ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
  const uint64_t global[2] = {rows * world, cols}, local[2] = {rows, cols}, offset[2] = {rows * rank, 0};
  shard.key = "big";
  shard.dtype = CKPT_DTYPE_F32;
  shard.ndim = 2;
  shard.global_shape = global;
  shard.local_shape = local;
  shard.global_offset = offset;
  shard.data = w.data();
  shard.data_size = w.size() * sizeof(float);
  if (ckpt_state_add_tensor(state, &shard, err) != CKPT_OK) Die(rank, ckpt_error_message(err));
  ckpt_request_t* request = nullptr;
  if (ckpt_save(ctx, state, dir, nullptr, &request, err) != CKPT_OK || ckpt_request_wait(request, 0, err) != CKPT_OK) {
    Die(rank, std::string("save: ") + ckpt_error_message(err));
  }
  ckpt_request_free(request);
  for (pid_t pid : WorkerPids()) {
    if (PeakRssKib(pid) > (64 + 32) * 1024) {
      Die(rank, "an I/O worker peaked at " + std::to_string(PeakRssKib(pid)) + " KiB, more than the 64 MiB arena");
    }
  }
  const uint64_t growth = PeakRssKib(getpid()) - baseline;
  if (growth > (64 + 64) * 1024) Die(rank, "the rank grew by " + std::to_string(growth) + " KiB during the save");
  std::fill(w.begin(), w.end(), 0.0f);
  if (ckpt_load(ctx, state, dir, nullptr, err) != CKPT_OK) Die(rank, std::string("load: ") + ckpt_error_message(err));
  const std::vector<float> expected = RowSlab(5, cols, 0, rows);
  if (w != expected) Die(rank, "the 256 MiB state came back different");
  if (rank == 0)
    std::printf("big state: 4x the arena saved and loaded; rank grew %llu KiB\n", (unsigned long long)growth);
  ckpt_state_free(state);
  ckpt_context_free(ctx);
  ckpt_error_free(err);
  return 0;
}

// Every rank asks for everything save-replicated stored, checks it, and prints what it read and exchanged.
int LoadReplicated(const char* dir, bool expect_failure) {
  Session s;
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  Buffers buffers;
  auto& big = buffers.New(kBigRows * kBigCols);
  AddShard(s, state, "big", {kBigRows, kBigCols}, {kBigRows, kBigCols}, {0, 0}, big);
  for (int i = 0; i < 8; ++i) {
    const uint64_t n = 1000 * (i + 1);
    auto& small = buffers.New(n);
    const std::string key = "small." + std::to_string(i);
    AddShard(s, state, key.c_str(), {n}, {n}, {0}, small);
  }
  const int32_t status = ckpt_load(s.ctx, state, dir, nullptr, s.err);
  if (expect_failure) {
    if (status != CKPT_E_PEER_FAILED && status != CKPT_E_TIMEOUT) {
      Die(s.rank,
          std::string("expected a peer failure, got ") + ckpt_status_string(status) + ": " + ckpt_error_message(s.err));
    }
    if (s.rank == 0) std::printf("peer died in the exchange: %s\n", ckpt_error_message(s.err));
    ckpt_state_free(state);
    return 0;
  }
  s.Check(status, "load");
  CheckRows(s, "big", 4, buffers.floats[0], 0);
  for (int i = 0; i < 8; ++i) CheckRows(s, "small", 10 + i, buffers.floats[1 + i], 0);
  const ckpt_context_stats stats = Stats(s);
  std::printf("rank %d transport %d bytes_read %llu bytes_sent %llu bytes_received %llu\n", s.rank, stats.transport,
              (unsigned long long)stats.bytes_read, (unsigned long long)stats.bytes_sent,
              (unsigned long long)stats.bytes_received);
  ckpt_state_free(state);
  return 0;
}

int ContextFails(int32_t expected, const char* text) {
  ckpt_error_t* err = nullptr;
  ckpt_error_create(&err);
  ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
  opts.timeout_ms = 20000;
  ckpt_context_t* ctx = nullptr;
  const int32_t status = ckpt_context_create(&opts, &ctx, err);
  const std::string message = ckpt_error_message(err);
  if (status != expected || message.find(text) == std::string::npos) {
    Die(-1, "context creation: expected status " + std::to_string(expected) + " naming '" + text + "', got " +
                ckpt_status_string(status) + ": " + message);
  }
  std::printf("context refused as expected: %s\n", message.c_str());
  ckpt_context_free(ctx);
  ckpt_error_free(err);
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
  ckpt_error_t* err = nullptr;
  ckpt_error_create(&err);
  ckpt_reader_t* reader = nullptr;
  if (ckpt_reader_open(dir, &reader, err) != CKPT_OK) Die(0, ckpt_error_message(err));
  ckpt_checkpoint_info info = CKPT_CHECKPOINT_INFO_INIT;
  ckpt_reader_info(reader, &info, err);
  for (uint64_t t = 0; t < info.tensor_count; ++t) {
    ckpt_tensor_info tensor = CKPT_TENSOR_INFO_INIT;
    ckpt_reader_tensor(reader, t, &tensor, err);
    if (std::strcmp(tensor.key, key) != 0) continue;
    ckpt_chunk_info chunk = CKPT_CHUNK_INFO_INIT;
    ckpt_reader_chunk(reader, t, 0, &chunk, err);
    XorByte(std::string(dir) + "/" + chunk.file, chunk.file_offset + chunk.byte_length / 2, 0x10);
    std::printf("%s\n", chunk.file);
    ckpt_reader_free(reader);
    ckpt_error_free(err);
    return 0;
  }
  Die(0, std::string("no tensor ") + key);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: scenario MODE ARGS... (see the comment at the top of scenario.cc)\n");
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "save") return Save(argv[2], CKPT_OK);
  if (mode == "save-exists") return Save(argv[2], CKPT_E_ALREADY_EXISTS);
  if (mode == "load") return Load(argv[2]);
  if (mode == "save-replicated") return SaveReplicated(argv[2]);
  if (mode == "check-dedup") return CheckDedup(argv[2]);
  if (mode == "save-invalid" && argc == 4) return SaveInvalid(argv[2], argv[3]);
  if (mode == "load-expect" && argc >= 4) return LoadExpect(argc, argv);
  if (mode == "load-strict") return LoadStrict(argv[2]);
  if (mode == "load-shape-mismatch") return LoadShapeMismatch(argv[2]);
  if (mode == "dead-rank") return DeadRank(argv[2]);
  if (mode == "async") return Async(argv[2]);
  if (mode == "context-fails" && argc == 4) return ContextFails(std::atoi(argv[2]), argv[3]);
  if (mode == "load-replicated") return LoadReplicated(argv[2], false);
  if (mode == "load-replicated-expect-failure") return LoadReplicated(argv[2], true);
  if (mode == "plan-cache") return PlanCache(argv[2]);
  if (mode == "worker-killed") return WorkerKilled(argv[2]);
  if (mode == "full-disk") return FullDisk(argv[2]);
  if (mode == "big-state") return BigState(argv[2]);
  if (mode == "corrupt-chunk" && argc == 4) return CorruptChunk(argv[2], argv[3]);
  if (mode == "xor-byte" && argc == 5) {
    XorByte(argv[2], std::strtoull(argv[3], nullptr, 0), static_cast<int>(std::strtol(argv[4], nullptr, 0)));
    return 0;
  }
  std::fprintf(stderr, "scenario: unknown mode or wrong arguments: %s\n", mode.c_str());
  return 2;
}

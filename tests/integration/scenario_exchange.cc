// Ranks exchanging what they read, and ranks failing to join, run on N ranks by ckpt-launch from
// tests/integration/run.sh. Each mode checks what every rank sees through the public C API and exits non-zero,
// saying why, if a behaviour is broken. Usage: ckpt_scenario_exchange MODE ARGS...
//
//   load-replicated DIR         every rank loads save-replicated's state (ckpt_scenario_core): even ranks all of
//                               "big" (received in place), odd ranks its left column half (received into a
//                               buffer, then scattered into rows); prints bytes read
//   load-replicated-expect DIR CODE TEXT..   the same load must fail with CODE on every rank, naming each TEXT
//   load-replicated-expect-failure DIR   the same with a rank dying (CKPT_FAULT_EXIT_BEFORE_EXCHANGE) or stopping
//                               (CKPT_FAULT_STOP_BEFORE_EXCHANGE): every other rank must fail with
//                               CKPT_E_PEER_FAILED or CKPT_E_TIMEOUT, within 1.5 x CKPT_TIMEOUT_MS + 2 s
//   context-fails CODE TEXT     creating the context must fail with CODE on this rank, naming TEXT
//   save-layout DIR             "m" (1000 x 37 F64) and "v" (1.5 M F32, 6 MB: several checksum blocks) saved in
//                               uneven row blocks over the world
//   load-layout SPLIT DIR       every rank loads an uneven part of save-layout's state: rows or (SPLIT = columns)
//                               columns of "m", rows of "v"; checks every element, prints bytes read and where its
//                               exchange buffers came from (its INFO line)
//   load-layout-expect SPLIT DIR CODE TEXT..   the same load must fail with CODE on every rank, naming each TEXT
//   stored-bytes DIR            (no context) prints the bytes stored of every tensor's chunks
//   save-wide DIR               "w" (256 x 8192 F32, 8 MiB) saved in column blocks, one per rank
//   load-wide DIR               every rank loads a column half of "w" (the first half of the ranks the left one),
//                               checks every element, and prints the rounds its load's INFO line names
//   save-small DIR              64 small tensors "n.0".."n.63" (8192 F32, 32 KiB each) registered whole by every rank
//                               as replicas, so each is written once
//   load-small DIR              every rank loads save-small's tensors whole, checks every element, and prints the
//                               rounds its load's INFO line names
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ckpt.h"
#include "scenario_common.h"

namespace scenario {
namespace {

constexpr uint64_t kMatrixRows = 1000, kMatrixCols = 37, kVectorLength = 1500000;

// Where part `part` of `parts` uneven parts of [0, extent) begins: part i weighs 1 + (5 i + salt) % 7, so that no
// two neighbours are alike and the save's cuts (salt 0) differ from the load's (salt 4). The unit tests of the plan
// cut the same way (tests/unit/load/test_load_plan_read_once.cc).
uint64_t UnevenCut(uint64_t extent, int part, int parts, int salt) {
  uint64_t total = 0, before = 0;
  for (int i = 0; i < parts; ++i) {
    const uint64_t weight = 1 + (5 * i + salt) % 7;
    total += weight;
    before += i < part ? weight : 0;
  }
  return extent * before / total;
}

// The INFO lines of this rank's loads.
void KeepInfo(void* user, int32_t level, const char* message) {
  if (level == CKPT_LOG_INFO && std::strstr(message, "loaded '") != nullptr) {
    static_cast<std::string*>(user)->append(message).append("\n");
  }
}

// Where the exchange buffers of the load an INFO line (KeepInfo) names came from: "<bytes> in the staging arena and
// <bytes> committed", or "none" where the load had no host buffers.
std::string ExchangeBuffersNamed(const std::string& info) {
  const std::string tag = "exchange buffers ";
  const size_t begin = info.find(tag);
  if (begin == std::string::npos) return "none";
  return info.substr(begin + tag.size(), info.find(',', begin) - begin - tag.size());
}

// The line run.sh sums: this rank's transport and the bytes it read, sent and received.
void PrintTransfers(const Session& s) {
  const ckpt_context_stats stats = Stats(s);
  std::printf("rank %d transport %d bytes_read %llu bytes_sent %llu bytes_received %llu\n", s.rank, stats.transport,
              (unsigned long long)stats.bytes_read, (unsigned long long)stats.bytes_sent,
              (unsigned long long)stats.bytes_received);
}

double MatrixValue(uint64_t flat_index) { return 0.5 * static_cast<double>(flat_index) + 3.0; }

// This rank's uneven rows of "m" and "v", saved.
int SaveLayout(const char* dir) {
  Session s;
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  const uint64_t r0 = UnevenCut(kMatrixRows, s.rank, s.world, 0), r1 = UnevenCut(kMatrixRows, s.rank + 1, s.world, 0);
  std::vector<double> matrix((r1 - r0) * kMatrixCols);
  for (size_t i = 0; i < matrix.size(); ++i) matrix[i] = MatrixValue(r0 * kMatrixCols + i);
  AddTypedShard(s, state, "m", CKPT_DTYPE_F64, {kMatrixRows, kMatrixCols}, {r1 - r0, kMatrixCols}, {r0, 0},
                matrix.data(), matrix.size());
  const uint64_t v0 = UnevenCut(kVectorLength, s.rank, s.world, 0);
  const uint64_t v1 = UnevenCut(kVectorLength, s.rank + 1, s.world, 0);
  std::vector<float> vector = RowSlab(21, 1, v0, v1);
  AddTypedShard(s, state, "v", CKPT_DTYPE_F32, {kVectorLength}, {v1 - v0}, {v0}, vector.data(), vector.size());
  SaveAndWait(s, state, dir, "save");
  ckpt_state_free(state);
  return 0;
}

// How a load must fail on every rank: its status and words its message holds.
struct ExpectedFailure {
  int32_t code = CKPT_OK;
  std::vector<std::string> texts;
};

// This rank's uneven part of save-layout's state (rows, or columns of "m"), loaded and checked element by element;
// or, with `expected`, a load that must fail as it says.
int LoadLayout(const std::string& split, const char* dir, const ExpectedFailure* expected) {
  std::string info;
  Session s(KeepInfo, &info);
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  const bool by_columns = split == "columns";
  const uint64_t extent = by_columns ? kMatrixCols : kMatrixRows;
  const uint64_t a = UnevenCut(extent, s.rank, s.world, 4), b = UnevenCut(extent, s.rank + 1, s.world, 4);
  const uint64_t rows = by_columns ? kMatrixRows : b - a, cols = by_columns ? b - a : kMatrixCols;
  const uint64_t row0 = by_columns ? 0 : a, col0 = by_columns ? a : 0;
  std::vector<double> matrix(rows * cols, -1.0);
  AddTypedShard(s, state, "m", CKPT_DTYPE_F64, {kMatrixRows, kMatrixCols}, {rows, cols}, {row0, col0}, matrix.data(),
                matrix.size());
  const uint64_t v0 = UnevenCut(kVectorLength, s.rank, s.world, 4);
  const uint64_t v1 = UnevenCut(kVectorLength, s.rank + 1, s.world, 4);
  std::vector<float> vector(v1 - v0, -1.0f);
  AddTypedShard(s, state, "v", CKPT_DTYPE_F32, {kVectorLength}, {v1 - v0}, {v0}, vector.data(), vector.size());
  const int32_t status = ckpt_load(s.ctx, state, dir, nullptr, s.err);
  if (expected != nullptr) {
    ExpectStatus(s, status, expected->code, "load", expected->texts);
    ckpt_state_free(state);
    return 0;
  }
  s.Check(status, "load");
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) {
      if (matrix[r * cols + c] != MatrixValue((row0 + r) * kMatrixCols + col0 + c)) {
        Die(s.rank, "m[" + std::to_string(row0 + r) + ", " + std::to_string(col0 + c) + "] holds a wrong value");
      }
    }
  }
  CheckRows(s, "v", 21, vector, v0);
  PrintTransfers(s);
  std::printf("rank %d exchange buffers %s\n", s.rank, ExchangeBuffersNamed(info).c_str());
  ckpt_state_free(state);
  return 0;
}

constexpr uint64_t kWideRows = 256, kWideCols = 8192;

float WideValue(uint64_t row, uint64_t col) { return static_cast<float>(row * kWideCols + col); }

// This rank's block of columns of "w", saved.
int SaveWide(const char* dir) {
  Session s;
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  const uint64_t cols = kWideCols / s.world, col0 = cols * s.rank;
  std::vector<float> block(kWideRows * cols);
  for (uint64_t r = 0; r < kWideRows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) block[r * cols + c] = WideValue(r, col0 + c);
  }
  AddTypedShard(s, state, "w", CKPT_DTYPE_F32, {kWideRows, kWideCols}, {kWideRows, cols}, {0, col0}, block.data(),
                block.size());
  SaveAndWait(s, state, dir, "save");
  ckpt_state_free(state);
  return 0;
}

// The rounds a load's INFO lines (KeepInfo) name.
std::string RoundsNamed(const Session& s, const std::string& info) {
  const size_t end = info.find(" rounds)");
  const size_t begin = info.rfind(' ', end == std::string::npos ? 0 : end - 1);
  if (end == std::string::npos || begin == std::string::npos) Die(s.rank, "the INFO line names no rounds: " + info);
  return info.substr(begin + 1, end - begin - 1);
}

// A column half of "w" loaded into this rank (a tensor-parallel shard of a model saved with more of them, replicated
// over the ranks of each half) and checked element by element.
int LoadWide(const char* dir) {
  std::string info;
  Session s(KeepInfo, &info);
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  const uint64_t cols = kWideCols / 2, col0 = s.rank < s.world / 2 ? 0 : cols;
  std::vector<float> half(kWideRows * cols, -1.0f);
  AddTypedShard(s, state, "w", CKPT_DTYPE_F32, {kWideRows, kWideCols}, {kWideRows, cols}, {0, col0}, half.data(),
                half.size());
  s.Check(ckpt_load(s.ctx, state, dir, nullptr, s.err), "load");
  for (uint64_t r = 0; r < kWideRows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) {
      if (half[r * cols + c] != WideValue(r, col0 + c)) {
        Die(s.rank, "w[" + std::to_string(r) + ", " + std::to_string(col0 + c) + "] holds a wrong value");
      }
    }
  }
  std::printf("rank %d rounds %s\n", s.rank, RoundsNamed(s, info).c_str());
  PrintTransfers(s);
  ckpt_state_free(state);
  return 0;
}

constexpr int kSmallTensors = 64;
constexpr uint64_t kSmallElements = 8192;

float SmallValue(int tensor, uint64_t element) { return static_cast<float>(tensor * 10000 + element); }

std::string SmallKey(int tensor) { return "n." + std::to_string(tensor); }

int SaveSmall(const char* dir) {
  Session s;
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  std::vector<std::vector<float>> tensors(kSmallTensors, std::vector<float>(kSmallElements));
  const uint32_t replica = static_cast<uint32_t>(s.rank);
  for (int i = 0; i < kSmallTensors; ++i) {
    for (uint64_t e = 0; e < kSmallElements; ++e) tensors[i][e] = SmallValue(i, e);
    AddTypedShard(s, state, SmallKey(i).c_str(), CKPT_DTYPE_F32, {kSmallElements}, {kSmallElements}, {0},
                  tensors[i].data(), kSmallElements, 0, 0, 0, &replica, 1);
  }
  SaveAndWait(s, state, dir, "save");
  ckpt_state_free(state);
  return 0;
}

// Every small tensor whole on every rank: each read by one rank and sent to every other, packed with the pair's
// other small transfers.
int LoadSmall(const char* dir) {
  std::string info;
  Session s(KeepInfo, &info);
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  std::vector<std::vector<float>> tensors(kSmallTensors, std::vector<float>(kSmallElements, -1.0f));
  for (int i = 0; i < kSmallTensors; ++i) {
    AddTypedShard(s, state, SmallKey(i).c_str(), CKPT_DTYPE_F32, {kSmallElements}, {kSmallElements}, {0},
                  tensors[i].data(), kSmallElements);
  }
  s.Check(ckpt_load(s.ctx, state, dir, nullptr, s.err), "load");
  for (int i = 0; i < kSmallTensors; ++i) {
    for (uint64_t e = 0; e < kSmallElements; ++e) {
      if (tensors[i][e] != SmallValue(i, e)) {
        Die(s.rank, SmallKey(i) + "[" + std::to_string(e) + "] holds a wrong value");
      }
    }
  }
  std::printf("rank %d rounds %s\n", s.rank, RoundsNamed(s, info).c_str());
  ckpt_state_free(state);
  return 0;
}

// The bytes the checkpoint stores of its tensors: the denominator of read amplification.
int StoredBytes(const char* dir) {
  const CheckpointReader reader(dir);
  uint64_t stored = 0;
  for (uint64_t t = 0; t < reader.info().tensor_count; ++t) {
    const uint64_t chunks = reader.Tensor(t).chunk_count;
    for (uint64_t c = 0; c < chunks; ++c) stored += reader.Chunk(t, c).byte_length;
  }
  std::printf("stored %llu\n", (unsigned long long)stored);
  return 0;
}

// Every rank asks for everything save-replicated stored, checks it, and prints what it read and exchanged; or, with
// `expect_peer_failure`, fails as a dead or stopped peer makes it fail; or, with `expected`, as that says.
int LoadReplicated(const char* dir, bool expect_peer_failure, const ExpectedFailure* expected) {
  Session s;
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  Buffers buffers;
  const uint64_t big_cols = s.rank % 2 == 0 ? kBigCols : kBigCols / 2;
  // Page-aligned, as a trainer's large tensors are: where an even rank reads "big" itself (no transport), its whole
  // blocks go straight into it (runtime/load/chunk_fetcher.cc), the odd ranks' column halves through the arena.
  const std::unique_ptr<float, decltype(&std::free)> big(
      static_cast<float*>(std::aligned_alloc(4096, kBigRows * big_cols * sizeof(float))), &std::free);
  std::fill(big.get(), big.get() + kBigRows * big_cols, -1.0f);
  AddTypedShard(s, state, "big", CKPT_DTYPE_F32, {kBigRows, kBigCols}, {kBigRows, big_cols}, {0, 0}, big.get(),
                kBigRows * big_cols);
  for (int i = 0; i < 8; ++i) {
    const uint64_t n = 1000 * (i + 1);
    auto& small = buffers.New(n);
    const std::string key = "small." + std::to_string(i);
    AddShard(s, state, key.c_str(), {n}, {n}, {0}, small);
  }
  const auto start = std::chrono::steady_clock::now();
  const int32_t status = ckpt_load(s.ctx, state, dir, nullptr, s.err);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (expected != nullptr) {
    ExpectStatus(s, status, expected->code, "load", expected->texts);
    ckpt_state_free(state);
    return 0;
  }
  if (expect_peer_failure) {
    if (status != CKPT_E_PEER_FAILED && status != CKPT_E_TIMEOUT) {
      Die(s.rank,
          std::string("expected a peer failure, got ") + ckpt_status_string(status) + ": " + ckpt_error_message(s.err));
    }
    // One stall costs one timeout, plus the transport's 2 s to cancel and the agreement's quarter of the timeout,
    // never one timeout per wait (the exchange's, then the agreement's: twice the timeout).
    const char* timeout_ms = std::getenv("CKPT_TIMEOUT_MS");
    const double bound = timeout_ms != nullptr ? 1.5 * std::atof(timeout_ms) / 1000.0 + 2.0 : 0.0;
    if (timeout_ms != nullptr && waited > bound) {
      Die(s.rank, "failed after " + std::to_string(waited) + " s, more than " + std::to_string(bound) + " s");
    }
    std::printf("rank %d: peer failed in the exchange, reported after %.1f s: %s\n", s.rank, waited,
                ckpt_error_message(s.err));
    if (s.rank == 0) std::printf("peer died in the exchange: %s\n", ckpt_error_message(s.err));
    ckpt_state_free(state);
    return 0;
  }
  s.Check(status, "load");
  for (uint64_t r = 0; r < kBigRows; ++r) {
    for (uint64_t c = 0; c < big_cols; ++c) {
      if (big.get()[r * big_cols + c] != ValueAt(4, r * kBigCols + c)) {
        Die(s.rank, "big[" + std::to_string(r) + ", " + std::to_string(c) + "] holds a wrong value");
      }
    }
  }
  for (int i = 0; i < 8; ++i) CheckRows(s, "small", 10 + i, buffers.floats[i], 0);
  PrintTransfers(s);
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

}  // namespace
}  // namespace scenario

int main(int argc, char** argv) {
  using namespace scenario;
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: ckpt_scenario_exchange MODE ARGS... (see the comment at the top of scenario_exchange.cc)\n");
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "load-replicated") return LoadReplicated(argv[2], false, nullptr);
  if (mode == "load-replicated-expect-failure") return LoadReplicated(argv[2], true, nullptr);
  if (mode == "load-replicated-expect" && argc >= 4) {
    const ExpectedFailure expected{std::atoi(argv[3]), std::vector<std::string>(argv + 4, argv + argc)};
    return LoadReplicated(argv[2], false, &expected);
  }
  if (mode == "context-fails" && argc == 4) return ContextFails(std::atoi(argv[2]), argv[3]);
  if (mode == "save-layout") return SaveLayout(argv[2]);
  if (mode == "load-layout" && argc == 4) return LoadLayout(argv[2], argv[3], nullptr);
  if (mode == "load-layout-expect" && argc >= 5) {
    const ExpectedFailure expected{std::atoi(argv[4]), std::vector<std::string>(argv + 5, argv + argc)};
    return LoadLayout(argv[2], argv[3], &expected);
  }
  if (mode == "stored-bytes") return StoredBytes(argv[2]);
  if (mode == "save-wide") return SaveWide(argv[2]);
  if (mode == "load-wide") return LoadWide(argv[2]);
  if (mode == "save-small") return SaveSmall(argv[2]);
  if (mode == "load-small") return LoadSmall(argv[2]);
  std::fprintf(stderr, "ckpt_scenario_exchange: unknown mode or wrong arguments: %s\n", mode.c_str());
  return 2;
}

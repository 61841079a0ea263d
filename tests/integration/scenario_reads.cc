// How a load reads its tensors (runtime/load/read_strategy.h), seen from real ranks on one node through the public
// C API: the strategy each load chose, its read amplification, the bytes exchanged, the INFO line, and every element.
// Run by tests/load_reads.cmake through ckpt-launch. Each mode exits non-zero, saying why, if a behaviour is broken.
// Usage: ckpt_scenario_reads MODE DIR [READS MILLI_MIN MILLI_MAX]
//
//   save DIR                     "w" (2048 x 1024 F32, 8 MiB) saved in near-equal row blocks over the world
//   load-shards DIR READS MIN MAX   every rank loads the row block it saved (disjoint shards); the load must have
//                                chosen READS (once or own) with an amplification x 1000 within [MIN, MAX]
//   load-whole DIR READS MIN MAX    every rank loads the whole of "w" (a replicated state), checked the same way
//   load-refused DIR CODE TEXT   the load must fail with CODE on every rank, naming TEXT
//   save-sections DIR            "rows" (kSectionRows x 8 F32) saved as one-row shards dealt round the world: a
//                                manifest of more chunks than kSectionedFromChunks, written in sections (format 4)
//   load-sections DIR            every rank loads a near-equal row block of "rows" and checks every element
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ckpt.h"
#include "scenario_common.h"

namespace scenario {
namespace {

constexpr uint64_t kSeed = 17, kReadRows = 2048, kReadCols = 1024;
// runtime/format/manifest.h writes a manifest of 4,096 chunks or more in sections.
constexpr uint64_t kSectionRows = 4608, kSectionCols = 8, kSectionSeed = 29;

// The INFO lines of this rank's loads.
void KeepInfo(void* user, int32_t level, const char* message) {
  if (level == CKPT_LOG_INFO && std::strstr(message, "loaded '") != nullptr) {
    static_cast<std::string*>(user)->append(message).append("\n");
  }
}

int Save(const char* dir) {
  Session s;
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  const uint64_t r0 = SplitPoint(kReadRows, s.rank, s.world), r1 = SplitPoint(kReadRows, s.rank + 1, s.world);
  std::vector<float> rows = RowSlab(kSeed, kReadCols, r0, r1);
  AddShard(s, state, "w", {kReadRows, kReadCols}, {r1 - r0, kReadCols}, {r0, 0}, rows);
  SaveAndWait(s, state, dir, "save");
  ckpt_state_free(state);
  return 0;
}

// Loads rows [r0, r1) of "w" and checks every element; returns the load's status.
int32_t LoadRows(const Session& s, const char* dir, uint64_t r0, uint64_t r1) {
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  std::vector<float> rows((r1 - r0) * kReadCols, -1.0f);
  AddShard(s, state, "w", {kReadRows, kReadCols}, {r1 - r0, kReadCols}, {r0, 0}, rows);
  const int32_t status = ckpt_load(s.ctx, state, dir, nullptr, s.err);
  if (status == CKPT_OK) CheckRows(s, "w", kSeed, rows, r0 * kReadCols);
  ckpt_state_free(state);
  return status;
}

int Load(const char* dir, bool whole, const std::string& reads, uint64_t milli_min, uint64_t milli_max) {
  std::string info;
  Session s(KeepInfo, &info);
  const uint64_t r0 = whole ? 0 : SplitPoint(kReadRows, s.rank, s.world);
  const uint64_t r1 = whole ? kReadRows : SplitPoint(kReadRows, s.rank + 1, s.world);
  s.Check(LoadRows(s, dir, r0, r1), "load");
  const ckpt_context_stats stats = Stats(s);
  std::printf("rank %d reads %llu amplification_milli %llu bytes_read %llu bytes_sent %llu bytes_received %llu\n",
              s.rank, (unsigned long long)stats.last_load_reads,
              (unsigned long long)stats.last_load_read_amplification_milli, (unsigned long long)stats.bytes_read,
              (unsigned long long)stats.bytes_sent, (unsigned long long)stats.bytes_received);
  const bool own = reads == "own";
  if (stats.last_load_reads != (own ? CKPT_LOAD_READS_OWN : CKPT_LOAD_READS_ONCE)) {
    Die(s.rank, "the load chose " + std::to_string(stats.last_load_reads) + ", expected " + reads);
  }
  const uint64_t milli = stats.last_load_read_amplification_milli;
  if (milli < milli_min || milli > milli_max) {
    Die(s.rank, "read amplification x 1000 " + std::to_string(milli) + ", expected " + std::to_string(milli_min) +
                    ".." + std::to_string(milli_max));
  }
  if (own && stats.bytes_sent + stats.bytes_received != 0) Die(s.rank, "own reads exchanged tensor bytes");
  if (own && stats.exchange_ns != 0) Die(s.rank, "own reads ran exchange rounds");
  if (!own && s.world > 1 && whole && stats.bytes_received == 0) Die(s.rank, "read once received nothing");
  const std::string named = own ? "(own reads, read amplification " : "(read once + exchange, read amplification ";
  if (info.find(named) == std::string::npos) Die(s.rank, "the INFO line does not say '" + named + "': " + info);
  return 0;
}

int LoadRefused(const char* dir, int32_t code, const char* text) {
  Session s;
  ExpectStatus(s, LoadRows(s, dir, 0, kReadRows), code, "load", {text});
  return 0;
}

int SaveSections(const char* dir) {
  Session s;
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  Buffers buffers;
  for (uint64_t row = static_cast<uint64_t>(s.rank); row < kSectionRows; row += static_cast<uint64_t>(s.world)) {
    std::vector<float>& data = buffers.New(kSectionCols);
    data = RowSlab(kSectionSeed, kSectionCols, row, row + 1);
    AddShard(s, state, "rows", {kSectionRows, kSectionCols}, {1, kSectionCols}, {row, 0}, data);
  }
  SaveAndWait(s, state, dir, "save");
  ckpt_state_free(state);
  if (s.rank != 0) return 0;
  const CheckpointReader reader(dir);
  if (reader.info().format_major != 4) {
    Die(s.rank, "the manifest of " + std::to_string(kSectionRows) + " chunks is format " +
                    std::to_string(reader.info().format_major) + ", expected 4 (in sections)");
  }
  if (reader.Tensor(0).chunk_count != kSectionRows) {
    Die(s.rank, "\"rows\" has " + std::to_string(reader.Tensor(0).chunk_count) + " chunks, expected one per row");
  }
  return 0;
}

int LoadSections(const char* dir) {
  Session s;
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  const uint64_t r0 = SplitPoint(kSectionRows, s.rank, s.world), r1 = SplitPoint(kSectionRows, s.rank + 1, s.world);
  std::vector<float> rows((r1 - r0) * kSectionCols, -1.0f);
  AddShard(s, state, "rows", {kSectionRows, kSectionCols}, {r1 - r0, kSectionCols}, {r0, 0}, rows);
  s.Check(ckpt_load(s.ctx, state, dir, nullptr, s.err), "load");
  CheckRows(s, "rows", kSectionSeed, rows, r0 * kSectionCols);
  ckpt_state_free(state);
  return 0;
}

}  // namespace
}  // namespace scenario

int main(int argc, char** argv) {
  using namespace scenario;
  const std::string mode = argc > 2 ? argv[1] : "";
  if (mode == "save") return Save(argv[2]);
  if (mode == "save-sections") return SaveSections(argv[2]);
  if (mode == "load-sections") return LoadSections(argv[2]);
  if (mode == "load-refused" && argc == 5) return LoadRefused(argv[2], std::atoi(argv[3]), argv[4]);
  if ((mode == "load-shards" || mode == "load-whole") && argc == 6) {
    return Load(argv[2], mode == "load-whole", argv[3], std::strtoull(argv[4], nullptr, 10),
                std::strtoull(argv[5], nullptr, 10));
  }
  std::fprintf(stderr,
               "usage: %s save|save-sections|load-sections DIR | load-refused DIR CODE TEXT | load-shards|load-whole "
               "DIR once|own MILLI_MIN "
               "MILLI_MAX\n",
               argv[0]);
  return 2;
}

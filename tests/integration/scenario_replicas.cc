// Replicas that check each other (CKPT_SAVE_CHECK_REPLICAS) on real ranks (tests/replica_check.cmake). Every rank
// holds the whole of "w" (4 MiB of F32: 4 blocks), as data parallelism does, its own rows of "rows", and a
// replicated object "config":
//   agree DIR [cow]      every copy is equal: the save commits (with cow: copy-on-write), and loads back, although
//                        each rank overwrites "w" right after its call, while its replicas are still being
//                        checksummed in the background, through write protection
//   flipped DIR RANK [incremental]
//                        rank RANK flips one bit in block 2 of its "w": the save fails on every rank with
//                        CKPT_E_CORRUPT naming the tensor, the block and the rank, and nothing is committed at DIR;
//                        incremental: the same for a save against DIR-base (CKPT_SAVE_INCREMENTAL), which refers to
//                        the base for most of the written copy
//   unmapped DIR         every rank unmaps its "w" right after its call, while the replicas wait to be checksummed
//                        (CKPT_FAULT_STAGING_PAUSE_MS): the save fails on every rank naming "w", commits nothing
//   disagree DIR         rank 0 alone asks for the check: ckpt_save fails on every rank with CKPT_E_MISMATCH
//                        naming the flag, before anything is written
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ckpt.h"
#include "scenario_common.h"

using namespace scenario;

namespace {

constexpr uint64_t kRowsW = 1024, kColsW = 1024;  // "w": 4 MiB of F32, 4 blocks of 1 MiB
constexpr uint64_t kRowsSharded = 300, kColsSharded = 7;
const char kConfig[] = "replicated object bytes";

struct Layout {
  std::vector<float> w;
  std::vector<float> rows;
  std::string config = kConfig;
  uint64_t first_row = 0;
};

void Register(const Session& s, ckpt_state_t* state, Layout& layout, bool fill) {
  layout.w = fill ? RowSlab(21, kColsW, 0, kRowsW) : std::vector<float>(kRowsW * kColsW);
  const uint32_t replica = static_cast<uint32_t>(s.rank);
  AddShard(s, state, "w", {kRowsW, kColsW}, {kRowsW, kColsW}, {0, 0}, layout.w, 0, &replica, 1);
  const uint64_t r0 = SplitPoint(kRowsSharded, s.rank, s.world), r1 = SplitPoint(kRowsSharded, s.rank + 1, s.world);
  layout.rows = fill ? RowSlab(22, kColsSharded, r0, r1) : std::vector<float>((r1 - r0) * kColsSharded);
  layout.first_row = r0;
  AddShard(s, state, "rows", {kRowsSharded, kColsSharded}, {r1 - r0, kColsSharded}, {r0, 0}, layout.rows);
  const uint64_t grid = 1, cell = 0;
  s.Check(ckpt_state_add_object(state, "config", 1, &grid, &cell, layout.config.data(), layout.config.size(), s.err),
          "ckpt_state_add_object");
}

// A state holding `layout`, registered (with its values if `fill`).
ckpt_state_t* RegisteredState(const Session& s, Layout& layout, bool fill) {
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "ckpt_state_create");
  Register(s, state, layout, fill);
  return state;
}

ckpt_request_t* Save(const Session& s, ckpt_state_t* state, const char* dir, uint64_t flags) {
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.flags = CKPT_SAVE_CHECK_REPLICAS | flags;
  ckpt_request_t* request = nullptr;
  s.Check(ckpt_save(s.ctx, state, dir, &opts, &request, s.err), "ckpt_save");
  return request;
}

int Agree(const char* dir, bool cow) {
  Session s;
  Layout saved;
  ckpt_state_t* state = RegisteredState(s, saved, true);
  ckpt_request_t* request = Save(s, state, dir, cow ? CKPT_SAVE_COPY_ON_WRITE : 0);
  // The trainer's next step, before the background checksums ran: they must see the values at the call.
  std::memset(saved.w.data(), 0x7f, saved.w.size() * sizeof(float));
  s.Check(ckpt_request_wait(request, 0, s.err), "the save with replica checks");
  ckpt_request_free(request);
  ckpt_state_free(state);

  Layout loaded;
  state = RegisteredState(s, loaded, false);
  s.Check(ckpt_load(s.ctx, state, dir, nullptr, s.err), "ckpt_load");
  CheckRows(s, "w", 21, loaded.w, 0);
  CheckRows(s, "rows", 22, loaded.rows, loaded.first_row * kColsSharded);
  ckpt_state_free(state);
  if (s.rank == 0) std::printf("replicas agreed on %d ranks; the checkpoint loads back\n", s.world);
  return 0;
}

// Incremental: a first save (dir + "-base") of the same state commits, recording digests, and the one with the
// flipped bit is incremental against it, so that the written copy of "w" is mostly referred to rather than written.
int Flipped(const char* dir, int flipped, bool incremental) {
  Session s;
  Layout layout;
  ckpt_state_t* state = RegisteredState(s, layout, true);
  const std::string base = std::string(dir) + "-base";
  if (incremental) {
    ckpt_request_t* first = Save(s, state, base.c_str(), CKPT_SAVE_INCREMENTAL);
    s.Check(ckpt_request_wait(first, 0, s.err), "the incremental save's base");
    ckpt_request_free(first);
  }
  if (s.rank == flipped) {
    // One bit of block 2 (bytes [2 MiB, 3 MiB)).
    reinterpret_cast<unsigned char*>(layout.w.data())[(2u << 20) + 12345] ^= 0x10;
  }
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.flags = CKPT_SAVE_CHECK_REPLICAS | (incremental ? CKPT_SAVE_INCREMENTAL : 0);
  opts.base = incremental ? base.c_str() : nullptr;
  ckpt_request_t* request = nullptr;
  s.Check(ckpt_save(s.ctx, state, dir, &opts, &request, s.err), "ckpt_save");
  const int32_t outcome = ckpt_request_wait(request, 0, s.err);
  const std::string rank = std::to_string(flipped);
  const std::string message = ckpt_error_message(s.err);
  const bool named = message.find("rank " + rank + " differs from them") != std::string::npos ||
                     message.find("rank " + rank + " (written) differs from them") != std::string::npos;
  if (!named) Die(s.rank, "the message does not name rank " + rank + " as the copy that differs: " + message);
  ExpectStatus(s, outcome, CKPT_E_CORRUPT, "the save of a flipped replica",
               {"tensor 'w' box [0:1024, 0:1024]", "block 2 of 4", "agree (the most copies)", "not committed"});
  ckpt_request_free(request);
  ckpt_state_free(state);
  if (access(dir, F_OK) == 0) Die(s.rank, std::string("a checkpoint was committed at ") + dir);
  if (s.rank == 0) std::printf("rank 0: the save failed as it should: %s\n", message.c_str());
  return 0;
}

int Unmapped(const char* dir) {
  Session s;
  const size_t bytes = kRowsW * kColsW * sizeof(float);
  void* w = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (w == MAP_FAILED) Die(s.rank, "mmap of 'w' failed");
  const std::vector<float> values = RowSlab(21, kColsW, 0, kRowsW);
  std::memcpy(w, values.data(), bytes);
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "ckpt_state_create");
  const uint32_t replica = static_cast<uint32_t>(s.rank);
  AddTypedShard(s, state, "w", CKPT_DTYPE_F32, {kRowsW, kColsW}, {kRowsW, kColsW}, {0, 0}, w, kRowsW * kColsW, 0, 0, 0,
                &replica, 1);
  ckpt_request_t* request = Save(s, state, dir, 0);
  if (munmap(w, bytes) != 0) Die(s.rank, "munmap of 'w' failed");
  const int32_t outcome = ckpt_request_wait(request, 0, s.err);
  const std::string message = ckpt_error_message(s.err);
  if (outcome == CKPT_OK || message.find("'w': its buffer was unmapped") == std::string::npos) {
    Die(s.rank, "expected the save to fail naming the unmapped replica of 'w', got " +
                    std::string(ckpt_status_string(outcome)) + ": " + message);
  }
  ckpt_request_free(request);
  ckpt_state_free(state);
  if (access(dir, F_OK) == 0) Die(s.rank, std::string("a checkpoint was committed at ") + dir);
  if (s.rank == 0) std::printf("rank 0: the save failed as it should: %s\n", message.c_str());
  return 0;
}

int Disagree(const char* dir) {
  Session s;
  Layout layout;
  ckpt_state_t* state = RegisteredState(s, layout, true);
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.flags = s.rank == 0 ? CKPT_SAVE_CHECK_REPLICAS : 0;
  ckpt_request_t* request = nullptr;
  ExpectStatus(s, ckpt_save(s.ctx, state, dir, &opts, &request, s.err), CKPT_E_MISMATCH, "a save only rank 0 checks",
               {"ranks disagree on CKPT_SAVE_CHECK_REPLICAS: rank 0 asks for it, rank"});
  if (request != nullptr) Die(s.rank, "a refused save returned a request");
  ckpt_state_free(state);
  if (access(dir, F_OK) == 0) Die(s.rank, std::string("something was created at ") + dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 2 ? argv[1] : "";
  if (mode == "agree") return Agree(argv[2], argc > 3 && std::string(argv[3]) == "cow");
  if (mode == "flipped" && argc > 3) {
    return Flipped(argv[2], std::atoi(argv[3]), argc > 4 && std::string(argv[4]) == "incremental");
  }
  if (mode == "unmapped") return Unmapped(argv[2]);
  if (mode == "disagree") return Disagree(argv[2]);
  Die(-1, "usage: ckpt_scenario_replicas agree DIR [cow] | flipped DIR RANK [incremental] | unmapped DIR | "
      "disagree DIR");
}

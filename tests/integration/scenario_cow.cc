// Copy-on-write saves (CKPT_SAVE_COPY_ON_WRITE) on real ranks, each writing its buffers right after ckpt_save
// returns (tests/copy_on_write.cmake):
//   save-while-writing DIR   every rank saves its rows of "w" with copy-on-write, overwrites every page of them from
//                            two threads at once, then waits: the checkpoint, loaded back, holds the values at the
//                            call
//   save-and-die DIR         the same, but the last rank SIGKILLs itself right after its call returned, while its
//                            staging waits (CKPT_FAULT_STAGING_PAUSE_MS): every other rank's request fails, and
//                            nothing is committed at DIR (the script checks it)
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ckpt.h"
#include "scenario_common.h"

using namespace scenario;

namespace {

constexpr uint64_t kRowsCow = 4096, kColsCow = 1024;  // "w": 16 MiB of F32, rows split over the world

// Registers this rank's rows of "w" (holding their values if `fill`) in `rows`; returns the first row.
uint64_t RegisterRows(const Session& s, ckpt_state_t* state, std::vector<float>& rows, bool fill) {
  const uint64_t r0 = SplitPoint(kRowsCow, s.rank, s.world), r1 = SplitPoint(kRowsCow, s.rank + 1, s.world);
  rows = fill ? RowSlab(7, kColsCow, r0, r1) : std::vector<float>((r1 - r0) * kColsCow);
  AddShard(s, state, "w", {kRowsCow, kColsCow}, {r1 - r0, kColsCow}, {r0, 0}, rows);
  return r0;
}

// The trainer's next step: every byte of `rows` overwritten, from two threads.
void Overwrite(std::vector<float>& rows) {
  char* bytes = reinterpret_cast<char*>(rows.data());
  const size_t size = rows.size() * sizeof(float);
  std::thread other([&] { std::memset(bytes + size / 2, 0x7f, size - size / 2); });
  std::memset(bytes, 0x7f, size / 2);
  other.join();
}

ckpt_request_t* SaveCopyOnWrite(const Session& s, ckpt_state_t* state, const char* dir) {
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.flags = CKPT_SAVE_COPY_ON_WRITE;
  ckpt_request_t* request = nullptr;
  s.Check(ckpt_save(s.ctx, state, dir, &opts, &request, s.err), "ckpt_save");
  return request;
}

int SaveWhileWriting(const char* dir) {
  Session s;
  std::vector<float> rows;
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "ckpt_state_create");
  RegisterRows(s, state, rows, true);
  ckpt_request_t* request = SaveCopyOnWrite(s, state, dir);
  Overwrite(rows);
  s.Check(ckpt_request_wait(request, 0, s.err), "the copy-on-write save");
  ckpt_request_free(request);
  ckpt_state_free(state);

  std::vector<float> loaded;
  s.Check(ckpt_state_create(&state, s.err), "ckpt_state_create");
  const uint64_t r0 = RegisterRows(s, state, loaded, false);
  s.Check(ckpt_load(s.ctx, state, dir, nullptr, s.err), "ckpt_load");
  CheckRows(s, "w", 7, loaded, r0 * kColsCow);
  ckpt_state_free(state);
  return 0;
}

int SaveAndDie(const char* dir) {
  Session s;
  std::vector<float> rows;
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "ckpt_state_create");
  RegisterRows(s, state, rows, true);
  ckpt_request_t* request = SaveCopyOnWrite(s, state, dir);
  if (s.rank == s.world - 1) {
    Overwrite(rows);  // some pages copied by the fault handler, none staged yet
    raise(SIGKILL);
  }
  const int32_t outcome = ckpt_request_wait(request, 0, s.err);
  if (outcome == CKPT_OK) Die(s.rank, "the save committed although rank " + std::to_string(s.world - 1) + " died");
  std::printf("rank %d: the save failed as it should: %s\n", s.rank, ckpt_error_message(s.err));
  ckpt_request_free(request);
  ckpt_state_free(state);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 2 ? argv[1] : "";
  if (mode == "save-while-writing") return SaveWhileWriting(argv[2]);
  if (mode == "save-and-die") return SaveAndDie(argv[2]);
  Die(-1, "usage: ckpt_scenario_cow save-while-writing|save-and-die DIR");
}

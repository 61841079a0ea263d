// Incremental saves (CKPT_SAVE_INCREMENTAL) on real ranks (tests/incremental.cmake). The state of a fine-tuning job:
// "frozen" (8 MiB of F32, rows split over the ranks) never changes; "emb" (2 MiB, rows split) changes 4 rows per
// step; "head" (64 KiB, replicated on every rank) changes every step. Values are functions of the step, so any rank
// can check any element of any step:
//   chain ROOT           a manager (keep_last 1) saves steps 1 to 4 incrementally; step 1 stays, as step 4 refers
//                        to it, and steps 2 and 3 go; step 4 wrote less than a fifth of step 1's bytes; steps 1 and
//                        4 each load back exactly, on ranks that each read whole tensors (another layout), and
//                        pass the reader's verification
//   pair BASE NEXT [in-place|cow]
//                        ckpt_save writes BASE in full (recording digests), then NEXT against it (written in place,
//                        or copy-on-write), which loads back exactly
//   orphan NEXT BASE     after BASE was deleted by hand: loading NEXT, and verifying it, fail with CKPT_E_CORRUPT
//                        naming BASE
//   die ROOT             a manager saves step 1, then rank 1 is killed (SIGKILL) while step 2, incremental and
//                        copy-on-write, stages after the call (CKPT_FAULT_STAGING_PAUSE_MS)
//   resume ROOT          after `die`: the latest step is 1, and it loads back exactly; step 2 does not exist
#include <signal.h>
#include <sys/stat.h>
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

constexpr uint64_t kFrozenRows = 2048, kFrozenCols = 1024;
constexpr uint64_t kEmbRows = 1024, kEmbCols = 512;
constexpr uint64_t kHeadRows = 64, kHeadCols = 256;
constexpr uint64_t kChangedEmbRows = 4;

// Element i of `key` at `step`.
float Value(const std::string& key, uint64_t step, uint64_t i) {
  if (key == "frozen") return ValueAt(40, i);
  if (key == "head") return ValueAt(41 + step, i);
  const uint64_t row = i / kEmbCols;
  const bool changed = row >= 40 * step && row < 40 * step + kChangedEmbRows;
  return changed ? ValueAt(100 + step, i) : ValueAt(42, i);
}

struct Tensor {
  const char* key;
  uint64_t rows, cols;
  bool replicated;
};
const Tensor kTensors[] = {{"frozen", kFrozenRows, kFrozenCols, false},
                           {"emb", kEmbRows, kEmbCols, false},
                           {"head", kHeadRows, kHeadCols, true}};

// Registers this rank's part of every tensor: its rows (or the whole of a replicated one), or with `whole`, every
// tensor whole (a load in another layout); values of `step` unless step is 0 (zeros, to load into).
void Register(const Session& s, ckpt_state_t* state, Buffers& buffers, uint64_t step, bool whole) {
  for (const Tensor& t : kTensors) {
    const bool all = whole || t.replicated;
    const uint64_t r0 = all ? 0 : SplitPoint(t.rows, s.rank, s.world);
    const uint64_t r1 = all ? t.rows : SplitPoint(t.rows, s.rank + 1, s.world);
    std::vector<float>& data = buffers.New((r1 - r0) * t.cols);
    for (uint64_t i = 0; step != 0 && i < data.size(); ++i) data[i] = Value(t.key, step, r0 * t.cols + i);
    const uint32_t replica = t.replicated && !whole ? static_cast<uint32_t>(s.rank) : 0;
    AddShard(s, state, t.key, {t.rows, t.cols}, {r1 - r0, t.cols}, {r0, 0}, data, 0, t.replicated ? &replica : nullptr,
             t.replicated ? 1 : 0);
  }
}

ckpt_state_t* StateOf(const Session& s, Buffers& buffers, uint64_t step, bool whole = false) {
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "ckpt_state_create");
  Register(s, state, buffers, step, whole);
  return state;
}

// Loads `dir` into whole tensors and dies unless they hold step `step`'s values.
void LoadAndCheck(const Session& s, const std::string& dir, uint64_t step) {
  Buffers buffers;
  ckpt_state_t* state = StateOf(s, buffers, 0, true);
  s.Check(ckpt_load(s.ctx, state, dir.c_str(), nullptr, s.err), ("loading " + dir).c_str());
  for (size_t t = 0; t < 3; ++t) {
    const std::vector<float>& got = buffers.floats[t];
    for (uint64_t i = 0; i < got.size(); ++i) {
      if (got[i] != Value(kTensors[t].key, step, i)) {
        Die(s.rank, dir + ": tensor '" + kTensors[t].key + "' element " + std::to_string(i) + " is not step " +
                        std::to_string(step) + "'s");
      }
    }
  }
  ckpt_state_free(state);
  if (s.rank == 0) CheckpointReader(dir).Verify();
}

ckpt_manager_t* OpenManager(const Session& s, const char* root, uint32_t keep_last) {
  ckpt_manager_options opts = CKPT_MANAGER_OPTIONS_INIT;
  opts.keep_last = keep_last;
  ckpt_manager_t* manager = nullptr;
  s.Check(ckpt_manager_open(s.ctx, root, &opts, &manager, s.err), "ckpt_manager_open");
  return manager;
}

ckpt_request_t* ManagerSave(const Session& s, ckpt_manager_t* manager, uint64_t step, Buffers& buffers,
                            uint64_t flags = 0) {
  ckpt_state_t* state = StateOf(s, buffers, step);
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.flags = CKPT_SAVE_INCREMENTAL | flags;
  ckpt_request_t* request = nullptr;
  s.Check(ckpt_manager_save(manager, state, step, &opts, &request, s.err), "ckpt_manager_save");
  ckpt_state_free(state);
  return request;
}

std::string StepPath(const Session& s, ckpt_manager_t* manager, uint64_t step) {
  char path[4096];
  s.Check(ckpt_manager_step_path(manager, step, path, sizeof path, s.err), "ckpt_manager_step_path");
  return path;
}

int Chain(const char* root) {
  Session s;
  ckpt_manager_t* manager = OpenManager(s, root, 1);
  for (uint64_t step = 1; step <= 4; ++step) {
    Buffers buffers;
    ckpt_request_t* request = ManagerSave(s, manager, step, buffers);
    s.Check(ckpt_request_wait(request, 0, s.err), ("step " + std::to_string(step)).c_str());
    ckpt_request_free(request);
    s.Check(ckpt_manager_wait(manager, s.err), "ckpt_manager_wait");
  }
  // Collective: every rank sees the root once rank 0's removals have finished.
  uint64_t resumed = 0;
  s.Check(ckpt_manager_resume_step(manager, &resumed, s.err), "ckpt_manager_resume_step");
  if (resumed != 4) Die(s.rank, "resumes from step " + std::to_string(resumed) + ", not 4");
  uint64_t steps[8], count = 0;
  s.Check(ckpt_manager_steps(manager, steps, 8, &count, s.err), "ckpt_manager_steps");
  if (count != 2 || steps[0] != 1 || steps[1] != 4) {
    Die(s.rank, "retention kept " + std::to_string(count) + " steps, not steps 1 (which step 4 refers to) and 4");
  }
  const std::string first = StepPath(s, manager, 1), last = StepPath(s, manager, 4);
  if (s.rank == 0) {
    const uint64_t full = DataBytes(first), incremental = DataBytes(last);
    std::printf("step 1 wrote %llu bytes, step 4 %llu\n", static_cast<unsigned long long>(full),
                static_cast<unsigned long long>(incremental));
    if (incremental * 5 > full) Die(0, "step 4 wrote more than a fifth of step 1's bytes");
  }
  LoadAndCheck(s, last, 4);
  LoadAndCheck(s, first, 1);
  ckpt_manager_free(manager);
  return 0;
}

void SaveWithBase(const Session& s, const char* dir, uint64_t step, const char* base, uint64_t flags = 0) {
  Buffers buffers;
  ckpt_state_t* state = StateOf(s, buffers, step);
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.flags = CKPT_SAVE_INCREMENTAL | flags;
  opts.base = base;
  ckpt_request_t* request = nullptr;
  s.Check(ckpt_save(s.ctx, state, dir, &opts, &request, s.err), "ckpt_save");
  s.Check(ckpt_request_wait(request, 0, s.err), dir);
  ckpt_request_free(request);
  ckpt_state_free(state);
}

int Pair(const char* base, const char* next, const std::string& how) {
  Session s;
  const uint64_t flags = how == "in-place" ? CKPT_SAVE_IN_PLACE : how == "cow" ? CKPT_SAVE_COPY_ON_WRITE : 0;
  SaveWithBase(s, base, 1, nullptr);
  SaveWithBase(s, next, 2, base, flags);
  LoadAndCheck(s, next, 2);
  return 0;
}

int Orphan(const char* next, const char* base) {
  Session s;
  const std::string base_name = std::strrchr(base, '/') + 1;
  Buffers buffers;
  ckpt_state_t* state = StateOf(s, buffers, 0, true);
  ExpectStatus(s, ckpt_load(s.ctx, state, next, nullptr, s.err), CKPT_E_CORRUPT, "loading without the base",
               {"'" + base_name + "'", "deleted"});
  ckpt_state_free(state);
  if (s.rank == 0) {
    ckpt_reader_t* reader = nullptr;
    int32_t status = ckpt_reader_open(next, &reader, s.err);
    if (status == CKPT_OK) status = ckpt_reader_verify(reader, s.err);
    ExpectStatus(s, status, CKPT_E_CORRUPT, "verifying without the base", {"'" + base_name + "'"});
    ckpt_reader_free(reader);
  }
  return 0;
}

int KillMidSave(const char* root) {
  Session s;
  ckpt_manager_t* manager = OpenManager(s, root, 1);
  Buffers first;
  ckpt_request_t* request = ManagerSave(s, manager, 1, first);
  s.Check(ckpt_request_wait(request, 0, s.err), "step 1");
  ckpt_request_free(request);
  Buffers second;
  // Copy-on-write, so that the call returns before this rank staged anything (each window waits for
  // CKPT_FAULT_STAGING_PAUSE_MS first): the kill comes while the save is being written.
  request = ManagerSave(s, manager, 2, second, CKPT_SAVE_COPY_ON_WRITE);
  if (s.rank == 1) kill(getpid(), SIGKILL);
  (void)ckpt_request_wait(request, 0, s.err);  // fails: rank 1 is gone
  ckpt_request_free(request);
  ckpt_manager_free(manager);
  return 0;
}

int Resume(const char* root) {
  Session s;
  ckpt_manager_t* manager = OpenManager(s, root, 1);
  uint64_t step = 0;
  s.Check(ckpt_manager_resume_step(manager, &step, s.err), "ckpt_manager_resume_step");
  if (step != 1) Die(s.rank, "resumes from step " + std::to_string(step) + ", not 1");
  struct stat st;
  if (stat(StepPath(s, manager, 2).c_str(), &st) == 0) Die(s.rank, "the killed save left step 2 behind");
  LoadAndCheck(s, StepPath(s, manager, 1), 1);
  ckpt_manager_free(manager);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 2 ? argv[1] : "";
  if (mode == "chain") return Chain(argv[2]);
  if (mode == "pair" && argc > 3) return Pair(argv[2], argv[3], argc > 4 ? argv[4] : "");
  if (mode == "orphan" && argc > 3) return Orphan(argv[2], argv[3]);
  if (mode == "die") return KillMidSave(argv[2]);
  if (mode == "resume") return Resume(argv[2]);
  std::fprintf(stderr, "usage: %s chain ROOT | pair BASE NEXT [in-place|cow] | orphan NEXT BASE | die ROOT | resume ROOT\n",
               argv[0]);
  return 2;
}

// The memory tier across real rank processes (tests/integration/memory_tier.sh runs it under ckpt-launch, with
// CKPT_JOB_ID naming the job and CKPT_AGENT_SHM_ROOT the agents' memory). Modes:
//   train ROOT STEPS STORAGE_EVERY END   a fresh start (no resume step), then a manager with the memory tier
//                                        saves steps 1..STEPS ("w" split by rows over the world, "bias"
//                                        replicated, common "step" and "schedule", which is large enough to be
//                                        stored in rank 0's data file rather than inline in the manifest; every
//                                        value depends on the step). END says how the trainers stop:
//                                        "exit" (context freed), "die" (every rank SIGKILLs itself once the last save
//                                        is complete on every rank), or "die-unwaited" (SIGKILL right after the last
//                                        ckpt_manager_save returns). END "die-in-place": as "die", each save
//                                        written in place (CKPT_SAVE_IN_PLACE: complete in memory when it returns).
//   restore ROOT STEP TIER [END]         the resume step and load_latest give STEP, every element of it checked,
//                                        read from TIER ("memory" or "storage", as the load's INFO line says on
//                                        every rank).
//                                        END "die": then, once every rank has restored, every rank SIGKILLs
//                                        itself.
//   agent-dies ROOT                      step 1 saved to memory; rank 0 kills the agent (SIGKILL); step 2 fails on
//                                        every rank naming the agent; step 3 starts a new agent (which adopts step
//                                        1) and succeeds; then every rank SIGKILLs itself.
//   over-budget PATH                     a save to memory larger than the agent's budget fails with
//                                        CKPT_E_NO_SPACE on every rank, naming the budget; nothing reaches PATH.
//   writes-after-staging ROOT            step 1 saved to memory with a progress callback; staging is slowed
//                                        (CKPT_FAULT_STAGING_PAUSE_MS), and while it runs no data file of this
//                                        rank may exist in the agent's memory (CKPT_AGENT_SHM_ROOT): the workers'
//                                        copies wait for staging to end. Once the save is complete they must
//                                        exist; then every rank SIGKILLs itself.
//   recycles ROOT                        steps 1, 2 and 3 saved to memory: step 3's data files must be step 1's
//                                        (the same inodes), which retention recycled when step 2 completed and the
//                                        agent handed to step 3's save; then every rank SIGKILLs itself.
//   larger-than-arena ROOT               a save to memory of 96 MiB per rank, more than the staging arena
//                                        (CKPT_ARENA_BYTES) holds, so that staging must have windows written to
//                                        make room; then loaded back from memory, every element checked.
#include <fnmatch.h>
#include <ftw.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "ckpt.h"
#include "scenario_common.h"

namespace {

using namespace scenario;

constexpr uint64_t kRowsPerRank = 64, kCols = 1000;  // 256 KB of "w" per rank

// Seeds tie every value to its step and tensor.
uint64_t WeightSeed(uint64_t step) { return 100 + step; }
uint64_t BiasSeed(uint64_t step) { return 200 + step; }

// Common bytes past the manifest's inline limit (64 KiB): every rank reads them from a data file by itself.
std::string Schedule(uint64_t step) {
  std::string schedule(80 << 10, '\0');
  for (size_t i = 0; i < schedule.size(); ++i) schedule[i] = static_cast<char>((i * 131 + step * 7) % 251);
  return schedule;
}

// The step's state of this rank; the buffers hold the step's values if `fill`.
ckpt_state_t* StepState(const Session& s, Buffers& buffers, uint64_t step, uint64_t* step_common, bool fill) {
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  const uint64_t rows = kRowsPerRank * 4;  // the same global shape whatever the world size
  const uint64_t r0 = SplitPoint(rows, s.rank, s.world), r1 = SplitPoint(rows, s.rank + 1, s.world);
  // Each buffer is registered before the next is made: making one may move the others' vectors (not their data).
  auto& w = buffers.New((r1 - r0) * kCols);
  if (fill) w = RowSlab(WeightSeed(step), kCols, r0, r1);
  AddShard(s, state, "w", {rows, kCols}, {r1 - r0, kCols}, {r0, 0}, w);
  auto& bias = buffers.New(kCols);
  if (fill) bias = RowSlab(BiasSeed(step), kCols, 0, 1);
  AddShard(s, state, "bias", {kCols}, {kCols}, {0}, bias);
  *step_common = step;
  s.Check(ckpt_state_add_common(state, "step", step_common, sizeof *step_common, s.err), "common step");
  const std::string schedule = Schedule(step);  // copied now
  s.Check(ckpt_state_add_common(state, "schedule", schedule.data(), schedule.size(), s.err), "common schedule");
  return state;
}

// Returns once every rank has called it with `root` and `what`: each leaves a file beside ROOT (never removed, so
// one such call per ROOT and `what`) and waits for the others' (the ranks share a file system in these tests). A rank
// that died right after its last save or load could otherwise fail another rank still waiting in that operation's
// last collective, and so leave the nodes' agents holding different steps.
void AwaitEveryRank(const Session& s, const std::string& root, const std::string& what) {
  const auto marker = [&](int rank) { return root + "." + what + "-" + std::to_string(rank); };
  std::fclose(std::fopen(marker(s.rank).c_str(), "w"));
  for (int rank = 0; rank < s.world; ++rank) {
    while (access(marker(rank).c_str(), F_OK) != 0) usleep(10000);
  }
}

int Train(const char* root, uint64_t steps, uint64_t storage_every, const std::string& end) {
  Session s;
  ckpt_manager_options opts = CKPT_MANAGER_OPTIONS_INIT;
  opts.memory_tier = 1;
  opts.storage_every = storage_every;
  ckpt_manager_t* manager = nullptr;
  s.Check(ckpt_manager_open(s.ctx, root, &opts, &manager, s.err), "manager open");
  uint64_t resume = 0;
  ExpectStatus(s, ckpt_manager_resume_step(manager, &resume, s.err), CKPT_E_NOT_FOUND, "a fresh start's resume step",
               {"no committed step", "in memory"});
  for (uint64_t step = 1; step <= steps; ++step) {
    Buffers buffers;
    uint64_t step_common = 0;
    ckpt_state_t* state = StepState(s, buffers, step, &step_common, true);
    ckpt_request_t* request = nullptr;
    ckpt_save_options save_opts = CKPT_SAVE_OPTIONS_INIT;
    save_opts.flags = end == "die-in-place" ? CKPT_SAVE_IN_PLACE : 0;
    s.Check(ckpt_manager_save(manager, state, step, &save_opts, &request, s.err), "manager save");
    if (step == steps && end == "die-unwaited") raise(SIGKILL);
    s.Check(ckpt_request_wait(request, 0, s.err), "save in memory");
    ckpt_request_free(request);
    ckpt_state_free(state);
  }
  if (s.rank == 0) std::printf("trained %llu steps in memory\n", static_cast<unsigned long long>(steps));
  std::fflush(stdout);
  if (end == "die" || end == "die-in-place") {
    AwaitEveryRank(s, root, "trained");
    raise(SIGKILL);
  }
  ckpt_manager_free(manager);
  return 0;
}

// Saves `step` through `manager`; the save's status (ckpt_manager_save's, else the request's).
int32_t SaveStep(const Session& s, ckpt_manager_t* manager, uint64_t step) {
  Buffers buffers;
  uint64_t step_common = 0;
  ckpt_state_t* state = StepState(s, buffers, step, &step_common, true);
  ckpt_request_t* request = nullptr;
  int32_t status = ckpt_manager_save(manager, state, step, nullptr, &request, s.err);
  if (status == CKPT_OK) status = ckpt_request_wait(request, 0, s.err);
  ckpt_request_free(request);
  ckpt_state_free(state);
  return status;
}

// A manager of `root` whose saves go to the memory tier.
ckpt_manager_t* OpenMemoryManager(const Session& s, const char* root) {
  ckpt_manager_options opts = CKPT_MANAGER_OPTIONS_INIT;
  opts.memory_tier = 1;
  ckpt_manager_t* manager = nullptr;
  s.Check(ckpt_manager_open(s.ctx, root, &opts, &manager, s.err), "manager open");
  return manager;
}

int AgentDies(const char* root) {
  Session s;
  ckpt_manager_t* manager = OpenMemoryManager(s, root);
  s.Check(SaveStep(s, manager, 1), "step 1");
  // Rank 0 kills the agent before it enters step 2; every rank's first use of the agent in step 2 (after the
  // planning, which waits for rank 0) finds it dead.
  if (s.rank == 0) {
    const std::string job = std::getenv("CKPT_JOB_ID");
    // "[c]kpt-agent" matches the agent's command line but not the shell's that runs pkill.
    const std::string pattern = "'[c]kpt-agent --job-id " + job + " '";
    const std::string kill =
        "pkill -KILL -f -- " + pattern + " && while pgrep -f -- " + pattern + " >/dev/null; do sleep 0.05; done";
    if (std::system(kill.c_str()) != 0) Die(s.rank, "could not kill the agent: " + kill);
  }
  ExpectStatus(s, SaveStep(s, manager, 2), CKPT_E_PEER_FAILED, "step 2, its agent dead", {"ckpt-agent"});
  s.Check(SaveStep(s, manager, 3), "step 3, with a new agent");
  if (s.rank == 0) std::printf("step 2 failed with the agent; step 3 saved with a new one\n");
  std::fflush(stdout);
  raise(SIGKILL);
  return 1;
}

void CollectLog(void* user, int32_t, const char* message) { *static_cast<std::string*>(user) += message; }

int Restore(const char* root, uint64_t expected_step, const std::string& tier, const std::string& end) {
  std::string log;
  Session s(CollectLog, &log);
  ckpt_manager_t* manager = nullptr;
  s.Check(ckpt_manager_open(s.ctx, root, nullptr, &manager, s.err), "manager open");
  Buffers buffers;
  uint64_t step_common = 0;
  ckpt_state_t* state = StepState(s, buffers, 0, &step_common, false);
  uint64_t resume = 0;
  s.Check(ckpt_manager_resume_step(manager, &resume, s.err), "resume step");
  if (resume != expected_step) {
    Die(s.rank, "the resume step is " + std::to_string(resume) + ", expected " + std::to_string(expected_step));
  }
  uint64_t step = 0;
  const int32_t loaded = ckpt_manager_load_latest(manager, state, nullptr, &step, s.err);
  if (loaded != CKPT_OK) std::fprintf(stderr, "rank %d's log of the failed load:\n%s", s.rank, log.c_str());
  s.Check(loaded, "load latest");
  if (step != expected_step)
    Die(s.rank, "restored step " + std::to_string(step) + ", expected " + std::to_string(expected_step));
  const uint64_t r0 = SplitPoint(kRowsPerRank * 4, s.rank, s.world);
  CheckRows(s, "w", WeightSeed(step), buffers.floats[0], r0 * kCols);
  CheckRows(s, "bias", BiasSeed(step), buffers.floats[1], 0);
  const void* data = nullptr;
  uint64_t size = 0;
  s.Check(ckpt_state_common(state, "step", &data, &size, s.err), "common step");
  if (size != 8 || *static_cast<const uint64_t*>(data) != step) Die(s.rank, "common 'step' is wrong");
  s.Check(ckpt_state_common(state, "schedule", &data, &size, s.err), "common schedule");
  if (std::string(static_cast<const char*>(data), size) != Schedule(step)) Die(s.rank, "common 'schedule' is wrong");
  const std::string said = "from " + tier;
  if (log.find(said) == std::string::npos) Die(s.rank, "the load did not read " + said + ": " + log);
  if (s.rank == 0) {
    std::fprintf(stderr, "rank 0's log of the load:\n%s", log.c_str());  // the warnings a test may look for
    std::printf("restored step %llu on %d ranks from %s, every element checked\n",
                static_cast<unsigned long long>(step), s.world, tier.c_str());
  }
  std::fflush(stdout);
  if (end == "die" || end == "die-in-place") {
    AwaitEveryRank(s, root, "restored");
    raise(SIGKILL);
  }
  ckpt_state_free(state);
  ckpt_manager_free(manager);
  return 0;
}

int OverBudget(const char* path) {
  Session s;
  Buffers buffers;
  uint64_t step_common = 0;
  ckpt_state_t* state = StepState(s, buffers, 1, &step_common, true);
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.tier = CKPT_TIER_MEMORY;
  ckpt_request_t* request = nullptr;
  int32_t status = ckpt_save(s.ctx, state, path, &opts, &request, s.err);
  if (status == CKPT_OK) status = ckpt_request_wait(request, 0, s.err);
  ExpectStatus(s, status, CKPT_E_NO_SPACE, "a save past the budget", {"budget"});
  ckpt_request_free(request);
  ckpt_state_free(state);
  if (s.rank == 0) std::printf("refused as expected: %s\n", ckpt_error_message(s.err));
  return 0;
}

// The inode numbers of the files under the agents' memory root (CKPT_AGENT_SHM_ROOT) whose paths match `pattern`.
std::set<ino_t> MemoryFiles(const std::string& pattern) {
  static std::string wanted;
  static std::set<ino_t> found;
  wanted = pattern;
  found.clear();
  const char* root = std::getenv("CKPT_AGENT_SHM_ROOT");
  if (root == nullptr) return found;
  nftw(
      root,
      [](const char* path, const struct stat* st, int type, struct FTW*) {
        if (type == FTW_F && fnmatch(wanted.c_str(), path, 0) == 0) found.insert(st->st_ino);
        return 0;
      },
      16, FTW_PHYS);
  return found;
}

// This rank's data files ("data/<rank>-<file>.bin") anywhere under the agents' memory root.
int RankDataFiles(int rank) {
  return static_cast<int>(MemoryFiles("*/data/" + std::to_string(rank) + "-*.bin").size());
}

struct StagingWatch {
  int rank = 0;
  int reports = 0;     // STAGING reports with some bytes staged
  int files_seen = 0;  // this rank's data files found at those reports
};

void WatchStaging(void* user, int32_t phase, uint64_t done, uint64_t) {
  auto* watch = static_cast<StagingWatch*>(user);
  if (phase != CKPT_PHASE_STAGING || done == 0) return;
  ++watch->reports;
  watch->files_seen += RankDataFiles(watch->rank);
}

int WritesAfterStaging(const char* root) {
  Session s;
  ckpt_manager_t* manager = OpenMemoryManager(s, root);
  Buffers buffers;
  uint64_t step_common = 0;
  ckpt_state_t* state = StepState(s, buffers, 1, &step_common, true);
  StagingWatch watch;
  watch.rank = s.rank;
  ckpt_save_options save_opts = CKPT_SAVE_OPTIONS_INIT;
  save_opts.progress = WatchStaging;
  save_opts.progress_user = &watch;
  ckpt_request_t* request = nullptr;
  s.Check(ckpt_manager_save(manager, state, 1, &save_opts, &request, s.err), "manager save");
  s.Check(ckpt_request_wait(request, 0, s.err), "save in memory");
  ckpt_request_free(request);
  ckpt_state_free(state);
  if (watch.reports == 0) Die(s.rank, "staging was never reported with bytes staged: no CKPT_FAULT_STAGING_PAUSE_MS?");
  if (watch.files_seen != 0) Die(s.rank, "a data file reached the agent's memory while staging still ran");
  if (RankDataFiles(s.rank) <= 0) Die(s.rank, "no data file of this rank in the agent's memory after the save");
  if (s.rank == 0) std::printf("memory saves write after staging: %d report(s) checked\n", watch.reports);
  std::fflush(stdout);
  AwaitEveryRank(s, root, "saved");
  raise(SIGKILL);
  return 1;
}

int Recycles(const char* root) {
  Session s;
  ckpt_manager_t* manager = OpenMemoryManager(s, root);
  std::set<ino_t> step_1_files, step_3_files;
  for (uint64_t step = 1; step <= 3; ++step) {
    s.Check(SaveStep(s, manager, step), ("step " + std::to_string(step)).c_str());
    char name[32];
    std::snprintf(name, sizeof name, "step-%012llu", static_cast<unsigned long long>(step));
    // Every rank's files once the save is complete on every rank, this rank's own later.
    if (step == 1) step_1_files = MemoryFiles(std::string("*/") + name + "-*/data/*.bin");
    if (step == 3)
      step_3_files = MemoryFiles(std::string("*/") + name + "-*/data/" + std::to_string(s.rank) + "-*.bin");
  }
  if (step_1_files.empty() || step_3_files.empty()) Die(s.rank, "no data files of steps 1 and 3 in the memory root");
  for (ino_t file : step_3_files) {
    if (step_1_files.count(file) == 0) Die(s.rank, "a data file of step 3 is a fresh file, not one of step 1's");
  }
  if (s.rank == 0) std::printf("step 3 was written into the files of step 1\n");
  std::fflush(stdout);
  AwaitEveryRank(s, root, "recycled");
  raise(SIGKILL);
  return 1;
}

int LargerThanArena(const char* root) {
  std::string log;
  Session s(CollectLog, &log);
  ckpt_manager_t* manager = OpenMemoryManager(s, root);
  constexpr uint64_t kBigCols = 4096, kBigRowsPerRank = (96ull << 20) / (kBigCols * sizeof(float));
  const uint64_t rows = kBigRowsPerRank * s.world;
  const uint64_t r0 = kBigRowsPerRank * s.rank;
  Buffers saved, loaded;
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  auto& big = saved.New(0);
  big = RowSlab(WeightSeed(1), kBigCols, r0, r0 + kBigRowsPerRank);
  AddShard(s, state, "big", {rows, kBigCols}, {kBigRowsPerRank, kBigCols}, {r0, 0}, big);
  ckpt_request_t* request = nullptr;
  s.Check(ckpt_manager_save(manager, state, 1, nullptr, &request, s.err), "manager save");
  s.Check(ckpt_request_wait(request, 0, s.err), "save in memory");
  ckpt_request_free(request);
  ckpt_state_free(state);

  s.Check(ckpt_state_create(&state, s.err), "state");
  auto& back = loaded.New(kBigRowsPerRank * kBigCols);
  AddShard(s, state, "big", {rows, kBigCols}, {kBigRowsPerRank, kBigCols}, {r0, 0}, back);
  uint64_t step = 0;
  s.Check(ckpt_manager_load_latest(manager, state, nullptr, &step, s.err), "load latest");
  if (log.find("from the memory tier") == std::string::npos) Die(s.rank, "the load did not read memory: " + log);
  CheckRows(s, "big", WeightSeed(1), back, r0 * kBigCols);
  ckpt_state_free(state);
  ckpt_manager_free(manager);
  if (s.rank == 0)
    std::printf("restored %llu MiB per rank from memory, every element checked\n",
                static_cast<unsigned long long>(kBigRowsPerRank * kBigCols * sizeof(float) >> 20));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "train" && argc == 6) {
    return Train(argv[2], std::strtoull(argv[3], nullptr, 0), std::strtoull(argv[4], nullptr, 0), argv[5]);
  }
  if (mode == "restore" && (argc == 5 || argc == 6)) {
    return Restore(argv[2], std::strtoull(argv[3], nullptr, 0), argv[4], argc == 6 ? argv[5] : "");
  }
  if (mode == "over-budget" && argc == 3) return OverBudget(argv[2]);
  if (mode == "agent-dies" && argc == 3) return AgentDies(argv[2]);
  if (mode == "writes-after-staging" && argc == 3) return WritesAfterStaging(argv[2]);
  if (mode == "larger-than-arena" && argc == 3) return LargerThanArena(argv[2]);
  if (mode == "recycles" && argc == 3) return Recycles(argv[2]);
  std::fprintf(stderr, "usage: ckpt_scenario_memory MODE ARGS... (see the comment at the top of scenario_memory.cc)\n");
  return 2;
}

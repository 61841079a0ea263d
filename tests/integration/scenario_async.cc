// Saves that run behind the caller, run on N ranks by ckpt-launch from tests/integration/run.sh: buffers reusable
// at return, the plan cache, failures of the I/O workers and the disk, a state larger than the staging arena, and
// what each rank reports about its own part.
// Each mode checks what every rank sees through the public C API and exits non-zero, saying why, if a behaviour is
// broken. Usage: ckpt_scenario_async MODE ARGS...
//
//   async DIR                   buffers overwritten as soon as ckpt_save returns; back-to-back saves
//   plan-cache DIR              an unchanged structure reuses the plan; a change on one rank replans
//   worker-killed ROOT          a worker killed during a save fails it on every rank; latest untouched
//   full-disk ROOT              ENOSPC fails the save on every rank; latest untouched
//   io-error ROOT               EIO on step 2's data files (a test build's CKPT_FAULT_EIO_PATH) fails the save on
//                               every rank as CKPT_E_IO naming the file; latest untouched; step 3 commits
//   big-state DIR               a state 4x the staging arena: saved, loaded, memory bounded
//   request-stats DIR           every rank's ckpt_request_stats counts the bytes and files the manifest says it
//                               wrote (a replicated tensor is written by one rank only), its progress ends
//                               COMMITTED with those bytes, and it logs an INFO line for the save and for the load
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "ckpt.h"
#include "scenario_common.h"

namespace scenario {
namespace {

// Starts a save of `state` into `dir` and returns the request unwaited.
ckpt_request_t* StartLayoutSave(const Session& s, ckpt_state_t* state, const std::string& dir) {
  ckpt_request_t* request = nullptr;
  s.Check(ckpt_save(s.ctx, state, dir.c_str(), nullptr, &request, s.err), "save");
  return request;
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
  ckpt_manager_free(small.manager);  // one manager holds a root at a time
  Managed big;
  OpenManaged(s, root, &big, 4096);
  ExpectStatus(s, ManagedSave(s, big, 2), CKPT_E_NO_SPACE, "save onto a full disk", {"rank"});
  if (s.rank == 0) std::printf("full disk: %s\n", ckpt_error_message(s.err));
  ExpectLatest(s, big, 1);
  if (StepExists(big, 2)) Die(s.rank, "the failed save left step 2 behind");
  ckpt_state_free(small.state);
  ckpt_state_free(big.state);
  ckpt_manager_free(big.manager);
  return 0;
}

// run.sh makes every write of step 2's data files fail with EIO (CKPT_FAULT_EIO_PATH): the disk fails mid-save.
int IoError(const char* root) {
  Session s;
  Managed m;
  OpenManaged(s, root, &m, 64);
  s.Check(ManagedSave(s, m, 1), "step 1");
  ExpectStatus(s, ManagedSave(s, m, 2), CKPT_E_IO, "save onto a failing disk",
               {"cannot write", "step-000000000002", "/data/", "Input/output error"});
  if (s.rank == 0) std::printf("io error: %s\n", ckpt_error_message(s.err));
  ExpectLatest(s, m, 1);
  if (StepExists(m, 2)) Die(s.rank, "the failed save left step 2 behind");
  s.Check(ManagedSave(s, m, 3), "step 3, on a disk that works again");
  ExpectLatest(s, m, 3);
  ckpt_state_free(m.state);
  ckpt_manager_free(m.manager);
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

// The INFO lines this rank's context logged.
struct InfoLines {
  std::mutex mutex;
  std::vector<std::string> lines;

  static void Log(void* user, int32_t level, const char* message) {
    auto* self = static_cast<InfoLines*>(user);
    std::lock_guard<std::mutex> lock(self->mutex);
    if (level == CKPT_LOG_INFO) self->lines.push_back(message);
  }

  bool Has(const std::string& prefix) {
    std::lock_guard<std::mutex> lock(mutex);
    for (const std::string& line : lines) {
      if (line.rfind(prefix, 0) == 0) return true;
    }
    return false;
  }
};

// The last progress report of a save (the save thread's calls come after the caller's, never at once).
struct LastProgress {
  std::mutex mutex;
  int32_t phase = -1;
  uint64_t done = 0, total = 0;

  static void Report(void* user, int32_t phase, uint64_t done, uint64_t total) {
    auto* self = static_cast<LastProgress*>(user);
    std::lock_guard<std::mutex> lock(self->mutex);
    self->phase = phase;
    self->done = done;
    self->total = total;
  }
};

// The bytes and data files the manifest of `dir` credits to `rank`, from its chunks' file names (data/<rank>-*).
std::pair<uint64_t, uint64_t> WrittenBy(const Session& s, const std::string& dir, int rank) {
  ckpt_reader_t* reader = nullptr;
  s.Check(ckpt_reader_open(dir.c_str(), &reader, s.err), "reader");
  ckpt_checkpoint_info info = CKPT_CHECKPOINT_INFO_INIT;
  s.Check(ckpt_reader_info(reader, &info, s.err), "reader info");
  const std::string prefix = "data/" + std::to_string(rank) + "-";
  uint64_t bytes = 0;
  std::set<std::string> files;
  for (uint64_t t = 0; t < info.tensor_count; ++t) {
    ckpt_tensor_info tensor = CKPT_TENSOR_INFO_INIT;
    s.Check(ckpt_reader_tensor(reader, t, &tensor, s.err), "reader tensor");
    for (uint64_t c = 0; c < tensor.chunk_count; ++c) {
      ckpt_chunk_info chunk = CKPT_CHUNK_INFO_INIT;
      s.Check(ckpt_reader_chunk(reader, t, c, &chunk, s.err), "reader chunk");
      if (std::string(chunk.file).rfind(prefix, 0) != 0) continue;
      bytes += chunk.byte_length;
      files.insert(chunk.file);
    }
  }
  ckpt_reader_free(reader);
  return {bytes, files.size()};
}

void Expect(const Session& s, bool holds, const std::string& what) {
  if (!holds) Die(s.rank, what);
}

int RequestStats(const char* root) {
  InfoLines info;
  Session s(&InfoLines::Log, &info);
  const std::string dir = std::string(root) + "/stats";
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  Buffers buffers;
  RegisterLayout(s, state, buffers, true);
  uint64_t registered = 0;
  for (const std::vector<float>& buffer : buffers.floats) registered += buffer.size() * sizeof(float);

  LastProgress progress;
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.progress = &LastProgress::Report;
  opts.progress_user = &progress;
  ckpt_request_t* request = nullptr;
  s.Check(ckpt_save(s.ctx, state, dir.c_str(), &opts, &request, s.err), "save");
  s.Check(ckpt_request_wait(request, 0, s.err), "save wait");
  ckpt_request_stats stats = CKPT_REQUEST_STATS_INIT;
  s.Check(ckpt_request_stats_get(request, &stats, s.err), "stats");
  ckpt_request_free(request);

  const auto [bytes, files] = WrittenBy(s, dir, s.rank);
  const std::string figures =
      "state " + std::to_string(stats.state_bytes) + ", to write " + std::to_string(stats.bytes_to_write) +
      ", written " + std::to_string(stats.bytes_written) + " in " + std::to_string(stats.files_written) +
      " files; the manifest credits " + std::to_string(bytes) + " bytes in " + std::to_string(files) + " files";
  Expect(s, stats.committed == 1, "not committed: " + figures);
  Expect(s, stats.state_bytes == registered, "state_bytes is not what this rank registered: " + figures);
  Expect(s,
         stats.bytes_to_write == bytes && stats.bytes_written == bytes && stats.bytes_staged == bytes &&
             stats.bytes_committed == bytes,
         "the bytes are not this rank's own: " + figures);
  Expect(s, stats.files_written == files, "the files are not this rank's own: " + figures);
  Expect(s, progress.phase == CKPT_PHASE_COMMITTED && progress.done == bytes && progress.total == bytes,
         "the last progress report is phase " + std::to_string(progress.phase) + ", " + std::to_string(progress.done) +
             " of " + std::to_string(progress.total) + "; " + figures);
  Expect(s, info.Has("saved '" + dir + "': "), "no INFO line for the committed save");

  s.Check(ckpt_load(s.ctx, state, dir.c_str(), nullptr, s.err), "load");
  Expect(s, info.Has("loaded '" + dir + "': "), "no INFO line for the load");
  ckpt_state_free(state);
  std::printf("request-stats: rank %d wrote %llu of its %llu bytes in %llu files (%.2f GB/s)\n", s.rank,
              static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(registered),
              static_cast<unsigned long long>(files),
              static_cast<double>(stats.bytes_written) / static_cast<double>(stats.total_ns));
  return 0;
}

}  // namespace
}  // namespace scenario

int main(int argc, char** argv) {
  using namespace scenario;
  if (argc < 3) {
    std::fprintf(stderr, "usage: ckpt_scenario_async MODE ARGS... (see the comment at the top of scenario_async.cc)\n");
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "async") return Async(argv[2]);
  if (mode == "plan-cache") return PlanCache(argv[2]);
  if (mode == "worker-killed") return WorkerKilled(argv[2]);
  if (mode == "full-disk") return FullDisk(argv[2]);
  if (mode == "io-error") return IoError(argv[2]);
  if (mode == "big-state") return BigState(argv[2]);
  if (mode == "request-stats") return RequestStats(argv[2]);
  std::fprintf(stderr, "ckpt_scenario_async: unknown mode or wrong arguments: %s\n", mode.c_str());
  return 2;
}

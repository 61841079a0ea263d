// Ranks that disagree or go away, run on N ranks by ckpt-launch from tests/integration/run.sh: collectives called
// in a different order, rank 0 dying in the middle of a save, a peer that stops without dying. Each mode checks
// what every rank sees through the public C API and exits non-zero, saying why, if a behaviour is broken.
// Usage: ckpt_scenario_control MODE ARGS...
//
//   save-rows DIR                a small checkpoint for the modes below
//   load-rows DIR                loads save-rows' checkpoint and checks every element
//   check-world DIR N            (no context) DIR was saved by N ranks
//   mismatched-collectives DIR   rank 0 saves while the others load DIR: every rank gets CKPT_E_MISMATCH naming
//                                what each called, and the ranks stay in step for the next call
//   rank0-dies-mid-save DIR      rank 0 exits while its save is still writing; the others fail naming it
//   manager-rank0-dies ROOT      the same for step 7 of a manager under ROOT
//   manager-resume ROOT          opens the manager under ROOT and saves step 8
//   stopped-peer DIR             the last rank stops (SIGSTOP) before a load; the others fail with CKPT_E_TIMEOUT
//                                within the timeout and a margin, not twice the timeout
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ckpt.h"
#include "scenario_common.h"

namespace scenario {
namespace {

// A state of one F32 tensor of `elements` per rank, rows split by rank.
ckpt_state_t* RowState(const Session& s, Buffers& buffers, uint64_t elements_per_rank) {
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  const uint64_t rows = static_cast<uint64_t>(s.world);
  std::vector<float>& mine = buffers.New(elements_per_rank);
  for (uint64_t i = 0; i < elements_per_rank; ++i) mine[i] = static_cast<float>(i % 1000);
  AddShard(s, state, "rows", {rows, elements_per_rank}, {1, elements_per_rank}, {static_cast<uint64_t>(s.rank), 0},
           mine);
  return state;
}

int MismatchedCollectives(const char* dir) {
  Session s;
  Buffers buffers;
  ckpt_state_t* state = RowState(s, buffers, 1024);
  const std::string other = std::string(dir) + "-never";
  int32_t status = CKPT_OK;
  if (s.rank == 0) {
    ckpt_request_t* request = nullptr;
    status = ckpt_save(s.ctx, state, other.c_str(), nullptr, &request, s.err);
    ckpt_request_free(request);
  } else {
    status = ckpt_load(s.ctx, state, dir, nullptr, s.err);
  }
  ExpectStatus(s, status, CKPT_E_MISMATCH, "save on rank 0 against load on the others",
               {"different collective operations", "rank 0: called save", "called load"});
  if (s.rank == 0) std::printf("mismatch reported: %s\n", ckpt_error_message(s.err));
  if (access(other.c_str(), F_OK) == 0) Die(s.rank, "the mismatched save created " + other);
  // Every rank left the mismatched step together: the next collective call works.
  s.Check(ckpt_load(s.ctx, state, dir, nullptr, s.err), "load after the mismatch");
  ckpt_state_free(state);
  return 0;
}

int SaveRows(const char* dir) {
  Session s;
  Buffers buffers;
  ckpt_state_t* state = RowState(s, buffers, 1024);
  SaveAndWait(s, state, dir, "save");
  ckpt_state_free(state);
  return 0;
}

int LoadRows(const char* dir) {
  Session s;
  Buffers buffers;
  ckpt_state_t* state = RowState(s, buffers, 1024);
  std::vector<float>& mine = buffers.floats.back();
  std::fill(mine.begin(), mine.end(), -1.0f);
  s.Check(ckpt_load(s.ctx, state, dir, nullptr, s.err), "load");
  for (size_t i = 0; i < mine.size(); ++i) {
    if (mine[i] != static_cast<float>(i % 1000)) Die(s.rank, "element " + std::to_string(i) + " is wrong");
  }
  ckpt_state_free(state);
  return 0;
}

// Rank 0 registers 64 MiB, so that when ckpt_save returns its last writes are still in flight and the save cannot
// have been committed; it then exits at once, as a crashed process would, leaving its temporary directory.
int Rank0DiesMidSave(const char* dir, bool manager) {
  Session s;
  Buffers buffers;
  const uint64_t elements = s.rank == 0 ? 16 * 1024 * 1024 : 1024;
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  std::vector<float>& mine = buffers.New(elements);
  const std::string key = "of-rank-" + std::to_string(s.rank);
  AddShard(s, state, key.c_str(), {elements}, {elements}, {0}, mine);
  ckpt_manager_t* m = nullptr;
  ckpt_request_t* request = nullptr;
  if (manager) {
    s.Check(ckpt_manager_open(s.ctx, dir, nullptr, &m, s.err), "manager open");
    s.Check(ckpt_manager_save(m, state, 7, nullptr, &request, s.err), "manager save");
  } else {
    s.Check(ckpt_save(s.ctx, state, dir, nullptr, &request, s.err), "save");
  }
  if (s.rank == 0) _exit(0);
  ExpectStatus(s, ckpt_request_wait(request, 0, s.err), CKPT_E_PEER_FAILED, "save whose rank 0 died", {"rank 0"});
  ckpt_request_free(request);
  ckpt_manager_free(m);
  ckpt_state_free(state);
  return 0;
}

int ManagerResume(const char* root) {
  Session s;
  Buffers buffers;
  ckpt_state_t* state = RowState(s, buffers, 1024);
  ckpt_manager_t* m = nullptr;
  s.Check(ckpt_manager_open(s.ctx, root, nullptr, &m, s.err), "manager open");
  ckpt_request_t* request = nullptr;
  s.Check(ckpt_manager_save(m, state, 8, nullptr, &request, s.err), "manager save");
  s.Check(ckpt_request_wait(request, 0, s.err), "wait");
  ckpt_request_free(request);
  ckpt_manager_free(m);
  ckpt_state_free(state);
  return 0;
}

int StoppedPeer(const char* dir) {
  Session s;
  Buffers buffers;
  ckpt_state_t* state = RowState(s, buffers, 1024);
  const std::string pid_file = std::string(dir) + ".stopped-pid";
  if (s.rank == s.world - 1) {
    // Never resumed: rank 0 kills it once the others have seen the timeout.
    FILE* f = std::fopen(pid_file.c_str(), "w");
    if (f == nullptr) Die(s.rank, "cannot write " + pid_file);
    std::fprintf(f, "%d\n", static_cast<int>(getpid()));
    std::fclose(f);
    raise(SIGSTOP);
  }
  const char* configured = std::getenv("CKPT_TIMEOUT_MS");
  const double timeout_s = configured ? std::atof(configured) / 1000.0 : 300.0;
  const auto start = std::chrono::steady_clock::now();
  const int32_t status = ckpt_load(s.ctx, state, dir, nullptr, s.err);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ExpectStatus(s, status, CKPT_E_TIMEOUT, "load with a stopped peer", {"rank " + std::to_string(s.world - 1)});
  std::printf("rank %d: timed out after %.2f s (timeout %.2f s): %s\n", s.rank, waited, timeout_s,
              ckpt_error_message(s.err));
  if (waited > timeout_s * 1.5 + 1.0) {
    Die(s.rank, "waited " + std::to_string(waited) + " s for a stopped peer, more than the timeout allows");
  }
  ckpt_state_free(state);
  std::fflush(stdout);
  const std::string done = std::string(dir) + ".done-";
  if (s.rank != 0) {
    std::fclose(std::fopen((done + std::to_string(s.rank)).c_str(), "w"));
  } else {
    // Rank 0 hosts the store: it stays until every other running rank has had its answer.
    for (int r = 1; r < s.world - 1; ++r) {
      for (int tries = 0; tries < 1000 && access((done + std::to_string(r)).c_str(), F_OK) != 0; ++tries) {
        usleep(10000);
      }
    }
    FILE* f = std::fopen(pid_file.c_str(), "r");
    int pid = 0;
    if (f == nullptr || std::fscanf(f, "%d", &pid) != 1) Die(s.rank, "cannot read " + pid_file);
    std::fclose(f);
    kill(pid, SIGKILL);
  }
  _exit(0);  // without the goodbyes a stopped peer would never answer
}

int CheckWorld(const char* dir, uint32_t expected) {
  const uint32_t world = CheckpointReader(dir).info().world_size;
  if (world != expected) {
    Die(0,
        std::string(dir) + " was saved by " + std::to_string(world) + " ranks, expected " + std::to_string(expected));
  }
  return 0;
}

}  // namespace
}  // namespace scenario

int main(int argc, char** argv) {
  using namespace scenario;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODE DIR\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "save-rows") return SaveRows(argv[2]);
  if (mode == "load-rows") return LoadRows(argv[2]);
  if (mode == "check-world" && argc == 4) return CheckWorld(argv[2], static_cast<uint32_t>(std::atoi(argv[3])));
  if (mode == "mismatched-collectives") return MismatchedCollectives(argv[2]);
  if (mode == "rank0-dies-mid-save") return Rank0DiesMidSave(argv[2], false);
  if (mode == "manager-rank0-dies") return Rank0DiesMidSave(argv[2], true);
  if (mode == "manager-resume") return ManagerResume(argv[2]);
  if (mode == "stopped-peer") return StoppedPeer(argv[2]);
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}

// Ranks spread over several hosts (network namespaces of this machine, each rank started by
// tests/integration/three_hosts.sh with the launcher's variables a torchrun on that host would give it). Each mode
// checks what every rank sees through the public C API and exits non-zero, saying why, if a behaviour is broken.
// Usage: ckpt_scenario_hosts MODE ARGS...
//
//   save-hosts DIR              rows "w" split over the world, "big" replicated on every rank
//   load-hosts DIR              loads save-hosts' checkpoint with this world's rows (any world size: resharded) and
//                               all of "big" on every rank, checks every element, prints this rank's exchange figures
//   save-link-cut FIRST SECOND SIGNALS HELD
//                               saves FIRST (must commit), then SECOND while the script cuts a host's link: the
//                               ranks listed in HELD ("4,5") hold their save thread in its progress callback, before
//                               their write report, until SIGNALS/cut exists; every rank's SECOND must then fail
//                               (CKPT_E_TIMEOUT or CKPT_E_PEER_FAILED) within 1.5 x CKPT_TIMEOUT_MS + 2 s of the cut,
//                               and SECOND must not exist
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ckpt.h"
#include "scenario_common.h"

namespace scenario {
namespace {

// "w": large enough that each rank's rows span several pages, uneven over 4 and 6 ranks' splits of each other.
constexpr uint64_t kHostRows = 601, kHostCols = 1000;
constexpr uint64_t kWSeed = 21, kBigSeed = 22;

// Registers this rank's rows of "w" and a full replica of "big", filled with their values if `fill`.
ckpt_state_t* HostsState(const Session& s, Buffers& buffers, bool fill) {
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  const uint64_t r0 = SplitPoint(kHostRows, s.rank, s.world), r1 = SplitPoint(kHostRows, s.rank + 1, s.world);
  auto& w = buffers.New((r1 - r0) * kHostCols);
  if (fill) w = RowSlab(kWSeed, kHostCols, r0, r1);
  AddShard(s, state, "w", {kHostRows, kHostCols}, {r1 - r0, kHostCols}, {r0, 0}, w);
  auto& big = buffers.New(kBigRows * kBigCols);
  if (fill) big = RowSlab(kBigSeed, kBigCols, 0, kBigRows);
  const uint32_t replica = static_cast<uint32_t>(s.rank);
  AddShard(s, state, "big", {kBigRows, kBigCols}, {kBigRows, kBigCols}, {0, 0}, big, 0, &replica, 1);
  return state;
}

const char* NodeName() {
  const char* node = std::getenv("CKPT_NODE_NAME");
  return node != nullptr ? node : "?";
}

int SaveHosts(const char* dir) {
  Session s;
  Buffers buffers;
  ckpt_state_t* state = HostsState(s, buffers, true);
  SaveAndWait(s, state, dir, "save");
  ckpt_state_free(state);
  return 0;
}

int LoadHosts(const char* dir) {
  Session s;
  Buffers buffers;
  ckpt_state_t* state = HostsState(s, buffers, false);
  s.Check(ckpt_load(s.ctx, state, dir, nullptr, s.err), "load");
  CheckRows(s, "w", kWSeed, buffers.floats[0], SplitPoint(kHostRows, s.rank, s.world) * kHostCols);
  CheckRows(s, "big", kBigSeed, buffers.floats[1], 0);
  const ckpt_context_stats stats = Stats(s);
  std::printf(
      "rank %d host %s: every element checked; transport %d bytes_read %llu bytes_sent %llu "
      "bytes_received %llu\n",
      s.rank, NodeName(), stats.transport, (unsigned long long)stats.bytes_read, (unsigned long long)stats.bytes_sent,
      (unsigned long long)stats.bytes_received);
  ckpt_state_free(state);
  return 0;
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

void Touch(int rank, const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) Die(rank, "cannot create " + path);
  std::fclose(f);
}

bool Listed(const std::string& list, int rank) {
  std::stringstream items(list);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (!item.empty() && std::atoi(item.c_str()) == rank) return true;
  }
  return false;
}

// Seconds since `path` was last modified (the script's moment of the cut, on this machine's one clock).
double SecondsSince(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return -1.0;
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<double>(now.tv_sec - st.st_mtim.tv_sec) + (now.tv_nsec - st.st_mtim.tv_nsec) / 1e9;
}

// A held rank's progress callback. Its save thread calls it on entering COMMITTING (and may during WRITING) before
// posting this rank's write report, so rank 0 cannot commit while it waits: the cut lands inside the save,
// whatever the speed of the disk. It waits for the script's signal that the link is down (bounded, so that a broken
// script cannot leave it waiting forever).
struct Hold {
  int rank = 0;
  std::string signals;
  std::thread::id caller;
  bool held = false;

  static void OnProgress(void* user, int32_t phase, uint64_t, uint64_t) {
    Hold& h = *static_cast<Hold*>(user);
    const bool save_thread = std::this_thread::get_id() != h.caller;
    if (h.held || !save_thread || (phase != CKPT_PHASE_WRITING && phase != CKPT_PHASE_COMMITTING)) return;
    h.held = true;
    Touch(h.rank, h.signals + "/held-" + std::to_string(h.rank));
    for (int tries = 0; tries < 6000 && !Exists(h.signals + "/cut"); ++tries) usleep(10000);
  }
};

double TimeoutSeconds() {
  const char* configured = std::getenv("CKPT_TIMEOUT_MS");
  return configured != nullptr ? std::atof(configured) / 1000.0 : 20.0;
}

int SaveLinkCut(const char* first, const char* second, const char* signals, const char* held_ranks) {
  Session s;
  Buffers buffers;
  ckpt_state_t* state = HostsState(s, buffers, true);
  SaveAndWait(s, state, first, "first save");

  Hold hold;
  hold.rank = s.rank;
  hold.signals = signals;
  hold.caller = std::this_thread::get_id();
  const bool held = Listed(held_ranks, s.rank);
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  if (held) {
    opts.progress = &Hold::OnProgress;
    opts.progress_user = &hold;
  }
  ckpt_request_t* request = nullptr;
  s.Check(ckpt_save(s.ctx, state, second, &opts, &request, s.err), "second save");
  // Past the plan, which every rank took part in: the save is under way on every host.
  if (!held) Touch(s.rank, std::string(signals) + "/saving-" + std::to_string(s.rank));
  const int32_t status = ckpt_request_wait(request, 0, s.err);
  const std::string cut = std::string(signals) + "/cut";
  const double after_cut = SecondsSince(cut);
  const std::string message = ckpt_error_message(s.err);
  if (status == CKPT_OK) Die(s.rank, std::string("the save committed although a host's link was cut: ") + second);
  if (status != CKPT_E_TIMEOUT && status != CKPT_E_PEER_FAILED) {
    Die(s.rank, std::string("expected CKPT_E_TIMEOUT or CKPT_E_PEER_FAILED, got ") + ckpt_status_string(status) + ": " +
                    message);
  }
  if (after_cut < 0) Die(s.rank, "the save failed before the link was cut: " + message);
  ckpt_request_stats stats = CKPT_REQUEST_STATS_INIT;
  s.Check(ckpt_request_stats_get(request, &stats, s.err), "request stats");
  if (stats.committed != 0) Die(s.rank, "the failed save's statistics say it committed");
  // One silent peer costs one timeout plus the commit's margins, never one timeout per wait in turn.
  const double bound = 1.5 * TimeoutSeconds() + 2.0;
  std::printf("rank %d host %s%s: failed %.2f s after the cut (timeout %.1f s): %s: %s\n", s.rank, NodeName(),
              held ? " (cut off)" : "", after_cut, TimeoutSeconds(), ckpt_status_string(status), message.c_str());
  std::fflush(stdout);
  if (after_cut > bound) Die(s.rank, "failed " + std::to_string(after_cut) + " s after the cut, more than the bound");
  if (Exists(second)) Die(s.rank, std::string("the failed save left ") + second);
  ckpt_request_free(request);
  ckpt_state_free(state);
  return 0;
}

}  // namespace
}  // namespace scenario

int main(int argc, char** argv) {
  using namespace scenario;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "save-hosts" && argc == 3) return SaveHosts(argv[2]);
  if (mode == "load-hosts" && argc == 3) return LoadHosts(argv[2]);
  if (mode == "save-link-cut" && argc == 6) return SaveLinkCut(argv[2], argv[3], argv[4], argv[5]);
  std::fprintf(stderr, "usage: ckpt_scenario_hosts MODE ARGS... (see the comment at the top of scenario_hosts.cc)\n");
  return 2;
}

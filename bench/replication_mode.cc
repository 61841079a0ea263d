// ckpt_bench_replication replication --size-mib N: the memory tier's replication between two node agents
// (runtime/agent/replicator.h), measured in one process over UCX's TCP transport on loopback, so that bench/run can
// print it beside ucx_perftest's tag_bw with UCX_TLS=tcp. It links the agent's internals, not the public API.
//
// Checkpoints of N MiB in four data files are pushed from one agent's memory directory (under /dev/shm) to the
// other's, one per step as a job saving to memory every step does; each push's time runs from its start to the
// sender marking it replicated (every file received, renamed into place and acknowledged). A small push first sets up
// the connection. The first full push writes into fresh memory; from the second on, the receiver writes into the
// files of the replica its retention removed (MemoryStore's recycled files), as in a job's steady state. Prints
// `replication_fresh_gbps` (the first) and `replication_gbps` (the steps after it, their bytes over their time), in
// GB/s (1e9).
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "io/file_io.h"
#include "runtime/agent/memory_store.h"
#include "runtime/agent/replicator.h"

namespace {

using namespace ckpt;
using namespace ckpt::agent;
using Clock = std::chrono::steady_clock;

constexpr int kFiles = 4;
constexpr int kSteps = 4;  // the first into fresh memory, the others into recycled files
constexpr auto kLongestWait = std::chrono::seconds(120);

template <typename T>
T Check(Result<T> result, const char* what) {
  if (!result.ok()) throw std::runtime_error(std::string(what) + ": " + result.status().message());
  return std::move(*result);
}

void Check(const Status& status, const char* what) {
  if (!status.ok()) throw std::runtime_error(std::string(what) + ": " + status.message());
}

struct Agent {
  std::unique_ptr<MemoryStore> store;
  std::unique_ptr<Replicator> replicator;
};

Agent StartAgent(const std::string& dir, const std::string& node, uint64_t budget) {
  const LogFn quiet = [](const std::string&) {};
  Agent agent;
  agent.store = Check(MemoryStore::Open(dir, node, budget, quiet), "opening a memory store");
  agent.replicator = Check(Replicator::Start(*agent.store, {"bench-replication", node, ""}, quiet), "starting UCX");
  return agent;
}

// Writes M/<name> with a MANIFEST and `files` data files of `bytes` in all, and completes it as node `index` of 2.
void SaveCheckpoint(Agent& agent, const std::string& name, uint32_t index, uint64_t bytes, int files) {
  const std::string dir = io::JoinPath(agent.store->directory(), name);
  Check(io::MakeDirectories(dir + "/data"), "creating a checkpoint directory");
  std::ofstream(dir + "/MANIFEST") << "bench manifest";
  MemoryCheckpoint checkpoint;
  checkpoint.name = name;
  checkpoint.node_index = index;
  checkpoint.node_count = 2;
  for (int f = 0; f < files; ++f) {
    const std::string file = std::to_string(index) + "-" + std::to_string(f) + ".bin";
    const std::string data(bytes / files, static_cast<char>('a' + f));
    Check(io::WriteFileDurably(dir + "/data/" + file, data.data(), data.size()), "writing a data file");
    checkpoint.own_files.push_back(file);
  }
  Check(agent.store->Complete(1, "", checkpoint, false), "completing a checkpoint");
}

// Pushes `name` from `from` to its peer and returns the seconds until it is replicated.
double TimedPush(Agent& from, const std::string& name) {
  const Clock::time_point start = Clock::now();
  from.replicator->Replicate(name);
  while (Clock::now() - start < kLongestWait) {
    const std::optional<MemoryCheckpoint> checkpoint = from.store->Find(name);
    if (checkpoint && !checkpoint->replication_error.empty()) throw std::runtime_error(checkpoint->replication_error);
    if (checkpoint && checkpoint->replicated) return std::chrono::duration<double>(Clock::now() - start).count();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  throw std::runtime_error("the push did not finish within 120 s");
}

void Run(uint64_t size_mib) {
  setenv("UCX_TLS", "tcp,self", 0);  // across TCP, as between nodes, unless the caller chose
  SetReplicationUcxDefaults();        // as ckpt-agent runs
  char root_template[] = "/dev/shm/ckpt-bench-replication-XXXXXX";
  if (mkdtemp(root_template) == nullptr) throw std::runtime_error("mkdtemp under /dev/shm failed");
  const std::string root = root_template;
  const uint64_t bytes = size_mib << 20;
  try {
    // Each holds its newest checkpoint, the next one and the recycled files of the one before.
    Agent sender = StartAgent(root + "/a", "bench-a", 4 * bytes + (64 << 20));
    Agent receiver = StartAgent(root + "/b", "bench-b", 4 * bytes + (64 << 20));
    const std::vector<coll::agent::PeerAgent> peers = {{0, "bench-a", sender.replicator->address()},
                                                       {1, "bench-b", receiver.replicator->address()}};
    sender.replicator->SetPeers(peers, 0, 1);
    receiver.replicator->SetPeers(peers, 1, 1);
    SaveCheckpoint(receiver, "warmup", 1, 0, 0);
    SaveCheckpoint(sender, "warmup", 0, 1 << 20, kFiles);
    TimedPush(sender, "warmup");
    double steady_seconds = 0;
    for (int step = 1; step <= kSteps; ++step) {
      const std::string name = "step-" + std::to_string(step);
      SaveCheckpoint(receiver, name, 1, 0, 0);
      SaveCheckpoint(sender, name, 0, bytes, kFiles);
      const double seconds = TimedPush(sender, name);
      if (step == 1) {
        std::printf("replication_fresh_gbps %.3f\n", bytes / seconds / 1e9);
      } else {
        steady_seconds += seconds;
      }
    }
    std::printf("replication_gbps %.3f\n", (kSteps - 1) * bytes / steady_seconds / 1e9);
  } catch (...) {
    (void)io::RemoveTree(root);
    throw;
  }
  (void)io::RemoveTree(root);
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t size_mib = 1024;
  if (argc < 2 || std::strcmp(argv[1], "replication") != 0) {
    std::fprintf(stderr, "usage: ckpt_bench_replication replication [--size-mib N]\n");
    return 2;
  }
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--size-mib") != 0) {
      std::fprintf(stderr, "ckpt_bench_replication: unknown option %s\n", argv[i]);
      return 2;
    }
    size_mib = std::strtoull(argv[i + 1], nullptr, 10);
  }
  try {
    Run(size_mib);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ckpt_bench_replication: %s\n", error.what());
    return 1;
  }
  return 0;
}

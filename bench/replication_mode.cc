// ckpt_bench_replication replication --size-mib N: the memory tier's replication between two node agents
// (agent/replicator.h), each in a process of its own as on two nodes, over UCX's TCP transport on loopback,
// so that bench/run can print it beside ucx_perftest's tag_bw with UCX_TLS=tcp between two processes. It links the
// agent's internals, not the public API.
//
// Checkpoints of N MiB in four data files are pushed from one agent's memory directory (under /dev/shm) to the
// other's, one per step as a job saving to memory every step does; each push's time runs from its start to the
// sender marking it replicated (every file received, renamed into place and acknowledged). A small push first sets up
// the connection. The first full push writes into fresh memory; from the second on, the receiver writes into the
// files of the replica its retention removed (MemoryStore's recycled files), and from the third on the sender's save
// writes over the files of its step before last. The second maps those files; from the third on, both agents find
// their files mapped already (each keeps the mappings of the files it sent or received into), as in a job's steady
// state. Prints `replication_fresh_gbps` (the first), `replication_first_recycled_gbps` (the
// second) and `replication_gbps` (the steps after those, their bytes over their time), in GB/s (1e9).
//
// The receiving agent runs in a child process that the sender's drives over a socket pair: it answers with its
// replication address, then completes each step's (empty) checkpoint directory when asked, before the push of it.
// Apart, the two agents share no address space, as on two nodes: neither's mapping of a 1 GiB file waits on the
// other's.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "agent/memory_store.h"
#include "agent/replicator.h"
#include "io/file_io.h"
#include "runtime/format/save_directory.h"

namespace {

using namespace ckpt;
using namespace ckpt::agent;
using Clock = std::chrono::steady_clock;

constexpr int kFiles = 4;
constexpr SessionId kSession = 1;  // the saving rank's connection, to the store
constexpr int kSteps = 6;          // the first into fresh memory, the others into recycled files
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

// Saves M/<name> with a MANIFEST and `files` data files of `bytes` in all as a memory-tier save does, and completes it
// as node `index` of 2: its bytes are reserved for a temporary directory, where the store places recycled files (the
// data files of the checkpoint its retention removed) for the data files to be written over; the temporary is then
// renamed into place.
void SaveCheckpoint(Agent& agent, const std::string& name, uint32_t index, uint64_t bytes, int files) {
  const std::string temporary = name + std::string(runtime::kTemporaryInfix) + "bench";
  const std::string temporary_dir = io::JoinPath(agent.store->directory(), temporary);
  Check(io::MakeDirectories(temporary_dir + "/data"), "creating a checkpoint directory");
  MemoryCheckpoint checkpoint;
  checkpoint.name = name;
  checkpoint.node_index = index;
  checkpoint.node_count = 2;
  std::vector<PlannedFile> planned;
  for (int f = 0; f < files; ++f) {
    checkpoint.own_files.push_back(std::to_string(index) + "-" + std::to_string(f) + ".bin");
    planned.push_back(PlannedFile{checkpoint.own_files.back(), bytes / files});
  }
  Check(agent.store->Reserve(kSession, temporary, bytes, planned), "reserving memory for a save");
  for (const PlannedFile& file : planned) {
    const std::string data(file.size, static_cast<char>('a' + (&file - planned.data())));
    const std::string path = temporary_dir + "/data/" + file.name;
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);  // over a placed file's pages, if any
    if (fd < 0) throw std::runtime_error("cannot open " + path);
    const bool written = pwrite(fd, data.data(), data.size(), 0) == static_cast<ssize_t>(data.size()) &&
                         ftruncate(fd, static_cast<off_t>(data.size())) == 0;
    close(fd);
    if (!written) throw std::runtime_error("cannot write " + path);
  }
  std::ofstream(temporary_dir + "/MANIFEST") << "bench manifest";
  const std::string dir = io::JoinPath(agent.store->directory(), name);
  if (rename(temporary_dir.c_str(), dir.c_str()) != 0) throw std::runtime_error("cannot rename " + temporary_dir);
  Check(agent.store->Complete(kSession, temporary, checkpoint, false), "completing a checkpoint");
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

// The sender's end of the socket pair to the receiving agent's process: lines, one per request and answer.
class ReceiverProcess {
 public:
  ReceiverProcess(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
  ~ReceiverProcess() {
    if (fd_ >= 0) close(fd_);  // the child exits on end of input
    if (pid_ > 0) (void)waitpid(pid_, nullptr, 0);
  }
  ReceiverProcess(const ReceiverProcess&) = delete;
  ReceiverProcess& operator=(const ReceiverProcess&) = delete;

  // Sends `request` and returns the answer's line; the child's failure (a line "error: ...") is thrown.
  std::string Ask(const std::string& request) {
    SendLine(fd_, request);
    std::string answer = ReadLine(fd_);
    if (answer.rfind("error: ", 0) == 0) throw std::runtime_error("the receiving agent: " + answer.substr(7));
    return answer;
  }

  static void SendLine(int fd, const std::string& line) {
    const std::string framed = line + "\n";
    if (write(fd, framed.data(), framed.size()) != static_cast<ssize_t>(framed.size())) {
      throw std::runtime_error("cannot write to the other agent's process");
    }
  }
  // Lines hold a UCX worker address: bytes, hex-encoded by the caller, never a newline.
  static std::string ReadLine(int fd) {
    std::string line;
    char c;
    while (true) {
      const ssize_t got = read(fd, &c, 1);
      if (got != 1) throw std::runtime_error("the other agent's process closed its end");
      if (c == '\n') return line;
      line.push_back(c);
    }
  }

 private:
  pid_t pid_;
  int fd_;
};

std::string Hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : bytes) {
    hex.push_back(kDigits[c >> 4]);
    hex.push_back(kDigits[c & 15]);
  }
  return hex;
}

std::string Unhex(const std::string& hex) {
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return bytes;
}

std::vector<coll::agent::PeerAgent> Peers(const std::string& sender, const std::string& receiver) {
  return {{0, "bench-a", sender}, {1, "bench-b", receiver}};
}

// The receiving agent's process: it sends its address, learns the sender's, then completes the empty checkpoint
// named by each "save NAME" line, answering "ok" (or "error: ..."), until its input ends.
int RunReceiver(const std::string& dir, uint64_t budget, int fd) {
  try {
    Agent receiver = StartAgent(dir, "bench-b", budget);
    ReceiverProcess::SendLine(fd, Hex(receiver.replicator->address()));
    const std::string sender = Unhex(ReceiverProcess::ReadLine(fd));
    receiver.replicator->SetPeers(Peers(sender, receiver.replicator->address()), 1, 1);
    while (true) {
      std::string request;
      try {
        request = ReceiverProcess::ReadLine(fd);
      } catch (const std::runtime_error&) {
        return 0;  // the sender is done
      }
      try {
        SaveCheckpoint(receiver, request.substr(std::strlen("save ")), 1, 0, 0);
        ReceiverProcess::SendLine(fd, "ok");
      } catch (const std::exception& error) {
        ReceiverProcess::SendLine(fd, std::string("error: ") + error.what());
      }
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ckpt_bench_replication (receiving agent): %s\n", error.what());
    return 1;
  }
}

void Run(uint64_t size_mib) {
  setenv("UCX_TLS", "tcp,self", 0);  // across TCP, as between nodes, unless the caller chose
  SetReplicationUcxDefaults();       // as ckpt-agent runs
  char root_template[] = "/dev/shm/ckpt-bench-replication-XXXXXX";
  if (mkdtemp(root_template) == nullptr) throw std::runtime_error("mkdtemp under /dev/shm failed");
  const std::string root = root_template;
  const uint64_t bytes = size_mib << 20;
  // Each holds its newest checkpoint, the next one and the recycled files of the one before.
  const uint64_t budget = 4 * bytes + (64 << 20);
  try {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) throw std::runtime_error("socketpair failed");
    // Forked before any thread starts: the child runs the receiving agent and nothing of this process's.
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      close(fds[0]);
      _exit(RunReceiver(root + "/b", budget, fds[1]));
    }
    close(fds[1]);
    ReceiverProcess child(pid, fds[0]);
    Agent sender = StartAgent(root + "/a", "bench-a", budget);
    const std::string receiver_address = Unhex(ReceiverProcess::ReadLine(fds[0]));
    ReceiverProcess::SendLine(fds[0], Hex(sender.replicator->address()));
    sender.replicator->SetPeers(Peers(sender.replicator->address(), receiver_address), 0, 1);
    child.Ask("save warmup");
    SaveCheckpoint(sender, "warmup", 0, 1 << 20, kFiles);
    TimedPush(sender, "warmup");
    double steady_seconds = 0;
    for (int step = 1; step <= kSteps; ++step) {
      const std::string name = "step-" + std::to_string(step);
      child.Ask("save " + name);
      SaveCheckpoint(sender, name, 0, bytes, kFiles);
      const double seconds = TimedPush(sender, name);
      if (step == 1) {
        std::printf("replication_fresh_gbps %.3f\n", bytes / seconds / 1e9);
      } else if (step == 2) {
        std::printf("replication_first_recycled_gbps %.3f\n", bytes / seconds / 1e9);
      } else {
        steady_seconds += seconds;
      }
    }
    std::printf("replication_gbps %.3f\n", (kSteps - 2) * bytes / steady_seconds / 1e9);
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

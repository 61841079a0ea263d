// The fixture of the replication tests (test_agent_replication*.cc): two or more agents' stores and replicators in
// one process, each with a memory directory of its own, talking over UCX's TCP transport as agents on two nodes
// would; and the helpers those tests share.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/memory_store.h"
#include "agent/replicator.h"
#include "collectives/agent/agent_protocol.h"
#include "io/file_io.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::agent::replication_testing {

using namespace std::chrono_literals;
using coll::agent::PeerAgent;

inline constexpr char kJob[] = "job-replication";
inline constexpr char kName[] = "step-7";

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

// Bytes that differ at every offset of a chunk, so that a misplaced chunk shows.
inline std::string Pattern(size_t bytes, unsigned seed) {
  std::string data(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<char>((i * 131 + seed * 7 + i / 4099) & 0xff);
  return data;
}

// One node: its memory directory, store and replicator.
struct Node {
  std::string name;
  std::string dir;
  std::unique_ptr<MemoryStore> store;
  std::unique_ptr<Replicator> replicator;
  std::mutex log_mu;
  std::vector<std::string> log;
};

class AgentReplicationTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    const char* tls = getenv("UCX_TLS");
    saved_tls_ = tls != nullptr ? tls : "";
    had_tls_ = tls != nullptr;
    // Across TCP, as between nodes, even though both agents share this process.
    setenv("UCX_TLS", "tcp,self", 1);
  }
  void TearDown() override {
    for (auto& node : nodes_) node->replicator.reset();
    for (const std::string& dir : mounts_) umount2(dir.c_str(), MNT_DETACH);
    if (had_tls_) {
      setenv("UCX_TLS", saved_tls_.c_str(), 1);
    } else {
      unsetenv("UCX_TLS");
    }
  }

  // Makes node `name`'s memory directory a tmpfs of `options` ("size=4m"): its memory fills up before its budget.
  // Needs root.
  void MountSmallMemory(const std::string& name, const char* options) {
    const std::string memory = Path(name);
    ASSERT_EQ(mkdir(memory.c_str(), 0700), 0) << std::strerror(errno);
    ASSERT_EQ(mount("ckpt-test-full", memory.c_str(), "tmpfs", 0, options), 0) << std::strerror(errno);
    mounts_.push_back(memory);
  }

  Node& AddNode(const std::string& name, uint64_t budget = 1ull << 30, std::string job = kJob, std::string secret = "",
                std::chrono::milliseconds timeout = 20s) {
    auto node = std::make_unique<Node>();
    node->name = name;
    node->dir = Path(name);
    Node* raw = node.get();
    LogFn log = [raw](const std::string& line) {
      std::lock_guard<std::mutex> lock(raw->log_mu);
      raw->log.push_back(line);
    };
    Result<std::unique_ptr<MemoryStore>> store = MemoryStore::Open(node->dir, name, budget, log);
    EXPECT_TRUE(store.ok()) << store.status().message();
    node->store = std::move(*store);
    ReplicatorOptions options{job, name, secret, timeout};
    options.chunk_bytes = 1 << 20;  // several chunks per large file, a window's worth in flight
    options.window = 4;
    Result<std::unique_ptr<Replicator>> replicator = Replicator::Start(*node->store, options, log);
    if (!replicator.ok()) {
      ADD_FAILURE() << "UCX must run here: " << replicator.status().message();
    } else {
      node->replicator = std::move(*replicator);
    }
    nodes_.push_back(std::move(node));
    return *raw;
  }

  // Every node knows every other; each node's files go to the next node.
  void Connect() {
    std::vector<PeerAgent> peers;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      peers.push_back(PeerAgent{static_cast<uint32_t>(i), nodes_[i]->name, nodes_[i]->replicator->address()});
    }
    for (size_t i = 0; i < nodes_.size(); ++i) nodes_[i]->replicator->SetPeers(peers, static_cast<uint32_t>(i), 1);
  }

  // A committed checkpoint directory on `node`: a MANIFEST and `files`.
  static void WriteCheckpoint(Node& node, const std::map<std::string, std::string>& files,
                              const std::string& manifest = "manifest of step 7", const std::string& name = kName) {
    const std::string dir = node.dir + "/" + name;
    ASSERT_TRUE(io::MakeDirectories(dir + "/data").ok());
    std::ofstream(dir + "/MANIFEST", std::ios::binary) << manifest;
    for (const auto& [name, content] : files) std::ofstream(dir + "/data/" + name, std::ios::binary) << content;
  }

  static MemoryCheckpoint Checkpoint(uint32_t node_index, std::vector<std::string> own_files,
                                     const std::string& name = kName) {
    MemoryCheckpoint c;
    c.name = name;
    c.storage_path = "/storage/step-7";
    c.save_id = "00000000000005a1";
    c.node_index = node_index;
    c.node_count = 2;
    c.own_files = std::move(own_files);
    return c;
  }

  static void Complete(Node& node, const MemoryCheckpoint& checkpoint) {
    Result<std::optional<MemoryCheckpoint>> completed = node.store->Complete(1, "", checkpoint, false);
    ASSERT_TRUE(completed.ok()) << completed.status().message();
  }

  // `from` completes the checkpoint with one file "0-0.bin" of `bytes` and pushes it to `to`, which has the
  // checkpoint's directory and nothing in it.
  static void PushOneFile(Node& from, Node& to, size_t bytes, unsigned seed) {
    WriteCheckpoint(from, {{"0-0.bin", Pattern(bytes, seed)}});
    WriteCheckpoint(to, {});
    Complete(from, Checkpoint(0, {"0-0.bin"}));
    from.replicator->Replicate(kName);
  }

  // The checkpoint's replication outcome once it has one: "" when replicated, else the error.
  static std::string ReplicationOutcome(Node& node, std::chrono::milliseconds within = 20s,
                                        const std::string& name = kName) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < deadline) {
      std::optional<MemoryCheckpoint> c = node.store->Find(name);
      if (c.has_value() && (c->replicated || !c->replication_error.empty())) return c->replication_error;
      std::this_thread::sleep_for(5ms);
    }
    return "(no outcome within the wait)";
  }

  static Status FetchUntilDone(Node& node, const MemoryCheckpoint& checkpoint,
                               const std::vector<std::string>& files = {}) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    Status status = node.replicator->Fetch(checkpoint, files);
    while (status.code() == Code::kInProgress && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(5ms);
      status = node.replicator->Fetch(checkpoint, files);
    }
    return status;
  }

  std::vector<std::string> mounts_;  // tmpfs mounted in the test's directory, unmounted when the test ends
  std::string saved_tls_;
  bool had_tls_ = false;
  std::vector<std::unique_ptr<Node>> nodes_;
};

// Whether `holds` came true within `within`, asked every `every`.
inline bool Eventually(const std::function<bool()>& holds, std::chrono::milliseconds within,
                       std::chrono::microseconds every = 5ms) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (!holds()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(every);
  }
  return true;
}

}  // namespace ckpt::agent::replication_testing

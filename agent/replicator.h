// Replication of memory checkpoints between the agents of a job's nodes, over UCX.
//
// After a multi-node save, each node's agent pushes its own files (and the MANIFEST) to the `replicas` nodes after
// it in the ring; a node that lacks a checkpoint's files (a replaced node) fetches them from the peers that hold
// them. The messages are in replication_wire.h; the file bytes travel in chunks, several in flight, sent from a
// mapping of the source and received straight into a mapping of the destination where it is a recycled file whose
// pages all exist, else into buffers that a writer thread writes into the destination file.
//
// One thread owns the UCX worker: it progresses it, sleeping on the worker's event fd and an eventfd that the
// agent's calls wake it with, so the agent's socket loop never waits on the network. Nothing waits forever: an
// operation that makes no progress for `idle_timeout` fails, and a peer UCX reports unreachable fails every
// operation with it at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agent/memory_store.h"
#include "collectives/agent/agent_protocol.h"
#include "common/status.h"

namespace ckpt::agent {

using coll::agent::PeerAgent;

struct ReplicatorOptions {
  std::string job_id;
  std::string node;    // this node's name, in messages
  std::string secret;  // the job's; empty when it has none
  // An operation (a push to a peer, a receive from one, a fetch) that makes no progress this long fails.
  std::chrono::milliseconds idle_timeout{60000};
  uint64_t chunk_bytes = 4 << 20;
  // Chunks in flight per push; a receiver keeps twice as many receives posted.
  int window = 8;
};

// Sets the UCX settings replication runs best with in this process's environment, where it holds none of its own:
// UCX_TCP_RX_SEG_SIZE=1M and UCX_TCP_TX_SEG_SIZE=1M. With peer error handling, which replication's endpoints need,
// UCX 1.13 sends a large message over TCP as active messages, in fragments of the send segment's size (8 KiB by
// default), and receives them in segments of the receive size (64 KiB by default), a send or a recv and a copy each;
// 1 MiB receive segments replicated 1 GiB about 10 % faster on this project's machines, and 1 MiB send segments about
// 4 % faster again. ucp_config_modify does not take these settings. Call it before any thread starts (ckpt-agent's
// main does).
void SetReplicationUcxDefaults();

class Replicator {
 public:
  // Opens UCX (its configuration comes from the UCX_* environment variables) and starts the thread.
  // kUnsupported when UCX cannot run here.
  static Result<std::unique_ptr<Replicator>> Start(MemoryStore& store, ReplicatorOptions options, LogFn log);
  ~Replicator();
  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  // This agent's UCX worker address, which peers replicate to (coll::agent::Welcome::replication_address).
  const std::string& address() const;

  // kPeers: every node's agent, this node's index among them, and how many other nodes keep a copy of each node's
  // files (capped at the node count less one). Replaces what an earlier call said.
  void SetPeers(std::vector<PeerAgent> peers, uint32_t node_index, uint32_t replicas);

  // After a kComplete of `name`, which the store keeps: pushes its own files and MANIFEST to the replica nodes in
  // the background and marks it replicated (or why not) in the store. A single-node save, or a job without replicas
  // or peers, is replicated at once. A checkpoint pushed already is not pushed again.
  void Replicate(const std::string& name);

  // kFetch: pulls into M/<checkpoint.name> the files among `files` (data file names; empty: every file) that it
  // lacks, and the MANIFEST, from the peers' copies, in the background. kInProgress while that runs, kOk once done
  // (the store keeps the checkpoint), or the failure, after which the next call starts afresh. One fetch of a
  // checkpoint runs at a time: a call for other files is kInProgress until the running one ends.
  Status Fetch(const MemoryCheckpoint& checkpoint, const std::vector<std::string>& files);

  class Engine;  // the thread's state (replicator.cc)

 private:
  explicit Replicator(std::unique_ptr<Engine> engine);
  std::unique_ptr<Engine> engine_;
};

}  // namespace ckpt::agent

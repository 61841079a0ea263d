// The conversation between a rank and its node's ckpt-agent, and the names both sides derive from the job's identity.
//
// The agent listens on a unix socket (SOCK_SEQPACKET: one message per send) in a directory only its user can enter
// (collectives/agent/agent_socket.h), named after the job and the node, so that every node (every network namespace, in
// the multi-host tests, which share one file system) has an agent of its own. Neither side trusts the other before
// it has proven itself: each checks the other's credentials (SO_PEERCRED: the same user), and where the job has a
// secret (CKPT_AGENT_SECRET, the same for every run) each proves it to the other.
//
// A connection: the agent sends a Challenge; the rank answers with a Hello (proving the secret over the agent's
// nonce); the agent replies (on success a Welcome, proving the secret over the rank's nonce and the Welcome's
// fields). The rank checks the memory directory the Welcome names before it writes anything there. Then each
// request gets one Reply, in order. A connection that closes without Detach is a trainer that died.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ckpt::coll::agent {

inline constexpr uint32_t kProtocolVersion = 6;
// No message is larger: a List of every memory checkpoint the agent holds stays far below it.
inline constexpr size_t kMaxMessageBytes = 1 << 20;

// The job's identity as ranks and agents know it: CKPT_JOB_ID, else SLURM_JOB_ID, else TORCHELASTIC_RUN_ID.
// kInvalidArgument, saying what to set, when none is set: two jobs of one user on one node must never share an
// agent.
Result<std::string> JobIdFromEnvironment();
// Job ids travel in names: printable ASCII without '/' and at most 128 bytes. kInvalidArgument otherwise.
Status ValidateJobId(std::string_view job_id);

// The file name of the socket of the agent of `job_id` on node `node_name`, inside its user's socket directory:
// "agent-<digest of job and node>.sock".
std::string SocketName(std::string_view job_id, std::string_view node_name);
// The directory the agent of (`uid`, `job_id`) on node `node_name` owns under `shm_root` (normally /dev/shm):
// "<shm_root>/ckpt-<uid>-<digest of job and node>". The node is part of the name because namespaces that stand
// for nodes in tests share one /dev/shm.
std::string MemoryDirectory(std::string_view shm_root, uint32_t uid, std::string_view job_id,
                            std::string_view node_name);

enum class Op : uint8_t {
  kReserve = 1,   // a save is about to write `bytes` into memory checkpoint `name` (a temporary directory)
  kRelease = 2,   // that save failed: forget its reservation
  kComplete = 3,  // memory checkpoint `name` is committed in the memory directory
  kList = 4,      // the complete memory checkpoints
  kPersist = 5,   // write memory checkpoint `name` to its storage path now
  kDetach = 6,    // this rank leaves cleanly (its context is freed): not a death
  kPeers = 7,     // the job's agents on every node: where to replicate to and fetch from
  kFetch = 8,     // pull the files of memory checkpoint `checkpoint.name` this node lacks from peers (`files`, or all)
  kReassign = 9,  // a job restored `checkpoint.name`: this node persists `checkpoint.own_files` as its node_index
};

struct Challenge {
  uint32_t version = kProtocolVersion;
  std::string nonce;  // store_auth::kNonceBytes
};

struct Hello {
  uint32_t version = kProtocolVersion;
  std::string job_id;
  int32_t rank = -1;
  uint32_t pid = 0;
  std::string nonce;  // the rank's own
  std::string proof;  // store_auth::HelloProof over HelloProofFields; empty when the job has no secret
};
// What a Hello's proof covers besides the nonces.
std::string HelloProofFields(const Hello& hello);

// The agent's answer to the Hello.
struct Welcome {
  std::string memory_dir;
  uint64_t budget_bytes = 0;
  // The agent's UCX worker address, which peer agents connect to; empty when UCX cannot run here (the agent then
  // neither replicates nor fetches).
  std::string replication_address;
  std::string proof;  // WelcomeProof; empty when the job has no secret
};
// The agent's proof of the job's `secret`, answering the rank's `hello_nonce` on the connection it challenged with
// `challenge_nonce`, over the Welcome's fields (not its proof), so that nobody who relays a real agent's answer can
// swap the memory directory in it.
std::string WelcomeProof(std::string_view secret, std::string_view challenge_nonce, std::string_view hello_nonce,
                         const Welcome& welcome);

// One memory checkpoint the agent holds.
struct MemoryCheckpoint {
  std::string name;          // directory name inside the memory directory
  std::string storage_path;  // the checkpoint it stands for on storage
  std::string manager_root;  // non-empty: a manager step, published there once persisted
  uint64_t step = 0;         // with manager_root
  uint64_t bytes = 0;
  bool persisted = false;     // committed at storage_path (by the agent, or found there)
  std::string persist_error;  // the last failed attempt's message; empty if none
  // The save that wrote it, and the node's place in that save (0 is rank 0's node, which commits a persist):
  // every node's agent names the same temporary directory on storage after the save id.
  std::string save_id;
  uint32_t node_index = 0;
  uint32_t node_count = 1;
  // The agent's: the data files this node's ranks wrote (names inside the checkpoint's data/ directory), which this
  // node persists and replicates; the other files it holds are replicas or fetched copies.
  std::vector<std::string> own_files;
  bool replicated = false;        // every replica of own_files is in place on its peer (true when none is asked)
  std::string replication_error;  // the last failed replication's message; empty if none
};

// One node's agent, as the ranks tell every agent of the job (kPeers).
struct PeerAgent {
  uint32_t node_index = 0;
  std::string node;
  std::string address;  // Welcome::replication_address
};

struct Request {
  Op op = Op::kList;
  std::string name;         // kReserve, kRelease: the temporary directory; kComplete, kPersist: the committed one
  uint64_t bytes = 0;       // kReserve
  std::string reservation;  // kComplete: the temporary name its bytes were reserved under
  // kComplete: name, storage_path, manager_root, step (bytes and state are the agent's). kReassign: name, and the
  // restoring job's layout: node_index, node_count, own_files, save_id.
  MemoryCheckpoint checkpoint;
  bool persist = false;          // kComplete: also write it to storage, in the background
  std::vector<PeerAgent> peers;  // kPeers: every node's agent, this one's included
  uint32_t node_index = 0;       // kPeers: this agent's node
  uint32_t replicas = 0;         // kPeers: how many other nodes hold a copy of each node's files
  // kFetch: the files wanted (names inside the checkpoint's data/ directory; the MANIFEST always comes), where the
  // node is to hold only part of the checkpoint; empty: every file, so that the node holds it whole. kReserve: the
  // data files the save will write (names inside the temporary's data/ directory), of file_sizes bytes, which the
  // agent may fill with recycled files for the save's workers to write over.
  std::vector<std::string> files;
  std::vector<uint64_t> file_sizes;  // kReserve
};

struct Reply {
  Code code = Code::kOk;
  std::string message;
  std::string payload;  // kList: EncodeCheckpoints; the Hello's reply: EncodeWelcome
};
// kFetch is answered at once: kInProgress while the pull runs (ask again), kOk once the checkpoint is whole here,
// or the pull's failure (asked again, it starts afresh).

std::string EncodeChallenge(const Challenge& c);
Result<Challenge> DecodeChallenge(std::string_view bytes);
std::string EncodeHello(const Hello& h);
Result<Hello> DecodeHello(std::string_view bytes);
std::string EncodeWelcome(const Welcome& w);
Result<Welcome> DecodeWelcome(std::string_view bytes);
std::string EncodeRequest(const Request& r);
Result<Request> DecodeRequest(std::string_view bytes);
std::string EncodeReply(const Reply& r);
Result<Reply> DecodeReply(std::string_view bytes);
std::string EncodeCheckpoints(const std::vector<MemoryCheckpoint>& list);
Result<std::vector<MemoryCheckpoint>> DecodeCheckpoints(std::string_view bytes);

// A Reply's outcome as a Status (kOk, or its code and message).
Status ReplyStatus(const Reply& reply);

}  // namespace ckpt::coll::agent

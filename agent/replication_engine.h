// The replicator's thread and everything it owns (replicator.h): the UCX worker, the endpoints to peers, and the
// pushes, receives and fetches in progress. Only the thread touches these; the agent reaches it through Post and
// FetchOutcome, which lock.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "agent/replication_files.h"
#include "agent/replication_wire.h"
#include "agent/replicator.h"
#include "collectives/transport/ucx_library.h"
#include "collectives/transport/ucx_worker.h"
#include "common/unique_fd.h"

namespace ckpt::agent {

// The tag of chunk `chunk` of transfer `transfer`: chunks match only the receive posted for them.
inline ucp_tag_t DataTag(uint32_t transfer, uint64_t chunk) {
  return (ucp_tag_t{0xDA} << 56) | (ucp_tag_t{transfer} << 24) | chunk;
}
// Chunk indexes have 24 bits.
inline constexpr uint64_t kMaxChunks = uint64_t{1} << 24;
// Kept mappings (Engine::KeptMapping) beyond this many are unmapped, oldest first: a step's replicas are a file per
// rank of a peer node, or a few times that.
inline constexpr size_t kMaxKeptMappings = 256;

class Replicator::Engine {
 public:
  Engine(MemoryStore& store, ReplicatorOptions options, LogFn log, const coll::UcxApi& ucx);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Opens UCX (collectives/transport/ucx_worker.h) and starts the thread.
  Status Open();
  const std::string& address() const { return address_; }
  // Runs `command` on the thread, soon.
  void Post(std::function<void()> command);
  // What Replicator::Fetch answers.
  Status FetchOutcome(const MemoryCheckpoint& checkpoint, const std::vector<std::string>& files);
  // A fetch's outcome stands for its checkpoint and the files it was asked for.
  static std::string FetchKey(const std::string& name, std::vector<std::string> files);

  // Called on the thread by Post's commands.
  void SetPeers(std::vector<PeerAgent> peers, uint32_t node_index, uint32_t replicas);
  void StartReplica(const std::string& name);
  void StartFetch(const MemoryCheckpoint& checkpoint, const std::vector<std::string>& files);

  using Clock = std::chrono::steady_clock;
  enum class OpKind : uint8_t { kControlSend, kControlReceive, kChunkSend, kChunkReceive };
  // One UCX request. Owned by ops_ until its completion is handled; UCX's callbacks get it as their user data.
  // A receive buffer, kept for the next chunk: its pages are faulted in once, not for every chunk.
  struct Buffer {
    std::unique_ptr<char[]> data;
    uint64_t capacity = 0;
  };
  struct Op {
    Engine* engine = nullptr;
    OpKind kind = OpKind::kControlSend;
    uint64_t owner = 0;     // the push or the incoming transfer, for chunks
    uint64_t chunk = 0;     // which, for chunks
    std::string address;    // the peer, for control sends
    std::string buffer;     // a control message
    uint64_t expected = 0;  // bytes a receive must get
    void* request = nullptr;
    bool done = false;
    ucs_status_t status = UCS_OK;
    uint64_t received = 0;
    Buffer bounce;  // a chunk receive's buffer, written to its file once the chunk is in; none if received into it
  };
  struct Endpoint {
    Engine* engine = nullptr;
    ucp_ep_h ep = nullptr;
    ucs_status_t error = UCS_OK;  // reported by UCX, not yet handled
  };
  // A piece of one file: what a chunk tag numbers.
  struct Chunk {
    size_t file = 0;
    uint64_t offset = 0;
    uint64_t length = 0;
  };
  // Files this agent sends to one peer: a replica of its own files, or what a fetching peer asked for.
  struct Push {
    uint64_t id = 0;
    std::string address;
    std::string checkpoint;
    bool for_fetch = false;
    uint64_t fetch_id = 0;  // the peer's fetch, with for_fetch
    std::vector<FileInfo> files;
    std::vector<io::FileMapping> sources;  // by files' index
    std::vector<UniqueFd> source_files;    // the files mapped, open
    bool accepted = false;
    uint32_t transfer = 0;
    std::vector<Chunk> chunks;
    size_t next = 0;
    int in_flight = 0;
    bool finished = false;  // it is dropped once no chunk is in flight any more
    std::string failure;    // why it failed, once finished
    Clock::time_point last_progress;
  };
  // Files a peer sends to this agent.
  struct Incoming {
    uint32_t id = 0;
    std::string address;
    uint64_t offer_id = 0;
    std::string checkpoint;
    std::string dir;
    uint64_t fetch_id = 0;  // the fetch it answers; 0 for a replica
    std::vector<FileInfo> files;
    std::vector<UniqueFd> parts;  // the hidden files being filled
    // By file: the mapping its chunks are received into (MapIfAllocated); empty where they go through a buffer and
    // the writer.
    std::vector<io::FileMapping> targets;
    std::vector<Chunk> chunks;
    size_t next = 0;
    size_t received = 0;
    int in_flight = 0;
    std::map<uint64_t, Op*> posted;  // chunk -> its receive, for cancelling
    std::string failure;
    Clock::time_point last_progress;
  };
  struct Fetch {
    uint64_t id = 0;
    MemoryCheckpoint checkpoint;
    std::string dir;  // where the files arrive: M/<name>, or a temporary renamed into place
    bool temporary = false;
    std::set<std::string> wanted;       // the files to pull (with the MANIFEST); empty: every file the node lacks
    std::string outcome_key;            // FetchKey
    std::vector<std::string> awaiting;  // peers not yet answering kInventoryAsk
    std::vector<std::pair<std::string, std::vector<FileInfo>>> holdings;  // by peer, in ring order
    std::set<std::string> missing;
    std::set<std::string> holders;    // peers asked to push
    std::vector<uint32_t> transfers;  // placed, their reservations held until the checkpoint is registered
    std::string notes;                // peers that could not answer
    Clock::time_point last_progress;
  };
  struct ReplicaJob {
    int pending = 0;
    std::string errors;
  };

  // UCX's callbacks: `op` completed; `request`, when not null, is released.
  void Completed(Op* op, void* request, ucs_status_t status, uint64_t received);

 private:
  void Run() noexcept;
  bool RunCommands();
  bool ReceiveControlMessages();
  bool HandleCompletions();
  void HandleEndpointErrors();
  void CheckTimeouts();
  void Teardown();

  ucp_worker_h worker() const { return worker_->get(); }
  Op* NewOp(OpKind kind, uint64_t owner);
  void Track(Op* op, ucs_status_ptr_t posted);
  Result<ucp_ep_h> EndpointTo(const std::string& address);
  void CloseEndpoint(Endpoint& endpoint);
  void SendControl(const std::string& address, ReplicationMessage message);
  ReplicationMessage Reply(MessageType type, const ReplicationMessage& to) const;
  void Dispatch(const ReplicationMessage& message);
  void FailAddress(const std::string& address, const std::string& reason);
  std::string PeerName(const std::string& address) const;
  std::string CheckpointDir(const std::string& name) const;

  // The chunks of `files` in order, each of `chunk_bytes` but a file's last.
  static std::vector<Chunk> PlanChunks(const std::vector<FileInfo>& files, uint64_t chunk_bytes);

  // Sending (replication_push.cc).
  void StartPush(const std::string& address, const std::string& checkpoint, const std::vector<std::string>& files,
                 bool for_fetch, uint64_t fetch_id);
  void OnAccept(const ReplicationMessage& message);
  void PumpPush(Push& push);
  void OnChunkSent(Op& op);
  void FinishPush(uint64_t id, const std::string& error);
  void DropPush(std::map<uint64_t, Push>::iterator it);
  void ReportPush(const Push& push);

  // Receiving (replication_receive.cc).
  void OnOffer(const ReplicationMessage& message);
  Status AcceptOffer(const ReplicationMessage& message, Incoming& incoming);
  void PumpIncoming(Incoming& incoming);
  void OnChunkReceived(Op& op);
  void PlaceFiles(uint32_t id);
  void FailIncoming(uint32_t id, const std::string& error);
  void DropIncoming(Incoming& incoming);

  // Fetching (replication_fetch.cc).
  void OnInventoryAsk(const ReplicationMessage& message);
  void OnInventory(const ReplicationMessage& message);
  void PlanFetch(Fetch& fetch);
  Fetch* FetchOf(const std::string& checkpoint);
  void FilesPlaced(uint64_t fetch_id, const std::vector<FileInfo>& files, uint32_t transfer);
  void CompleteFetch(uint64_t id);
  void FailFetch(uint64_t id, const std::string& error);
  void EndFetch(Fetch& fetch, Status outcome);

  MemoryStore& store_;
  const ReplicatorOptions options_;
  const LogFn log_;
  const coll::UcxApi& ucx_;
  std::unique_ptr<coll::UcxWorker> worker_;  // from Open; closed by Teardown
  int wake_fd_ = -1;
  std::string address_;
  std::thread thread_;

  std::mutex mu_;  // guards the members up to the next blank line
  std::vector<std::function<void()>> commands_;
  bool stopping_ = false;
  std::set<std::string> fetching_;                // checkpoint names
  std::map<std::string, Status> fetch_outcomes_;  // by FetchKey

  std::vector<PeerAgent> peers_;
  uint32_t node_index_ = 0;
  uint32_t replicas_ = 0;
  std::map<std::string, std::unique_ptr<Endpoint>> endpoints_;  // by worker address
  bool endpoint_errors_ = false;
  std::unordered_map<Op*, std::unique_ptr<Op>> ops_;
  std::vector<Op*> completed_;  // by UCX's callbacks, handled after progress
  std::map<uint64_t, Push> pushes_;
  Buffer TakeBuffer(uint64_t bytes);
  std::map<uint32_t, Incoming> incoming_;
  std::vector<Buffer> spare_buffers_;  // chunk receive buffers neither posted nor being written now
  std::map<uint64_t, Fetch> fetches_;
  std::map<std::string, ReplicaJob> replica_jobs_;
  uint64_t next_id_ = 1;       // Open draws the first at random
  bool tearing_down_ = false;  // messages arriving now are dropped: nothing new starts

  // A received chunk on its way into its file. Its receive stays counted in Incoming::in_flight until the write is
  // done, so that no transfer is dropped (its files closed) while a write into them is pending.
  struct ChunkWrite {
    uint32_t incoming = 0;
    uint64_t chunk = 0;
    int fd = -1;
    Buffer buffer;
    uint64_t length = 0;
    uint64_t offset = 0;
    std::string path;
    Status written;
  };
  // The mappings of the recycled files that placed replicas were received into, and of the data files pushes sent,
  // kept while the files live: when the store hands such a file back as a recycled file for a later replica, or a
  // save writes over it and it is pushed again, its pages are mapped already (mapping 1 GiB for a replica took about
  // 70 ms, which the sender waited for). A kept file that is deleted is unmapped at once (ReleaseDeletedMappings, the
  // store's hook), so that its memory does not outlive the budget's count of it.
  struct KeptMapping {
    dev_t device = 0;
    ino_t inode = 0;
    UniqueFd fd;  // the file, open: fstat tells when it is deleted, and its inode number stays its own
    io::FileMapping mapping;
  };
  // Keeps `mapping` of the file open as `fd`, in place of any kept mapping of the same file.
  void KeepMapping(UniqueFd fd, io::FileMapping mapping);
  // The kept mapping of the file open as `fd` where it covers `size` bytes, and, `for_writing`, is mapped for
  // filling and every page of those bytes exists; else an empty one.
  io::FileMapping TakeKeptMapping(int fd, uint64_t size, bool for_writing);
  // Unmaps the kept mappings of deleted files; any thread.
  void ReleaseDeletedMappings();
  // Unmaps on the writer's thread: unmapping 1 GiB takes tens of milliseconds.
  void ReleaseLater(std::vector<KeptMapping> kept);
  std::mutex kept_mu_;                     // guards kept_mappings_
  std::deque<KeptMapping> kept_mappings_;  // oldest first
  Clock::time_point next_kept_check_;      // when Run looks for deleted kept files next

  void QueueWrite(std::shared_ptr<ChunkWrite> write);
  // Runs `task` on the writer's thread, after the tasks queued before it.
  void QueueFileTask(std::function<void()> task);
  void WriterLoop();
  // Lets the writer's thread finish the tasks queued so far, then ends it (once; a no-op after). Files a queued
  // write still uses are closed only after it, so that no write lands in a descriptor number reused meanwhile.
  void StopWriter();
  void OnChunkWritten(const std::shared_ptr<ChunkWrite>& write);
  // The writes run on a thread of their own: filling fresh tmpfs pages costs as much as receiving the bytes, and the
  // engine's thread keeps receiving meanwhile. So does the unmapping of placed files.
  std::thread writer_;
  std::mutex writer_mu_;  // guards the members up to the end
  std::condition_variable writer_wake_;
  std::deque<std::function<void()>> file_tasks_;
  bool writer_stopping_ = false;
};

}  // namespace ckpt::agent

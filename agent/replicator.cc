#include "agent/replicator.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>

#include "agent/replication_engine.h"
#include "collectives/store/store_auth.h"
#include "collectives/transport/ucx_worker.h"
#include "common/fault_injection.h"
#include "common/os_error.h"
#include "io/file_io.h"

namespace ckpt::agent {
namespace {

using Engine = Replicator::Engine;
using std::chrono::milliseconds;

constexpr ucp_tag_t kFullMask = ~ucp_tag_t{0};
// Control messages all share one tag; chunks carry theirs (replication_engine's DataTag).
constexpr ucp_tag_t kControlTag = ucp_tag_t{0xC1} << 56;
// The longest sleep on the event fds: UCX's keepalive, which notices dead peers, runs only inside progress, and the
// idle timeouts are checked between sleeps.
constexpr milliseconds kIdleWait{50};
// How often the thread looks for kept mappings of deleted files (Engine::KeptMapping).
constexpr milliseconds kKeptMappingCheck{200};
// How long the thread's teardown lets cancelled and purged requests complete.
constexpr milliseconds kTeardownGrace{2000};
// Rounds of progress with nothing to do, a millisecond apart, after which a closing worker is taken as quiet.
constexpr int kTeardownIdleRounds = 20;

void OnSendDone(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<Engine::Op*>(user_data);
  op->engine->Completed(op, request, status, 0);
}

void OnReceiveDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
  auto* op = static_cast<Engine::Op*>(user_data);
  op->engine->Completed(op, request, status, status == UCS_OK ? info->length : 0);
}

void OnEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* endpoint = static_cast<Engine::Endpoint*>(arg);
  endpoint->error = status;
}

}  // namespace

void SetReplicationUcxDefaults() {
  setenv("UCX_TCP_RX_SEG_SIZE", "1M", /*overwrite=*/0);
  setenv("UCX_TCP_TX_SEG_SIZE", "1M", /*overwrite=*/0);
}

Replicator::Engine::Engine(MemoryStore& store, ReplicatorOptions options, LogFn log, const coll::UcxApi& ucx)
    : store_(store), options_(std::move(options)), log_(std::move(log)), ucx_(ucx) {}

Status Replicator::Engine::Open() {
  // Ids start at random: a reply captured from an earlier agent of the job (whose ids started where this one's do)
  // matches none of this one's pushes or fetches, and the chunks' tags, made of them, cannot be guessed.
  ASSIGN_OR_RETURN(const std::string random, coll::store_auth::RandomBytes(sizeof next_id_));
  std::memcpy(&next_id_, random.data(), sizeof next_id_);
  next_id_ = (next_id_ >> 2) | 1;  // far from wrapping to 0, which means "none" (Incoming::fetch_id)
  coll::UcxWorkerOptions ucx_options;
  ucx_options.thread_mode = UCS_THREAD_MODE_SINGLE;  // the thread alone uses it once created
  ucx_options.unavailable = "the agent cannot replicate";
  ASSIGN_OR_RETURN(worker_, coll::UcxWorker::Open(ucx_, ucx_options));
  ASSIGN_OR_RETURN(address_, worker_->Address());
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return Internal("eventfd for the replicator failed: " + OsErrorText(errno));
  store_.SetFilesDeletedHook([this] { ReleaseDeletedMappings(); });
  thread_ = std::thread([this] { Run(); });
  writer_ = std::thread([this] { WriterLoop(); });
  return Status::Ok();
}

Replicator::Engine::~Engine() {
  store_.SetFilesDeletedHook(nullptr);
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
    thread_.join();
    StopWriter();
  }
  if (wake_fd_ >= 0) close(wake_fd_);
}

void Replicator::Engine::Post(std::function<void()> command) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    commands_.push_back(std::move(command));
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

// The loop: commands from the agent, UCX's progress, control messages, completions, dead peers and timeouts; it
// sleeps only when UCX has nothing to do (worker_arm) and no command is queued.
void Replicator::Engine::Run() noexcept {
  try {
    while (RunCommands()) {
      bool busy = false;
      while (ucx_.worker_progress(worker()) != 0) busy = true;
      busy |= ReceiveControlMessages();
      busy |= HandleCompletions();
      HandleEndpointErrors();
      CheckTimeouts();
      // Files deleted other than by the store (by hand, or a fetch's temporary directory) are let go of soon too.
      if (Clock::now() >= next_kept_check_) {
        ReleaseDeletedMappings();
        next_kept_check_ = Clock::now() + kKeptMappingCheck;
      }
      if (busy || ucx_.worker_arm(worker()) == UCS_ERR_BUSY) continue;
      pollfd fds[2] = {{worker_->event_fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      poll(fds, 2, static_cast<int>(kIdleWait.count()));
      uint64_t count;
      (void)!read(wake_fd_, &count, sizeof count);
    }
  } catch (const std::exception& error) {
    log_(std::string("the replicator's thread stopped: ") + error.what());
  }
  Teardown();
}

bool Replicator::Engine::RunCommands() {
  std::vector<std::function<void()>> commands;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    commands.swap(commands_);
  }
  for (auto& command : commands) command();
  return true;
}

// Endpoints are closed by force (peers may be gone), posted receives cancelled, and UCX given a moment to let go of
// the mapped files before they are unmapped, and to finish the connection handshakes peers started: UCX 1.13 aborts
// the process when it destroys a worker whose endpoint still has a handshake reply queued. The writer's queued
// writes finish before the received files are closed and removed.
void Replicator::Engine::Teardown() {
  tearing_down_ = true;
  for (auto& [address, endpoint] : endpoints_) CloseEndpoint(*endpoint);
  for (auto& [id, incoming] : incoming_) {
    for (auto& [chunk, op] : incoming.posted) {
      if (op->request != nullptr) ucx_.request_cancel(worker(), op->request);
    }
  }
  const Clock::time_point deadline = Clock::now() + kTeardownGrace;
  int idle_rounds = 0;
  bool closing = true;
  while (Clock::now() < deadline && (!ops_.empty() || closing || idle_rounds < kTeardownIdleRounds)) {
    idle_rounds = ucx_.worker_progress(worker()) != 0 ? 0 : idle_rounds + 1;
    HandleCompletions();
    closing = worker_->FreeClosedEndpoints();
    if (idle_rounds > 0) std::this_thread::sleep_for(milliseconds(1));
  }
  worker_->Close();
  ops_.clear();
  StopWriter();
  for (auto& [id, incoming] : incoming_) DropIncoming(incoming);
  incoming_.clear();
  pushes_.clear();
}

Engine::Op* Replicator::Engine::NewOp(OpKind kind, uint64_t owner) {
  auto op = std::make_unique<Op>();
  op->engine = this;
  op->kind = kind;
  op->owner = owner;
  Op* raw = op.get();
  ops_.emplace(raw, std::move(op));
  return raw;
}

void Replicator::Engine::Completed(Op* op, void* request, ucs_status_t status, uint64_t received) {
  if (request != nullptr) ucx_.request_free(request);
  op->request = nullptr;
  op->done = true;
  op->status = status;
  op->received = received;
  completed_.push_back(op);
}

// A posting call returns a request still in flight, an immediate completion, or a request whose callback already
// ran inside the call.
void Replicator::Engine::Track(Op* op, ucs_status_ptr_t posted) {
  if (op->done) return;  // its callback ran inside the call, and freed the request
  if (UCS_PTR_IS_PTR(posted)) {
    op->request = posted;
  } else {
    Completed(op, nullptr, UCS_PTR_STATUS(posted), op->expected);
  }
}

bool Replicator::Engine::ReceiveControlMessages() {
  bool any = false;
  ucp_tag_recv_info_t info;
  while (ucp_tag_message_h message = ucx_.tag_probe_nb(worker(), kControlTag, kFullMask, 1, &info)) {
    any = true;
    Op* op = NewOp(OpKind::kControlReceive, 0);
    op->expected = info.length;
    // An oversized message is drained into one byte (UCX reports it truncated) and dropped: never allocated.
    op->buffer.resize(info.length <= kMaxReplicationMessageBytes ? info.length : 1);
    ucp_request_param_t param = {};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = OnReceiveDone;
    param.user_data = op;
    Track(op, ucx_.tag_msg_recv_nbx(worker(), op->buffer.data(), op->buffer.size(), message, &param));
  }
  return any;
}

bool Replicator::Engine::HandleCompletions() {
  if (completed_.empty()) return false;
  std::vector<Op*> completed;
  completed.swap(completed_);
  for (Op* op : completed) {
    std::unique_ptr<Op> owned = std::move(ops_[op]);
    ops_.erase(op);
    switch (op->kind) {
      case OpKind::kControlSend:
        if (op->status != UCS_OK)
          FailAddress(op->address, std::string("unreachable: ") + ucx_.status_string(op->status));
        break;
      case OpKind::kControlReceive: {
        if (tearing_down_) break;
        if (op->status != UCS_OK || op->received != op->expected) {
          log_("dropped a replication message of " + std::to_string(op->expected) +
               " bytes: " + (op->status != UCS_OK ? ucx_.status_string(op->status) : "short"));
          break;
        }
        Result<ReplicationMessage> message = DecodeReplicationMessage(op->buffer, options_.job_id, options_.secret);
        if (!message.ok()) {
          log_("dropped a replication message: " + message.status().message());
          break;
        }
        Dispatch(*message);
        break;
      }
      case OpKind::kChunkSend:
        OnChunkSent(*op);
        break;
      case OpKind::kChunkReceive:
        OnChunkReceived(*op);
        break;
    }
  }
  return true;
}

void Replicator::Engine::Dispatch(const ReplicationMessage& message) {
  switch (message.type) {
    case MessageType::kOffer:
      return OnOffer(message);
    case MessageType::kAccept:
      return OnAccept(message);
    case MessageType::kRefuse:
    case MessageType::kDone: {
      auto it = pushes_.find(message.id);
      if (it == pushes_.end() || it->second.address != message.reply_address) return;
      return FinishPush(message.id, message.error.empty() && message.type == MessageType::kDone
                                        ? ""
                                        : PeerName(message.reply_address) + ": " + message.error);
    }
    case MessageType::kInventoryAsk:
      return OnInventoryAsk(message);
    case MessageType::kInventory:
      return OnInventory(message);
    case MessageType::kPushAsk:
      if (fault::AgentDiesOnPushAsk(options_.node)) raise(SIGKILL);
      return StartPush(
          message.reply_address, message.checkpoint,
          [&] {
            std::vector<std::string> names;
            for (const FileInfo& file : message.files) names.push_back(file.name);
            return names;
          }(),
          true, message.id);
    case MessageType::kPushFailed: {
      auto it = fetches_.find(message.id);
      if (it == fetches_.end() || it->second.holders.count(message.reply_address) == 0) return;
      return FailFetch(message.id, PeerName(message.reply_address) + " cannot send its copy: " + message.error);
    }
  }
}

Result<ucp_ep_h> Replicator::Engine::EndpointTo(const std::string& address) {
  std::unique_ptr<Endpoint>& endpoint = endpoints_[address];
  if (endpoint == nullptr) {
    endpoint = std::make_unique<Endpoint>();
    endpoint->engine = this;
  }
  if (endpoint->ep != nullptr) return endpoint->ep;
  const ucs_status_t status = worker_->Connect(address, OnEndpointError, endpoint.get(), &endpoint->ep);
  if (status != UCS_OK) {
    return PeerFailed(PeerName(address) +
                      " is unreachable: creating a UCX endpoint failed: " + ucx_.status_string(status));
  }
  endpoint_errors_ = true;  // a fresh endpoint may fail during progress: look at it then
  return endpoint->ep;
}

void Replicator::Engine::CloseEndpoint(Endpoint& endpoint) {
  if (endpoint.ep == nullptr) return;
  worker_->CloseEndpoint(endpoint.ep, UCP_EP_CLOSE_FLAG_FORCE);
  endpoint.ep = nullptr;
}

// UCX reports a failed endpoint through its callback during progress: everything with that peer fails, and the next
// message to it makes a fresh endpoint.
void Replicator::Engine::HandleEndpointErrors() {
  for (auto& [address, endpoint] : endpoints_) {
    if (endpoint->error == UCS_OK) continue;
    const std::string reason = std::string("unreachable: ") + ucx_.status_string(endpoint->error);
    endpoint->error = UCS_OK;
    CloseEndpoint(*endpoint);
    FailAddress(address, reason);
  }
  worker_->FreeClosedEndpoints();
}

void Replicator::Engine::SendControl(const std::string& address, ReplicationMessage message) {
  message.job_id = options_.job_id;
  message.from_node = node_index_;
  message.reply_address = address_;
  Result<ucp_ep_h> ep = EndpointTo(address);
  if (!ep.ok()) return FailAddress(address, ep.status().message());
  Op* op = NewOp(OpKind::kControlSend, 0);
  op->address = address;
  op->buffer = EncodeReplicationMessage(std::move(message), options_.secret);
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = OnSendDone;
  param.user_data = op;
  Track(op, ucx_.tag_send_nbx(*ep, op->buffer.data(), op->buffer.size(), kControlTag, &param));
}

ReplicationMessage Replicator::Engine::Reply(MessageType type, const ReplicationMessage& to) const {
  ReplicationMessage reply;
  reply.type = type;
  reply.checkpoint = to.checkpoint;
  reply.id = to.id;
  return reply;
}

void Replicator::Engine::FailAddress(const std::string& address, const std::string& reason) {
  const std::string failure = PeerName(address) + " " + reason;
  std::vector<uint64_t> pushes, fetches;
  std::vector<uint32_t> incoming;
  for (const auto& [id, push] : pushes_) {
    if (push.address == address && !push.finished) pushes.push_back(id);
  }
  for (const auto& [id, in] : incoming_) {
    if (in.address == address && in.failure.empty()) incoming.push_back(id);
  }
  for (auto& [id, fetch] : fetches_) {
    auto asked = std::find(fetch.awaiting.begin(), fetch.awaiting.end(), address);
    if (asked != fetch.awaiting.end()) {
      fetch.awaiting.erase(asked);
      fetch.notes += (fetch.notes.empty() ? "" : "; ") + failure;
      if (fetch.awaiting.empty()) fetches.push_back(id);
    } else if (fetch.holders.count(address) != 0) {
      fetches.push_back(id);
    }
  }
  for (uint64_t id : pushes) FinishPush(id, failure);
  for (uint32_t id : incoming) FailIncoming(id, failure);
  for (uint64_t id : fetches) {
    auto it = fetches_.find(id);
    if (it == fetches_.end()) continue;
    if (it->second.holders.count(address) != 0) {
      FailFetch(id, failure);
    } else {
      PlanFetch(it->second);
    }
  }
}

void Replicator::Engine::CheckTimeouts() {
  const Clock::time_point stale = Clock::now() - options_.idle_timeout;
  const std::string waited = " made no progress for " + std::to_string(options_.idle_timeout.count()) + " ms (timeout)";
  std::vector<std::string> addresses;
  for (const auto& [id, push] : pushes_) {
    if (!push.finished && push.last_progress < stale) addresses.push_back(push.address);
  }
  for (const auto& [id, in] : incoming_) {
    if (in.failure.empty() && in.last_progress < stale) addresses.push_back(in.address);
  }
  std::vector<uint64_t> fetches;
  for (const auto& [id, fetch] : fetches_) {
    if (fetch.last_progress < stale) fetches.push_back(id);
  }
  for (const std::string& address : addresses) FailAddress(address, waited.substr(1));
  for (uint64_t id : fetches) {
    if (fetches_.count(id) != 0) FailFetch(id, "the fetch" + waited);
  }
}

std::string Replicator::Engine::PeerName(const std::string& address) const {
  for (const PeerAgent& peer : peers_) {
    if (peer.address == address) return "node '" + peer.node + "' (index " + std::to_string(peer.node_index) + ")";
  }
  return "a peer agent this agent was not told of";
}

std::string Replicator::Engine::CheckpointDir(const std::string& name) const {
  return io::JoinPath(store_.directory(), name);
}

void Replicator::Engine::SetPeers(std::vector<PeerAgent> peers, uint32_t node_index, uint32_t replicas) {
  peers_ = std::move(peers);
  node_index_ = node_index;
  replicas_ = replicas;
  log_("peers: " + std::to_string(peers_.size()) + " nodes, this is index " + std::to_string(node_index) + ", " +
       std::to_string(replicas) + " replicas of each node's files");
}

std::string Replicator::Engine::FetchKey(const std::string& name, std::vector<std::string> files) {
  std::sort(files.begin(), files.end());
  std::string key = name;
  for (const std::string& file : files) key += "\n" + file;
  return key;
}

Status Replicator::Engine::FetchOutcome(const MemoryCheckpoint& checkpoint, const std::vector<std::string>& files) {
  RETURN_IF_ERROR(ValidateEntryName(checkpoint.name));
  for (const std::string& file : files) RETURN_IF_ERROR(ValidateReplicatedFileName(file));
  const std::string& name = checkpoint.name;
  const std::string key = FetchKey(name, files);
  std::lock_guard<std::mutex> lock(mu_);
  if (fetching_.count(name) == 0) {
    auto outcome = fetch_outcomes_.find(key);
    if (outcome != fetch_outcomes_.end()) {
      Status status = outcome->second;
      // A fetched checkpoint that retention removed since is fetched again.
      const bool gone = status.ok() && !store_.Find(name).has_value();
      if (!status.ok() || gone) fetch_outcomes_.erase(outcome);
      if (!gone) return status;
    }
    fetching_.insert(name);
    commands_.push_back([this, checkpoint, files] { StartFetch(checkpoint, files); });
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
  }
  return Status(Code::kInProgress, "fetching memory checkpoint " + Quoted(name) + " from peers");
}

Result<std::unique_ptr<Replicator>> Replicator::Start(MemoryStore& store, ReplicatorOptions options, LogFn log) {
  ASSIGN_OR_RETURN(const coll::UcxApi* ucx, coll::LoadUcx());
  auto engine = std::make_unique<Engine>(store, std::move(options), std::move(log), *ucx);
  RETURN_IF_ERROR(engine->Open());
  return std::unique_ptr<Replicator>(new Replicator(std::move(engine)));
}

Replicator::Replicator(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {}
Replicator::~Replicator() = default;

const std::string& Replicator::address() const { return engine_->address(); }

void Replicator::SetPeers(std::vector<PeerAgent> peers, uint32_t node_index, uint32_t replicas) {
  Engine* engine = engine_.get();
  engine->Post([engine, peers = std::move(peers), node_index, replicas]() mutable {
    engine->SetPeers(std::move(peers), node_index, replicas);
  });
}

void Replicator::Replicate(const std::string& name) {
  Engine* engine = engine_.get();
  engine->Post([engine, name] { engine->StartReplica(name); });
}

Status Replicator::Fetch(const MemoryCheckpoint& checkpoint, const std::vector<std::string>& files) {
  return engine_->FetchOutcome(checkpoint, files);
}

}  // namespace ckpt::agent

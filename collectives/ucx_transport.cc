#include "collectives/ucx_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "collectives/ucx_batch.h"
#include "collectives/ucx_config.h"
#include "collectives/ucx_library.h"

namespace ckpt::coll {
namespace {

using ucx::Batch;
using ucx::Kind;
using ucx::RankName;
using ucx::Transfer;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The UCX tag carries the sender's rank above the caller's tag, so equal tags from different peers never match.
constexpr int kRankBits = 64 - kTransferTagBits;
constexpr int kMaxRanks = 1 << kRankBits;
constexpr uint64_t kExactTagMask = ~uint64_t{0};

// The longest sleep on the worker's event fd during an exchange: UCX's keepalive, which notices dead peers, runs
// only inside ucp_worker_progress, so a wait must come back to it regularly.
constexpr milliseconds kExchangeIdleWait{50};
// The same between exchanges, when only peers' late requests and dead peers are waited for.
constexpr milliseconds kBackgroundIdleWait{200};
// How long cancelled or purged requests get to complete after a timeout.
constexpr milliseconds kCancelGrace{2000};
// The longest a destructor waits for endpoints to close: only the tail of a TCP buffer, for a peer that does not
// read it, is at stake.
constexpr milliseconds kLongestClose{10000};
// Keeps now() + timeout from overflowing.
constexpr milliseconds kLongestTimeout = std::chrono::hours(24 * 365);

uint64_t UcxTag(int source_rank, uint64_t tag) {
  return (static_cast<uint64_t>(source_rank) << kTransferTagBits) | tag;
}

// The ranks whose allgather contribution was empty, as "1, 3".
std::string RanksThatSentNothing(const std::vector<std::string>& contributions) {
  std::string ranks;
  for (size_t r = 0; r < contributions.size(); ++r) {
    if (contributions[r].empty()) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  return ranks;
}

Status UcxUnavailable(const UcxApi& ucx, const std::string& step, ucs_status_t status) {
  return Unsupported("UCX is unavailable: " + step + " failed: " + ucx.status_string(status));
}

// Sleeps until one of the descriptors is readable or `wait` passes.
void WaitForEvents(int event_fd, int wake_fd, milliseconds wait) {
  pollfd fds[2] = {{event_fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
  poll(fds, wake_fd >= 0 ? 2 : 1, static_cast<int>(wait.count()));
}

struct Peer {
  int rank = 0;
  ucp_ep_h ep = nullptr;
  ucs_status_t endpoint_error = UCS_OK;  // reported by UCX, not yet handled
  bool* errors_reported = nullptr;       // the transport's flag, so that it need not scan every peer
  std::string failure;                   // why the endpoint was closed; empty while connected
  // Transfers with this peer were abandoned: its late messages could match a later exchange's receives.
  bool abandoned = false;
};

void OnEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  Peer* peer = static_cast<Peer*>(arg);
  peer->endpoint_error = status;
  *peer->errors_reported = true;
}

// Between exchanges a background thread keeps the worker progressing: a peer may still need this rank's help to
// finish its side (acknowledgements, the rest of a TCP send buffer, connection setup) after this rank's own
// transfers completed, and the caller may then block elsewhere for long (in a control-plane collective).
class UcxTransport : public Transport {
 public:
  UcxTransport(const UcxApi& ucx, int rank, int world_size, milliseconds close_timeout)
      : ucx_(ucx),
        rank_(rank),
        peers_(world_size),
        close_timeout_(std::clamp(close_timeout, milliseconds(0), kLongestClose)) {
    for (int r = 0; r < world_size; ++r) {
      peers_[r].rank = r;
      peers_[r].errors_reported = &errors_reported_;
    }
  }
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;
  ~UcxTransport() override;

  const char* name() const override { return "ucx"; }
  Status Exchange(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs,
                  milliseconds timeout) override;

  // Creates the context, the worker and its event fd, with `net_devices` as UCX's network devices (empty: all).
  Status Open(const std::string& net_devices);
  Result<std::string> WorkerAddress() const;
  // Creates an endpoint to every rank from its worker address.
  Status Connect(const std::vector<std::string>& addresses);
  Status StartBackgroundProgress();

 private:
  Status CheckTransfer(const char* direction, int peer, bool has_buffer, uint64_t size, uint64_t tag) const;
  Status Validate(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs) const;
  void PostReceive(Batch& batch, const TransferRecv& recv);
  void PostSend(Batch& batch, const TransferSend& send);
  // Progresses until the batch completes or the deadline passes; the peer check's failure if it reports one.
  Status Progress(Batch& batch, Clock::time_point deadline);
  void ProgressOrWait(Clock::time_point deadline);
  void ProgressWhileIdle() noexcept;
  void ProgressUntilStopped();
  void RecordProgressFailure(const char* what) noexcept;
  void HandleEndpointErrors(Batch* batch);
  void FailPeer(int peer, const std::string& reason);
  void CancelReceivesFrom(Batch& batch, int peer);
  void CancelReceivesFromDisconnected(Batch& batch);
  void Abandon(Batch& batch, milliseconds timeout);
  void CloseEndpoint(ucp_ep_h ep, uint32_t flags);
  void ReapClosedEndpoints(Clock::time_point deadline);

  const UcxApi& ucx_;
  const int rank_;
  std::vector<Peer> peers_;  // by rank; sized once, as endpoints hold pointers to them
  const milliseconds close_timeout_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int event_fd_ = -1;  // the worker's, owned by UCX
  int wake_fd_ = -1;   // wakes the background thread for shutdown

  std::atomic<int> exchanges_waiting_{0};  // keeps the background thread from re-taking mutex_ before them
  std::mutex mutex_;                       // serialises every use of the worker and of the members below
  bool errors_reported_ = false;
  bool stopping_ = false;
  std::vector<void*> closing_;  // requests of endpoints still closing
  std::thread progress_thread_;
  // Why the progress thread stopped early, written once before progress_failed_ is set: a fixed buffer, as the
  // thread records it while handling an exception, where an allocation could throw again.
  char progress_failure_[256] = {};
  std::atomic<bool> progress_failed_{false};
};

UcxTransport::~UcxTransport() {
  if (progress_thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    const uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof one) < 0) {
      // Only a full counter fails, and then the thread is awake already.
    }
    progress_thread_.join();
  }
  if (wake_fd_ >= 0) close(wake_fd_);
  if (worker_ != nullptr) {
    // Graceful: sends that completed locally may still sit in a TCP buffer. Peers progress in the background, so
    // the close completes unless a peer hangs, which close_timeout_ bounds.
    for (Peer& peer : peers_) {
      if (peer.ep != nullptr) CloseEndpoint(peer.ep, 0);
      peer.ep = nullptr;
    }
    ReapClosedEndpoints(Clock::now() + close_timeout_);
    // Released by UCX when they complete; destroying the worker completes them.
    for (void* request : closing_) ucx_.request_free(request);
    ucx_.worker_destroy(worker_);
  }
  if (context_ != nullptr) ucx_.cleanup(context_);
}

Status UcxTransport::Open(const std::string& net_devices) {
  ASSIGN_OR_RETURN(ucp_config_t * config, ReadUcxConfig(ucx_, net_devices));
  ucp_params_t params = {};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.estimated_num_eps = peers_.size();
  ucs_status_t status = ucx_.init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &context_);
  ucx_.config_release(config);
  if (status != UCS_OK) return UcxUnavailable(ucx_, "ucp_init", status);

  ucp_worker_params_t worker_params = {};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // Never used by two threads at once (mutex_), but by more than one thread.
  worker_params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  status = ucx_.worker_create(context_, &worker_params, &worker_);
  if (status != UCS_OK) return UcxUnavailable(ucx_, "ucp_worker_create", status);
  status = ucx_.worker_get_efd(worker_, &event_fd_);
  if (status != UCS_OK) return UcxUnavailable(ucx_, "ucp_worker_get_efd", status);
  return Status::Ok();
}

Result<std::string> UcxTransport::WorkerAddress() const {
  ucp_address_t* address = nullptr;
  size_t length = 0;
  const ucs_status_t status = ucx_.worker_get_address(worker_, &address, &length);
  if (status != UCS_OK) return UcxUnavailable(ucx_, "ucp_worker_get_address", status);
  std::string bytes(reinterpret_cast<const char*>(address), length);
  ucx_.worker_release_address(worker_, address);
  return bytes;
}

Status UcxTransport::Connect(const std::vector<std::string>& addresses) {
  for (Peer& peer : peers_) {
    ucp_ep_params_t params = {};
    params.field_mask =
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(addresses[peer.rank].data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = OnEndpointError;
    params.err_handler.arg = &peer;
    const ucs_status_t status = ucx_.ep_create(worker_, &params, &peer.ep);
    if (status != UCS_OK) {
      peer.ep = nullptr;
      return PeerFailed("creating a UCX endpoint to " + RankName(peer.rank) + " failed: " + ucx_.status_string(status));
    }
  }
  return Status::Ok();
}

Status UcxTransport::StartBackgroundProgress() {
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return Internal(std::string("eventfd for the UCX progress thread failed: ") + strerror(errno));
  try {
    progress_thread_ = std::thread([this] { ProgressWhileIdle(); });
  } catch (const std::system_error& error) {
    return Internal(std::string("starting the UCX progress thread failed: ") + error.what());
  }
  return Status::Ok();
}

// An exception leaving a thread ends the process (std::terminate): the progress thread instead stops, and every
// later exchange reports why.
void UcxTransport::ProgressWhileIdle() noexcept {
  try {
    ProgressUntilStopped();
  } catch (const std::exception& error) {
    RecordProgressFailure(error.what());
  } catch (...) {
    RecordProgressFailure("an exception that is not a std::exception");
  }
}

void UcxTransport::RecordProgressFailure(const char* what) noexcept {
  std::snprintf(progress_failure_, sizeof progress_failure_, "%s", what);
  progress_failed_.store(true);
}

void UcxTransport::ProgressUntilStopped() {
  while (true) {
    if (exchanges_waiting_.load() > 0) {
      std::this_thread::yield();
      continue;
    }
    bool idle = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      if (ucx_.worker_progress(worker_) == 0) idle = ucx_.worker_arm(worker_) != UCS_ERR_BUSY;
      HandleEndpointErrors(nullptr);
    }
    if (idle) WaitForEvents(event_fd_, wake_fd_, kBackgroundIdleWait);
  }
}

Status UcxTransport::CheckTransfer(const char* direction, int peer, bool has_buffer, uint64_t size,
                                   uint64_t tag) const {
  const int world_size = static_cast<int>(peers_.size());
  if (peer < 0 || peer >= world_size) {
    return InvalidArgument(std::string(direction) + " rank " + std::to_string(peer) + ": no such rank in a world of " +
                           std::to_string(world_size));
  }
  const std::string transfer = std::string(direction) + " " + RankName(peer) + " with tag " + std::to_string(tag);
  if (tag > kMaxTransferTag) {
    return InvalidArgument(transfer + ": the tag does not fit in " + std::to_string(kTransferTagBits) + " bits");
  }
  if (!has_buffer && size > 0) return InvalidArgument(transfer + ": no buffer for " + std::to_string(size) + " bytes");
  const Peer& target = peers_[peer];
  if (target.abandoned) return PeerFailed(RankName(peer) + " failed in an earlier exchange: " + target.failure);
  return Status::Ok();
}

Status UcxTransport::Validate(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs) const {
  for (const TransferSend& send : sends) {
    RETURN_IF_ERROR(CheckTransfer("send to", send.peer, send.data != nullptr, send.size, send.tag));
    if (peers_[send.peer].ep == nullptr) {
      return PeerFailed(RankName(send.peer) + " disconnected: " + peers_[send.peer].failure);
    }
  }
  for (const TransferRecv& recv : recvs) {
    RETURN_IF_ERROR(CheckTransfer("receive from", recv.peer, recv.data != nullptr, recv.size, recv.tag));
  }
  return Status::Ok();
}

void UcxTransport::PostReceive(Batch& batch, const TransferRecv& recv) {
  Transfer& transfer = ucx::Begin(batch, Kind::kReceive, recv.peer, recv.tag, recv.size);
  const ucp_request_param_t param = ucx::ReceiveParam(transfer);
  const uint64_t tag = UcxTag(recv.peer, recv.tag);
  ucx::Track(transfer, ucx_.tag_recv_nbx(worker_, recv.data, recv.size, tag, kExactTagMask, &param));
}

void UcxTransport::PostSend(Batch& batch, const TransferSend& send) {
  Transfer& transfer = ucx::Begin(batch, Kind::kSend, send.peer, send.tag, send.size);
  const ucp_request_param_t param = ucx::SendParam(transfer);
  ucx::Track(transfer, ucx_.tag_send_nbx(peers_[send.peer].ep, send.data, send.size, UcxTag(rank_, send.tag), &param));
}

Status UcxTransport::Progress(Batch& batch, Clock::time_point deadline) {
  Clock::time_point next_check = Clock::now() + kPeerCheckInterval;
  while (batch.in_flight > 0) {
    HandleEndpointErrors(&batch);
    if (batch.in_flight == 0 || Clock::now() >= deadline) break;
    if (Clock::now() >= next_check) {
      RETURN_IF_ERROR(CheckPeers());
      next_check = Clock::now() + kPeerCheckInterval;
    }
    ProgressOrWait(deadline);
  }
  HandleEndpointErrors(&batch);
  return Status::Ok();
}

// Makes UCX progress; when it has nothing to do, sleeps on the worker's event fd until an event, the deadline or
// kExchangeIdleWait, whichever comes first.
void UcxTransport::ProgressOrWait(Clock::time_point deadline) {
  if (ucx_.worker_progress(worker_) != 0) return;
  const Clock::time_point now = Clock::now();
  if (now >= deadline) return;
  if (ucx_.worker_arm(worker_) == UCS_ERR_BUSY) return;  // events arrived since the progress call
  WaitForEvents(event_fd_, -1, std::min(std::chrono::ceil<milliseconds>(deadline - now), kExchangeIdleWait));
}

// UCX reports a failed endpoint through its callback, during progress; the endpoint must then be closed. An exchange
// fails only if it still waits on that peer: one whose transfers all completed may go away.
void UcxTransport::HandleEndpointErrors(Batch* batch) {
  if (!errors_reported_) return;
  errors_reported_ = false;
  for (Peer& peer : peers_) {
    if (peer.endpoint_error == UCS_OK) continue;
    const std::string reason = ucx_.status_string(peer.endpoint_error);
    peer.endpoint_error = UCS_OK;
    const bool awaited = batch != nullptr && batch->HasPendingWith(peer.rank);
    FailPeer(peer.rank, reason);
    if (awaited) {
      peer.abandoned = true;
      batch->failed_peers.emplace(peer.rank, reason);
      CancelReceivesFrom(*batch, peer.rank);
    }
  }
}

// Closing the endpoint completes the sends still queued on it (UCX purges them). Messages the peer sent before it
// went away can still be received.
void UcxTransport::FailPeer(int rank, const std::string& reason) {
  Peer& peer = peers_[rank];
  if (peer.failure.empty()) peer.failure = reason;
  if (peer.ep != nullptr) CloseEndpoint(peer.ep, UCP_EP_CLOSE_FLAG_FORCE);
  peer.ep = nullptr;
}

// Receives are not tied to an endpoint: a failed peer's receives would wait forever unless cancelled.
void UcxTransport::CancelReceivesFrom(Batch& batch, int peer) {
  for (Transfer& transfer : batch.transfers) {
    // Cancelling may complete the request at once, through the callback that clears `request`.
    if (transfer.kind == Kind::kReceive && transfer.peer == peer && transfer.request != nullptr) {
      ucx_.request_cancel(worker_, transfer.request);
    }
  }
}

// A disconnected peer sends nothing more: receives that its earlier messages did not match at posting never will.
void UcxTransport::CancelReceivesFromDisconnected(Batch& batch) {
  for (Transfer& transfer : batch.transfers) {
    const Peer& peer = peers_[transfer.peer];
    if (transfer.kind == Kind::kReceive && !transfer.done && peer.ep == nullptr) {
      batch.failed_peers.emplace(peer.rank, "disconnected: " + peer.failure);
      if (transfer.request != nullptr) ucx_.request_cancel(worker_, transfer.request);
    }
  }
}

// After a timeout: cancels what is still in flight so that UCX lets go of the caller's buffers, and marks the peers
// concerned failed for good, as their late messages could match a later exchange's receives.
void UcxTransport::Abandon(Batch& batch, milliseconds timeout) {
  std::map<int, std::pair<int, int>> pending;  // peer -> (receives, sends)
  for (const Transfer& transfer : batch.transfers) {
    if (transfer.done) continue;
    std::pair<int, int>& counts = pending[transfer.peer];
    ++(transfer.kind == Kind::kReceive ? counts.first : counts.second);
  }
  batch.timeout_detail = "timed out after " + std::to_string(timeout.count()) + " ms waiting for ";
  const char* separator = "";
  for (const auto& [peer, counts] : pending) {
    batch.timeout_detail += separator + RankName(peer) + " (" + std::to_string(counts.first) + " receives, " +
                            std::to_string(counts.second) + " sends)";
    separator = ", ";
    FailPeer(peer, "timed out");
    peers_[peer].abandoned = true;
    CancelReceivesFrom(batch, peer);
  }
  // The exchange has already failed; the grace period only gives UCX time to let go of the buffers.
  (void)Progress(batch, Clock::now() + kCancelGrace);
  for (Transfer& transfer : batch.transfers) {
    // No callback comes for a freed request, and UCX releases it once it completes.
    if (transfer.request != nullptr) {
      ucx_.request_free(transfer.request);
      ucx::Finish(&transfer, UCS_ERR_CANCELED, 0);
    }
  }
}

void UcxTransport::CloseEndpoint(ucp_ep_h ep, uint32_t flags) {
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = flags;
  const ucs_status_ptr_t request = ucx_.ep_close_nbx(ep, &param);
  if (UCS_PTR_IS_PTR(request)) closing_.push_back(request);
}

void UcxTransport::ReapClosedEndpoints(Clock::time_point deadline) {
  while (!closing_.empty()) {
    FreeFinishedRequests(ucx_, closing_);
    if (closing_.empty() || Clock::now() >= deadline) break;
    ProgressOrWait(deadline);
  }
}

Status UcxTransport::Exchange(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs,
                              milliseconds timeout) {
  ++exchanges_waiting_;
  std::lock_guard<std::mutex> lock(mutex_);
  --exchanges_waiting_;
  if (progress_failed_.load()) {
    return Internal(std::string("the UCX progress thread stopped: ") + progress_failure_);
  }
  RETURN_IF_ERROR(Validate(sends, recvs));
  timeout = std::clamp(timeout, milliseconds(0), kLongestTimeout);
  const Clock::time_point deadline = Clock::now() + timeout;
  Batch batch(ucx_);
  batch.transfers.reserve(sends.size() + recvs.size());
  // Receives first, so that sends to this rank itself find them posted.
  for (const TransferRecv& recv : recvs) PostReceive(batch, recv);
  for (const TransferSend& send : sends) PostSend(batch, send);
  CancelReceivesFromDisconnected(batch);
  const Status peers = Progress(batch, deadline);
  if (batch.in_flight > 0) Abandon(batch, timeout);
  ReapClosedEndpoints(Clock::now());
  return peers.ok() ? ucx::Verdict(batch) : peers;
}

// Collective: this rank's UCX network devices (empty: every device). A job whose every rank reaches the store over
// loopback runs on one host, and loopback alone serves it. Across hosts, a rank keeps to the interface through which
// it reaches the store, the job's network; the store's own host reaches it over loopback and cannot tell which of
// its interfaces the other hosts use, so it keeps them all.
Result<std::string> AgreeOnNetDevices(ControlPlane& control, const std::string& job_host) {
  const Result<NetworkInterface> reaching =
      job_host.empty() ? Result<NetworkInterface>(NotFound("no job host")) : InterfaceReaching(job_host);
  const std::string route = !reaching.ok() ? "unknown" : reaching.value().loopback ? "loopback" : "network";
  ASSIGN_OR_RETURN(const std::vector<std::string> routes, control.AllGather(route));
  if (!reaching.ok()) return std::string();
  const bool one_host =
      std::all_of(routes.begin(), routes.end(), [](const std::string& other) { return other == "loopback"; });
  if (reaching.value().loopback && !one_host) return std::string();
  return NetDevicesFor(reaching.value().name);
}

// Every rank learns whether every other rank got this far, so that a failure on one rank fails all of them alike.
Status AgreeOnSuccess(ControlPlane& control, const Status& mine, const std::string& what) {
  ASSIGN_OR_RETURN(std::vector<std::string> verdicts, control.AllGather(mine.ok() ? "ok" : ""));
  RETURN_IF_ERROR(mine);
  const std::string failed = RanksThatSentNothing(verdicts);
  return failed.empty() ? Status::Ok() : Unsupported(what + " failed on rank " + failed);
}

}  // namespace

Result<std::unique_ptr<Transport>> MakeUcxTransport(ControlPlane& control, const UcxTransportOptions& options) {
  if (control.world_size() > kMaxRanks) {
    return InvalidArgument("the UCX transport supports at most " + std::to_string(kMaxRanks) + " ranks, not " +
                           std::to_string(control.world_size()));
  }
  ASSIGN_OR_RETURN(const std::string net_devices, AgreeOnNetDevices(control, options.job_host));
  const Result<const UcxApi*> ucx = options.ucx != nullptr ? Result<const UcxApi*>(options.ucx) : LoadUcx();
  std::unique_ptr<UcxTransport> transport;
  Status opened = ucx.status();
  if (ucx.ok()) {
    transport =
        std::make_unique<UcxTransport>(*ucx.value(), control.rank(), control.world_size(), options.close_timeout);
    opened = transport->Open(net_devices);
  }
  Result<std::string> address = opened.ok() ? transport->WorkerAddress() : Result<std::string>(opened);
  // An empty contribution tells the others that this rank has no worker.
  ASSIGN_OR_RETURN(std::vector<std::string> addresses, control.AllGather(address.ok() ? address.value() : ""));
  if (!address.ok()) return address.status();
  const std::string unavailable = RanksThatSentNothing(addresses);
  if (!unavailable.empty()) return Unsupported("UCX is unavailable on rank " + unavailable);
  Status connected = transport->Connect(addresses);
  if (connected.ok()) connected = transport->StartBackgroundProgress();
  RETURN_IF_ERROR(AgreeOnSuccess(control, connected, "connecting UCX endpoints"));
  return std::unique_ptr<Transport>(std::move(transport));
}

}  // namespace ckpt::coll

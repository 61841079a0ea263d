#include "collectives/ucx_transport.h"

#include <poll.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace ckpt::coll {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The UCX tag carries the sender's rank above the caller's tag, so equal tags from different peers never match.
constexpr int kRankBits = 64 - kTransferTagBits;
constexpr int kMaxRanks = 1 << kRankBits;
constexpr uint64_t kExactTagMask = ~uint64_t{0};

// The longest sleep on the worker's event fd: UCX's keepalive, which notices dead peers, runs only inside
// ucp_worker_progress, so an idle wait must come back to it regularly.
constexpr milliseconds kMaxIdleWait{50};
// UCX's default keepalive interval (20 s) would leave a dead peer unnoticed for most of a short timeout.
constexpr char kKeepaliveInterval[] = "1s";
// How long cancelled or purged requests get to complete after a timeout, and endpoints to close.
constexpr milliseconds kCancelGrace{2000};
// Keeps now() + timeout from overflowing.
constexpr milliseconds kLongestTimeout = std::chrono::hours(24 * 365);

uint64_t UcxTag(int source_rank, uint64_t tag) {
  return (static_cast<uint64_t>(source_rank) << kTransferTagBits) | tag;
}

std::string RankName(int rank) { return "rank " + std::to_string(rank); }

std::string JoinRanks(const std::vector<int>& ranks) {
  std::string joined;
  for (int rank : ranks) joined += (joined.empty() ? "" : ", ") + std::to_string(rank);
  return joined;
}

Status UcxUnavailable(const std::string& step, ucs_status_t status) {
  return Unsupported("UCX is unavailable: " + step + " failed: " + ucs_status_string(status));
}

// UCX 1.13 takes the shared-memory transports' settings from the environment only (ucp_config_modify does not reach
// them), and peer error handling disables shared memory unless these are on. A value the user set is kept.
void EnableSharedMemoryErrorHandling() {
  static std::once_flag once;
  std::call_once(once, [] {
    setenv("UCX_POSIX_ERROR_HANDLING", "y", /*overwrite=*/0);
    setenv("UCX_SYSV_ERROR_HANDLING", "y", /*overwrite=*/0);
  });
}

enum class Kind : uint8_t { kSend, kReceive, kFlush };

struct Batch;

// One send, receive or endpoint flush of an Exchange call, as UCX sees it.
struct Transfer {
  Kind kind;
  int peer;
  uint64_t tag;
  uint64_t size;
  Batch* batch;
  void* request = nullptr;  // UCX's request while in flight
  bool done = false;
  ucs_status_t status = UCS_OK;
  uint64_t received = 0;
};

// Everything one Exchange call posted. Transfers are UCX callback arguments, so the vector never reallocates.
struct Batch {
  std::vector<Transfer> transfers;
  std::vector<int> peers;  // sorted, distinct
  size_t in_flight = 0;
  std::map<int, std::string> failed_peers;
  std::string timeout_detail;

  bool Involves(int peer) const { return std::binary_search(peers.begin(), peers.end(), peer); }
};

void Finish(Transfer* transfer, ucs_status_t status, uint64_t received) {
  transfer->request = nullptr;
  transfer->done = true;
  transfer->status = status;
  transfer->received = received;
  --transfer->batch->in_flight;
}

void OnSendDone(void* request, ucs_status_t status, void* user_data) {
  ucp_request_free(request);
  Finish(static_cast<Transfer*>(user_data), status, 0);
}

void OnReceiveDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
  ucp_request_free(request);
  Finish(static_cast<Transfer*>(user_data), status, status == UCS_OK ? info->length : 0);
}

// Records what a posting call returned: a request still in flight, or an immediate completion.
void Track(Transfer& transfer, ucs_status_ptr_t posted, uint64_t received_now) {
  ++transfer.batch->in_flight;
  if (UCS_PTR_IS_PTR(posted)) {
    transfer.request = posted;
  } else {
    const ucs_status_t status = UCS_PTR_STATUS(posted);
    Finish(&transfer, status, status == UCS_OK ? received_now : 0);
  }
}

ucp_request_param_t CallbackParam(Transfer& transfer) {
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.user_data = &transfer;
  return param;
}

struct Peer {
  int rank = 0;
  ucp_ep_h ep = nullptr;
  ucs_status_t endpoint_error = UCS_OK;  // reported by UCX, not yet handled
  bool* errors_reported = nullptr;       // the transport's flag, so that it need not scan every peer
  std::string failure;                   // why this peer is unusable; empty while healthy
};

void OnEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  Peer* peer = static_cast<Peer*>(arg);
  peer->endpoint_error = status;
  *peer->errors_reported = true;
}

class UcxTransport : public Transport {
 public:
  UcxTransport(int rank, int world_size, milliseconds close_timeout)
      : rank_(rank), peers_(world_size), close_timeout_(close_timeout) {
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

  // Creates the context, the worker and its event fd.
  Status Open();
  Result<std::string> WorkerAddress() const;
  // Creates an endpoint to every rank from its worker address.
  Status Connect(const std::vector<std::string>& addresses);

 private:
  Status CheckTransfer(const char* direction, int peer, bool has_buffer, uint64_t size, uint64_t tag) const;
  Status Validate(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs) const;
  void PostReceive(Batch& batch, const TransferRecv& recv);
  void PostSend(Batch& batch, const TransferSend& send);
  void PostFlushes(Batch& batch);
  void Progress(Batch& batch, Clock::time_point deadline);
  void ProgressOrWait(Clock::time_point deadline);
  void HandleEndpointErrors(Batch& batch);
  void FailPeer(int peer, const std::string& reason);
  void CancelReceivesFrom(Batch& batch, int peer);
  void Abandon(Batch& batch, milliseconds timeout);
  void CloseEndpoint(ucp_ep_h ep);
  void ReapClosedEndpoints(Clock::time_point deadline);

  int rank_;
  std::vector<Peer> peers_;  // by rank; sized once, as endpoints hold pointers to them
  milliseconds close_timeout_;
  bool errors_reported_ = false;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int event_fd_ = -1;
  std::vector<void*> closing_;  // requests of endpoints still closing
};

UcxTransport::~UcxTransport() {
  if (worker_ != nullptr) {
    for (Peer& peer : peers_) {
      if (peer.ep != nullptr) CloseEndpoint(peer.ep);
      peer.ep = nullptr;
    }
    ReapClosedEndpoints(Clock::now() + std::min(close_timeout_, kLongestTimeout));
    ucp_worker_destroy(worker_);
  }
  if (context_ != nullptr) ucp_cleanup(context_);
}

Status UcxTransport::Open() {
  EnableSharedMemoryErrorHandling();
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) return UcxUnavailable("reading its configuration", status);
  if (std::getenv("UCX_KEEPALIVE_INTERVAL") == nullptr) {
    status = ucp_config_modify(config, "KEEPALIVE_INTERVAL", kKeepaliveInterval);
  }
  if (status == UCS_OK) {
    ucp_params_t params = {};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    params.estimated_num_eps = peers_.size();
    status = ucp_init(&params, config, &context_);
  }
  ucp_config_release(config);
  if (status != UCS_OK) return UcxUnavailable("ucp_init", status);

  ucp_worker_params_t worker_params = {};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // One thread at a time, though not always the same one: the caller's threads take turns.
  worker_params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  status = ucp_worker_create(context_, &worker_params, &worker_);
  if (status != UCS_OK) return UcxUnavailable("ucp_worker_create", status);
  status = ucp_worker_get_efd(worker_, &event_fd_);
  if (status != UCS_OK) return UcxUnavailable("ucp_worker_get_efd", status);
  return Status::Ok();
}

Result<std::string> UcxTransport::WorkerAddress() const {
  ucp_address_t* address = nullptr;
  size_t length = 0;
  const ucs_status_t status = ucp_worker_get_address(worker_, &address, &length);
  if (status != UCS_OK) return UcxUnavailable("ucp_worker_get_address", status);
  std::string bytes(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(worker_, address);
  return bytes;
}

Status UcxTransport::Connect(const std::vector<std::string>& addresses) {
  for (Peer& peer : peers_) {
    ucp_ep_params_t params = {};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(addresses[peer.rank].data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = OnEndpointError;
    params.err_handler.arg = &peer;
    const ucs_status_t status = ucp_ep_create(worker_, &params, &peer.ep);
    if (status != UCS_OK) {
      peer.ep = nullptr;
      return PeerFailed("creating a UCX endpoint to " + RankName(peer.rank) + " failed: " +
                        ucs_status_string(status));
    }
  }
  return Status::Ok();
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
  if (!peers_[peer].failure.empty()) {
    return PeerFailed(RankName(peer) + " failed in an earlier exchange: " + peers_[peer].failure);
  }
  return Status::Ok();
}

Status UcxTransport::Validate(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs) const {
  for (const TransferSend& send : sends) {
    RETURN_IF_ERROR(CheckTransfer("send to", send.peer, send.data != nullptr, send.size, send.tag));
  }
  for (const TransferRecv& recv : recvs) {
    RETURN_IF_ERROR(CheckTransfer("receive from", recv.peer, recv.data != nullptr, recv.size, recv.tag));
  }
  return Status::Ok();
}

void UcxTransport::PostReceive(Batch& batch, const TransferRecv& recv) {
  Transfer& transfer = batch.transfers.emplace_back(Transfer{Kind::kReceive, recv.peer, recv.tag, recv.size, &batch});
  ucp_tag_recv_info_t info = {};
  ucp_request_param_t param = CallbackParam(transfer);
  param.op_attr_mask |= UCP_OP_ATTR_FIELD_RECV_INFO;
  param.cb.recv = OnReceiveDone;
  param.recv_info.tag_info = &info;
  const ucs_status_ptr_t posted =
      ucp_tag_recv_nbx(worker_, recv.data, recv.size, UcxTag(recv.peer, recv.tag), kExactTagMask, &param);
  Track(transfer, posted, info.length);  // info is filled only on an immediate completion
}

void UcxTransport::PostSend(Batch& batch, const TransferSend& send) {
  Transfer& transfer = batch.transfers.emplace_back(Transfer{Kind::kSend, send.peer, send.tag, send.size, &batch});
  ucp_request_param_t param = CallbackParam(transfer);
  param.cb.send = OnSendDone;
  Track(transfer, ucp_tag_send_nbx(peers_[send.peer].ep, send.data, send.size, UcxTag(rank_, send.tag), &param), 0);
}

// A completed send may still sit in a TCP endpoint's buffer, and a completed receive may owe its sender an
// acknowledgement: flushing every endpoint used pushes both out before the caller stops progressing the worker.
void UcxTransport::PostFlushes(Batch& batch) {
  for (int peer : batch.peers) {
    if (peers_[peer].ep == nullptr) continue;
    Transfer& transfer = batch.transfers.emplace_back(Transfer{Kind::kFlush, peer, 0, 0, &batch});
    ucp_request_param_t param = CallbackParam(transfer);
    param.cb.send = OnSendDone;
    Track(transfer, ucp_ep_flush_nbx(peers_[peer].ep, &param), 0);
  }
}

void UcxTransport::Progress(Batch& batch, Clock::time_point deadline) {
  while (batch.in_flight > 0) {
    HandleEndpointErrors(batch);
    if (batch.in_flight == 0 || Clock::now() >= deadline) break;
    ProgressOrWait(deadline);
  }
  HandleEndpointErrors(batch);
}

// Makes UCX progress; when it has nothing to do, sleeps on the worker's event fd until an event, the deadline or
// kMaxIdleWait, whichever comes first.
void UcxTransport::ProgressOrWait(Clock::time_point deadline) {
  if (ucp_worker_progress(worker_) != 0) return;
  const Clock::time_point now = Clock::now();
  if (now >= deadline) return;
  if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) return;  // events arrived since the progress call
  const milliseconds wait = std::min(std::chrono::ceil<milliseconds>(deadline - now), kMaxIdleWait);
  pollfd event = {event_fd_, POLLIN, 0};
  poll(&event, 1, static_cast<int>(wait.count()));
}

// UCX reports a failed endpoint through its callback, during progress; the endpoint must then be closed, and the
// receives posted for that peer will never match, so they are cancelled.
void UcxTransport::HandleEndpointErrors(Batch& batch) {
  if (!errors_reported_) return;
  errors_reported_ = false;
  for (Peer& peer : peers_) {
    if (peer.endpoint_error == UCS_OK) continue;
    const std::string reason = ucs_status_string(peer.endpoint_error);
    peer.endpoint_error = UCS_OK;
    FailPeer(peer.rank, reason);
    if (batch.Involves(peer.rank)) {
      batch.failed_peers.emplace(peer.rank, reason);
      CancelReceivesFrom(batch, peer.rank);
    }
  }
}

// Closing the endpoint completes the sends and flushes still queued on it (UCX purges them).
void UcxTransport::FailPeer(int rank, const std::string& reason) {
  Peer& peer = peers_[rank];
  if (peer.failure.empty()) peer.failure = reason;
  if (peer.ep != nullptr) CloseEndpoint(peer.ep);
  peer.ep = nullptr;
}

void UcxTransport::CancelReceivesFrom(Batch& batch, int peer) {
  for (Transfer& transfer : batch.transfers) {
    // Cancelling may complete the request at once, through the callback that clears `request`.
    if (transfer.kind == Kind::kReceive && transfer.peer == peer && transfer.request != nullptr) {
      ucp_request_cancel(worker_, transfer.request);
    }
  }
}

// After a timeout: cancels what is still in flight so that UCX lets go of the caller's buffers, and marks the peers
// concerned failed for good, as their late messages could match a later exchange's receives.
void UcxTransport::Abandon(Batch& batch, milliseconds timeout) {
  struct Pending {
    int receives = 0, sends = 0, flushes = 0;
  };
  std::map<int, Pending> pending;
  for (const Transfer& transfer : batch.transfers) {
    if (transfer.done) continue;
    Pending& counts = pending[transfer.peer];
    ++(transfer.kind == Kind::kReceive ? counts.receives : transfer.kind == Kind::kSend ? counts.sends : counts.flushes);
  }
  batch.timeout_detail = "timed out after " + std::to_string(timeout.count()) + " ms waiting for";
  const char* separator = " ";
  for (const auto& [peer, counts] : pending) {
    batch.timeout_detail += separator + RankName(peer) + " (" +
                            std::to_string(counts.receives) + " receives, " + std::to_string(counts.sends) +
                            " sends" + (counts.flushes > 0 ? ", flush" : "") + ")";
    separator = ", ";
    FailPeer(peer, "timed out");
    CancelReceivesFrom(batch, peer);
  }
  Progress(batch, Clock::now() + kCancelGrace);
  for (Transfer& transfer : batch.transfers) {
    // No callback comes for a freed request, and UCX releases it once it completes.
    if (transfer.request != nullptr) {
      ucp_request_free(transfer.request);
      Finish(&transfer, UCS_ERR_CANCELED, 0);
    }
  }
}

void UcxTransport::CloseEndpoint(ucp_ep_h ep) {
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  // Forced: a graceful close would wait on the peer, which may be gone. Every exchange ends with a flush, so no
  // data is left behind.
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  const ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &param);
  if (UCS_PTR_IS_PTR(request)) closing_.push_back(request);
}

void UcxTransport::ReapClosedEndpoints(Clock::time_point deadline) {
  while (!closing_.empty()) {
    closing_.erase(std::remove_if(closing_.begin(), closing_.end(),
                                  [](void* request) {
                                    if (ucp_request_check_status(request) == UCS_INPROGRESS) return false;
                                    ucp_request_free(request);
                                    return true;
                                  }),
                   closing_.end());
    if (closing_.empty() || Clock::now() >= deadline) break;
    ProgressOrWait(deadline);
  }
}

std::string DescribeTransfer(const Transfer& transfer) {
  return std::string(transfer.kind == Kind::kSend ? "send to " : "receive from ") + RankName(transfer.peer) +
         " with tag " + std::to_string(transfer.tag);
}

// The one error an Exchange reports: failed peers first, then a timeout, then the first failed transfer.
Status Verdict(const Batch& batch) {
  if (!batch.failed_peers.empty()) {
    std::string message;
    for (const auto& [peer, reason] : batch.failed_peers) {
      message += (message.empty() ? "" : "; ") + RankName(peer) + ": " + reason;
    }
    if (!batch.timeout_detail.empty()) message += "; " + batch.timeout_detail;
    return PeerFailed(message);
  }
  if (!batch.timeout_detail.empty()) return Timeout(batch.timeout_detail);
  for (const Transfer& transfer : batch.transfers) {
    if (transfer.status == UCS_ERR_MESSAGE_TRUNCATED) {
      return Mismatch(DescribeTransfer(transfer) + ": the message is larger than the " +
                      std::to_string(transfer.size) + " bytes expected");
    }
    if (transfer.status != UCS_OK) {
      return PeerFailed(RankName(transfer.peer) + ": " + ucs_status_string(transfer.status) + " (" +
                        (transfer.kind == Kind::kFlush ? "flush" : DescribeTransfer(transfer)) + ")");
    }
    if (transfer.kind == Kind::kReceive && transfer.received != transfer.size) {
      return Mismatch(DescribeTransfer(transfer) + ": received " + std::to_string(transfer.received) +
                      " bytes, expected " + std::to_string(transfer.size));
    }
  }
  return Status::Ok();
}

Status UcxTransport::Exchange(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs,
                              milliseconds timeout) {
  RETURN_IF_ERROR(Validate(sends, recvs));
  timeout = std::clamp(timeout, milliseconds(0), kLongestTimeout);
  const Clock::time_point deadline = Clock::now() + timeout;
  Batch batch;
  for (const TransferSend& send : sends) batch.peers.push_back(send.peer);
  for (const TransferRecv& recv : recvs) batch.peers.push_back(recv.peer);
  std::sort(batch.peers.begin(), batch.peers.end());
  batch.peers.erase(std::unique(batch.peers.begin(), batch.peers.end()), batch.peers.end());
  batch.transfers.reserve(sends.size() + recvs.size() + batch.peers.size());

  // Receives first, so that sends to this rank itself find them posted.
  for (const TransferRecv& recv : recvs) PostReceive(batch, recv);
  for (const TransferSend& send : sends) PostSend(batch, send);
  Progress(batch, deadline);
  if (batch.in_flight == 0) {
    PostFlushes(batch);
    Progress(batch, deadline);
  }
  if (batch.in_flight > 0) Abandon(batch, timeout);
  ReapClosedEndpoints(Clock::now());
  return Verdict(batch);
}

// Every rank learns whether every other rank got this far, so that a failure on one rank fails all of them alike.
Status AgreeOnSuccess(ControlPlane& control, const Status& mine, const std::string& what) {
  ASSIGN_OR_RETURN(std::vector<std::string> verdicts, control.AllGather(mine.ok() ? "" : "x"));
  RETURN_IF_ERROR(mine);
  std::vector<int> failed;
  for (int r = 0; r < static_cast<int>(verdicts.size()); ++r) {
    if (!verdicts[r].empty()) failed.push_back(r);
  }
  if (failed.empty()) return Status::Ok();
  return Unsupported(what + " failed on rank " + JoinRanks(failed));
}

}  // namespace

Result<std::unique_ptr<Transport>> MakeUcxTransport(ControlPlane& control, std::chrono::milliseconds timeout) {
  if (control.world_size() > kMaxRanks) {
    return InvalidArgument("the UCX transport supports at most " + std::to_string(kMaxRanks) + " ranks, not " +
                           std::to_string(control.world_size()));
  }
  auto transport = std::make_unique<UcxTransport>(control.rank(), control.world_size(), timeout);
  Status opened = transport->Open();
  Result<std::string> address = opened.ok() ? transport->WorkerAddress() : Result<std::string>(opened);
  // An empty contribution tells the others that this rank has no worker.
  ASSIGN_OR_RETURN(std::vector<std::string> addresses, control.AllGather(address.ok() ? address.value() : ""));
  if (!address.ok()) return address.status();
  std::vector<int> unavailable;
  for (int r = 0; r < static_cast<int>(addresses.size()); ++r) {
    if (addresses[r].empty()) unavailable.push_back(r);
  }
  if (!unavailable.empty()) return Unsupported("UCX is unavailable on rank " + JoinRanks(unavailable));
  RETURN_IF_ERROR(AgreeOnSuccess(control, transport->Connect(addresses), "connecting UCX endpoints"));
  return std::unique_ptr<Transport>(std::move(transport));
}

}  // namespace ckpt::coll

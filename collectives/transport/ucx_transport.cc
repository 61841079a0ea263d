// The UCX transport's exchanges (ucx_transport.h): posting each exchange's sends and receives, serving same-host
// pulls, progressing until they complete, failing and abandoning peers, and the thread that progresses the worker
// between exchanges. Its bring-up is in ucx_connect.cc.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "collectives/transport/ucx_config.h"
#include "collectives/transport/ucx_transport_impl.h"
#include "common/os_error.h"

namespace ckpt::coll::ucx {
namespace {

constexpr uint64_t kExactTagMask = ~uint64_t{0};
enum class Channel : uint64_t { kData = 0, kPullDescriptor = 1, kPullAck = 2 };

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

uint64_t UcxTag(int source_rank, Channel channel, uint64_t tag) {
  return (static_cast<uint64_t>(source_rank) << kRankShift) | (static_cast<uint64_t>(channel) << kTransferTagBits) |
         tag;
}

// Sleeps until one of the descriptors is readable or `wait` passes.
void WaitForEvents(int event_fd, int wake_fd, milliseconds wait) {
  pollfd fds[2] = {{event_fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
  poll(fds, wake_fd >= 0 ? 2 : 1, static_cast<int>(wait.count()));
}

// A transfer's runs, where it has any, must each have memory and add up to its size.
Status CheckRuns(const std::string& transfer, const std::vector<MemoryRun>& runs, uint64_t size) {
  uint64_t scattered = 0;
  for (const MemoryRun& run : runs) {
    if (run.data == nullptr && run.size > 0) return InvalidArgument(transfer + ": a run has no memory");
    scattered += run.size;
  }
  if (!runs.empty() && scattered != size) {
    return InvalidArgument(transfer + " scatters " + std::to_string(scattered) + " bytes, not its " +
                           std::to_string(size));
  }
  return Status::Ok();
}

// UCX's iovec datatype over `runs`, kept in `batch` while the transfer stands: `param` then takes `buffer` as the
// list and a count of entries for its size.
ucp_dt_iov_t* ScatterOver(Batch& batch, const std::vector<MemoryRun>& runs, ucp_request_param_t& param) {
  std::vector<ucp_dt_iov_t>& list = batch.scatter_lists.emplace_back();
  for (const MemoryRun& run : runs) list.push_back(ucp_dt_iov_t{run.data, run.size});
  param.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
  param.datatype = ucp_dt_make_iov();
  return list.data();
}

}  // namespace

void OnEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  Peer* peer = static_cast<Peer*>(arg);
  peer->endpoint_error = status;
  *peer->errors_reported = true;
}

UcxTransport::UcxTransport(const UcxApi& ucx, int rank, int world_size, milliseconds close_timeout,
                           PullableProcess pullable)
    : ucx_(ucx),
      rank_(rank),
      peers_(world_size),
      close_timeout_(std::clamp(close_timeout, milliseconds(0), kLongestClose)),
      pullable_(std::move(pullable)),
      pulling_allowed_(CrossMemoryAllowed()) {
  for (int r = 0; r < world_size; ++r) {
    peers_[r].rank = r;
    peers_[r].errors_reported = &errors_reported_;
  }
}

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
  // A halted worker is never progressed again; its teardown frees the endpoints with it.
  if (worker_ == nullptr || halted_.load()) return;
  // Graceful: sends that completed locally may still sit in a TCP buffer. Peers progress in the background, so the
  // close completes unless a peer hangs, which close_timeout_ bounds. The worker's own teardown frees what remains.
  for (Peer& peer : peers_) {
    if (peer.ep != nullptr) worker_->CloseEndpoint(peer.ep, 0);
    peer.ep = nullptr;
  }
  ReapClosedEndpoints(Clock::now() + close_timeout_);
}

Status UcxTransport::StartBackgroundProgress() {
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return Internal("eventfd for the UCX progress thread failed: " + OsErrorText(errno));
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
    Halt(Code::kInternal, "the UCX progress thread stopped: ", error.what());
  } catch (...) {
    Halt(Code::kInternal, "the UCX progress thread stopped: ", "an exception that is not a std::exception");
  }
}

void UcxTransport::Halt(Code code, const char* prefix, const char* what) noexcept {
  if (halting_.exchange(true)) return;
  halt_code_ = code;
  std::snprintf(halt_reason_, sizeof halt_reason_, "%s%s", prefix, what);
  halted_.store(true);
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
      if (stopping_ || halted_.load()) return;
      if (ucx_.worker_progress(worker()) == 0) idle = ucx_.worker_arm(worker()) != UCS_ERR_BUSY;
      HandleEndpointErrors(nullptr);
    }
    if (idle) WaitForEvents(worker_->event_fd(), wake_fd_, kBackgroundIdleWait);
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
    RETURN_IF_ERROR(
        CheckRuns("send to " + RankName(send.peer) + " with tag " + std::to_string(send.tag), send.runs, send.size));
  }
  for (const TransferRecv& recv : recvs) {
    RETURN_IF_ERROR(CheckTransfer("receive from", recv.peer, recv.data != nullptr, recv.size, recv.tag));
    RETURN_IF_ERROR(CheckRuns("receive from " + RankName(recv.peer) + " with tag " + std::to_string(recv.tag),
                              recv.runs, recv.size));
  }
  return Status::Ok();
}

// A pulled receive waits for its descriptor; ServePulls then copies the bytes.
void UcxTransport::PostReceive(Batch& batch, const TransferRecv& recv) {
  void* buffer = recv.data;
  uint64_t size = recv.size;
  Channel channel = Channel::kData;
  if (PullsFrom(recv.peer, recv.size)) {
    PullDescriptor& descriptor = batch.descriptors.emplace_back();
    buffer = &descriptor;
    size = sizeof descriptor;
    channel = Channel::kPullDescriptor;
  }
  Transfer& transfer = Begin(batch, Kind::kReceive, recv.peer, recv.tag, size);
  if (channel == Channel::kPullDescriptor) {
    batch.pulls.push_back(PendingPull{&transfer, &batch.descriptors.back(), recv.data, recv.size, &recv.runs});
  }
  ucp_request_param_t param = ReceiveParam(transfer);
  if (channel == Channel::kData && !recv.runs.empty()) {
    buffer = ScatterOver(batch, recv.runs, param);
    size = recv.runs.size();
  }
  const uint64_t tag = UcxTag(recv.peer, channel, recv.tag);
  Track(transfer, ucx_.tag_recv_nbx(worker(), buffer, size, tag, kExactTagMask, &param));
}

// A pulled send announces where its bytes lie, and completes when the receiver acknowledges having read them.
void UcxTransport::PostSend(Batch& batch, const TransferSend& send) {
  const void* buffer = send.data;
  uint64_t size = send.size;
  Channel channel = Channel::kData;
  if (PulledBy(send.peer, send.size)) {
    uint64_t& check = batch.check_words.emplace_back(pullable_.NextCheckValue());
    uint64_t address = reinterpret_cast<uintptr_t>(send.data);
    if (!send.runs.empty()) {  // the receiver reads the list, then the runs
      std::vector<PulledRun>& listed = batch.pulled_run_lists.emplace_back();
      for (const MemoryRun& run : send.runs)
        listed.push_back(PulledRun{reinterpret_cast<uintptr_t>(run.data), run.size});
      address = reinterpret_cast<uintptr_t>(listed.data());
    }
    batch.descriptors.push_back(
        PullDescriptor{address, send.size, reinterpret_cast<uintptr_t>(&check), check, send.runs.size()});
    buffer = &batch.descriptors.back();
    size = sizeof(PullDescriptor);
    channel = Channel::kPullDescriptor;
    Transfer& ack = Begin(batch, Kind::kReceive, send.peer, send.tag, sizeof(uint64_t));
    ack.pull_ack = true;
    const ucp_request_param_t ack_param = ReceiveParam(ack);
    Track(ack, ucx_.tag_recv_nbx(worker(), &batch.ack_words.emplace_back(), sizeof(uint64_t),
                                 UcxTag(send.peer, Channel::kPullAck, send.tag), kExactTagMask, &ack_param));
  }
  Transfer& transfer = Begin(batch, Kind::kSend, send.peer, send.tag, size);
  ucp_request_param_t param = SendParam(transfer);
  if (channel == Channel::kData && !send.runs.empty()) {
    buffer = ScatterOver(batch, send.runs, param);
    size = send.runs.size();
  }
  Track(transfer, ucx_.tag_send_nbx(peers_[send.peer].ep, buffer, size, UcxTag(rank_, channel, send.tag), &param));
}

void UcxTransport::ServePulls(Batch& batch) {
  for (PendingPull& pull : batch.pulls) {
    const Transfer& received = *pull.descriptor_receive;
    if (pull.served || !received.done) continue;
    pull.served = true;
    // Anything else is the receive's own failure, which the verdict reports; no sender waits on an acknowledgement.
    if (received.status != UCS_OK || received.received != sizeof(PullDescriptor)) continue;
    const int peer = received.peer;
    const std::string transfer = "receive from " + RankName(peer) + " with tag " + std::to_string(received.tag);
    if (pull.descriptor->size != pull.size) {
      if (batch.mismatch_detail.empty()) {
        batch.mismatch_detail = transfer + ": the peer sent " + std::to_string(pull.descriptor->size) +
                                " bytes, expected " + std::to_string(pull.size);
      }
    } else {
      const std::vector<MemoryRun> whole{MemoryRun{pull.dst, pull.size}};
      const Status pulled =
          PullFrom(pull_sources_[peer], *pull.descriptor, pull.runs->empty() ? whole : *pull.runs, RankName(peer));
      if (!pulled.ok()) batch.failed_peers.emplace(peer, pulled.message() + " (" + transfer + ")");
    }
    if (peers_[peer].ep == nullptr) continue;
    Transfer& ack = Begin(batch, Kind::kSend, peer, received.tag, sizeof(uint64_t));
    ack.pull_ack = true;
    const ucp_request_param_t param = SendParam(ack);
    Track(ack, ucx_.tag_send_nbx(peers_[peer].ep, &batch.ack_words.emplace_back(), sizeof(uint64_t),
                                 UcxTag(rank_, Channel::kPullAck, received.tag), &param));
  }
}

Status UcxTransport::Progress(Batch& batch, Clock::time_point deadline) {
  Clock::time_point next_check = Clock::now() + kPeerCheckInterval;
  while (true) {
    ServePulls(batch);  // before the test: the descriptor that just arrived may be all that was in flight
    if (batch.in_flight == 0) break;
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
  if (ucx_.worker_progress(worker()) != 0) return;
  const Clock::time_point now = Clock::now();
  if (now >= deadline) return;
  if (ucx_.worker_arm(worker()) == UCS_ERR_BUSY) return;  // events arrived since the progress call
  WaitForEvents(worker_->event_fd(), -1, std::min(std::chrono::ceil<milliseconds>(deadline - now), kExchangeIdleWait));
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
  if (peer.ep != nullptr) worker_->CloseEndpoint(peer.ep, UCP_EP_CLOSE_FLAG_FORCE);
  peer.ep = nullptr;
}

// Receives are not tied to an endpoint: a failed peer's receives would wait forever unless cancelled.
void UcxTransport::CancelReceivesFrom(Batch& batch, int peer) {
  for (Transfer& transfer : batch.transfers) {
    // Cancelling may complete the request at once, through the callback that clears `request`.
    if (transfer.kind == Kind::kReceive && transfer.peer == peer && transfer.request != nullptr) {
      ucx_.request_cancel(worker(), transfer.request);
    }
  }
}

// A disconnected peer sends nothing more: receives that its earlier messages did not match at posting never will.
void UcxTransport::CancelReceivesFromDisconnected(Batch& batch) {
  for (Transfer& transfer : batch.transfers) {
    const Peer& peer = peers_[transfer.peer];
    if (transfer.kind == Kind::kReceive && !transfer.done && peer.ep == nullptr) {
      batch.failed_peers.emplace(peer.rank, "disconnected: " + peer.failure);
      if (transfer.request != nullptr) ucx_.request_cancel(worker(), transfer.request);
    }
  }
}

// After a timeout: cancels what is still in flight so that UCX lets go of the caller's buffers, and marks the peers
// concerned failed for good, as their late messages could match a later exchange's receives. A request UCX still
// holds after the grace could yet read or write its buffer, which the caller takes back when the exchange returns:
// then the transport halts, as only progress moves data (with peer error handling UCX uses no cross-memory attach,
// where a peer could write into this process itself).
void UcxTransport::Abandon(Batch& batch, milliseconds timeout) {
  std::map<int, std::pair<int, int>> pending;  // peer -> (receives, sends)
  for (const Transfer& transfer : batch.transfers) {
    if (transfer.done) continue;
    std::pair<int, int>& counts = pending[transfer.peer];
    // A pulled send's acknowledgement stands for the send, which the caller posted.
    ++(transfer.kind == Kind::kReceive && !transfer.pull_ack ? counts.first : counts.second);
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
  std::map<int, int> kept;  // peer -> requests UCX still holds
  for (Transfer& transfer : batch.transfers) {
    // No callback comes for a freed request: the batch, which callbacks write to, ends with this call.
    if (transfer.request != nullptr) {
      ucx_.request_free(transfer.request);
      Finish(&transfer, UCS_ERR_CANCELED, 0);
      ++kept[transfer.peer];
    }
  }
  if (kept.empty()) return;
  int requests = 0;
  std::string peers;
  for (const auto& [peer, count] : kept) {
    requests += count;
    peers += (peers.empty() ? "" : ", ") + RankName(peer);
  }
  const std::string what = "UCX kept " + std::to_string(requests) + (requests == 1 ? " request" : " requests") +
                           " to or from " + peers + " after cancelling " + (requests == 1 ? "it" : "them");
  batch.timeout_detail += "; " + what + ": the transport halts, so that nothing reaches the buffers given back";
  Halt(Code::kPeerFailed, "the UCX transport stopped after an exchange timed out: ", what.c_str());
}

void UcxTransport::ReapClosedEndpoints(Clock::time_point deadline) {
  while (worker_->FreeClosedEndpoints() && Clock::now() < deadline) ProgressOrWait(deadline);
}

Status UcxTransport::Exchange(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs,
                              milliseconds timeout) {
  ++exchanges_waiting_;
  std::lock_guard<std::mutex> lock(mutex_);
  --exchanges_waiting_;
  if (halted_.load()) return Status(halt_code_, halt_reason_);
  RETURN_IF_ERROR(Validate(sends, recvs));
  ConnectPartners(sends, recvs);
  for (const TransferSend& send : sends) {
    const Peer& peer = peers_[send.peer];
    if (peer.ep == nullptr) return PeerFailed(RankName(send.peer) + " disconnected: " + peer.failure);
  }
  timeout = std::clamp(timeout, milliseconds(0), kLongestTimeout);
  const Clock::time_point deadline = Clock::now() + timeout;
  Batch batch(ucx_);
  const size_t pulled_sends = std::count_if(sends.begin(), sends.end(),
                                            [&](const TransferSend& send) { return PulledBy(send.peer, send.size); });
  const size_t pulled_receives = std::count_if(
      recvs.begin(), recvs.end(), [&](const TransferRecv& recv) { return PullsFrom(recv.peer, recv.size); });
  // Each pulled transfer adds an acknowledgement, received by its sender and sent by its receiver.
  batch.transfers.reserve(sends.size() + recvs.size() + pulled_sends + pulled_receives);
  batch.descriptors.reserve(pulled_sends + pulled_receives);
  batch.pulls.reserve(pulled_receives);
  batch.check_words.reserve(pulled_sends);
  batch.ack_words.reserve(pulled_sends + pulled_receives);
  // Receives first, so that sends to this rank itself find them posted.
  for (const TransferRecv& recv : recvs) PostReceive(batch, recv);
  for (const TransferSend& send : sends) PostSend(batch, send);
  CancelReceivesFromDisconnected(batch);
  const Status peers = Progress(batch, deadline);
  if (batch.in_flight > 0) Abandon(batch, timeout);
  // A receiver still pulling a send this call gave up on must find its check word changed, not the old bytes.
  for (uint64_t& check : batch.check_words) static_cast<volatile uint64_t&>(check) = 0;
  ReapClosedEndpoints(Clock::now());
  return peers.ok() ? Verdict(batch) : peers;
}

}  // namespace ckpt::coll::ucx

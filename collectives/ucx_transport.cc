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
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "collectives/same_host_pull.h"
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

// The UCX tag carries the sender's rank and a channel above the caller's tag, so that equal tags from different
// peers, and a same-host pull's descriptor and acknowledgement, never match one another or the data.
constexpr int kChannelBits = 2;
constexpr int kRankShift = kTransferTagBits + kChannelBits;
constexpr int kRankBits = 64 - kRankShift;
constexpr int kMaxRanks = 1 << kRankBits;
constexpr uint64_t kExactTagMask = ~uint64_t{0};
enum class Channel : uint64_t { kData = 0, kPullDescriptor = 1, kPullAck = 2 };

// Transfers this large or larger between two processes of a host go by same-host pull (same_host_pull.h): below
// it, the descriptor and acknowledgement would cost more than the copy they save.
constexpr uint64_t kPullThreshold = 64 << 10;

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
  UcxTransport(const UcxApi& ucx, int rank, int world_size, milliseconds close_timeout, PullableProcess pullable)
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
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;
  ~UcxTransport() override;

  const char* name() const override { return "ucx"; }
  Status Exchange(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs,
                  milliseconds timeout) override;

  // Creates the context, the worker and its event fd, with `net_devices` as UCX's network devices (empty: all).
  Status Open(const std::string& net_devices);
  // What this rank contributes to the connection: how same-host peers pull from it, and its worker address.
  Result<std::string> ConnectionInfo() const;
  // Creates an endpoint to every rank from its ConnectionInfo, and finds the peers this rank can pull from.
  Status Connect(const std::vector<std::string>& infos);
  Status StartBackgroundProgress();
  // The peers this rank pulls from, as " 1 3" (PullableProcess::Probe succeeded on them).
  std::string PullSources() const;
  // Records which peers pull from this rank, from every rank's connection verdict.
  void LearnPullers(const std::vector<std::string>& verdicts);

 private:
  Status CheckTransfer(const char* direction, int peer, bool has_buffer, uint64_t size, uint64_t tag) const;
  Status Validate(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs) const;
  bool PullsFrom(int peer, uint64_t size) const { return size >= kPullThreshold && pull_sources_[peer] != 0; }
  bool PulledBy(int peer, uint64_t size) const { return size >= kPullThreshold && pullers_[peer]; }
  void PostReceive(Batch& batch, const TransferRecv& recv);
  void PostSend(Batch& batch, const TransferSend& send);
  // Pulls what arrived descriptors announce, and acknowledges each so that its sender may finish.
  void ServePulls(Batch& batch);
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
  PullableProcess pullable_;
  const bool pulling_allowed_;
  std::vector<pid_t> pull_sources_;  // by rank: the pid to pull from, 0 where this rank does not pull
  std::vector<bool> pullers_;        // by rank: whether it pulls what this rank sends it
  int wake_fd_ = -1;                 // wakes the background thread for shutdown

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

// The pull description, a newline (descriptions hold none), then the worker address's bytes.
Result<std::string> UcxTransport::ConnectionInfo() const {
  ucp_address_t* address = nullptr;
  size_t length = 0;
  const ucs_status_t status = ucx_.worker_get_address(worker_, &address, &length);
  if (status != UCS_OK) return UcxUnavailable(ucx_, "ucp_worker_get_address", status);
  std::string info = (pulling_allowed_ ? pullable_.description() : "") + "\n";
  info.append(reinterpret_cast<const char*>(address), length);
  ucx_.worker_release_address(worker_, address);
  return info;
}

Status UcxTransport::Connect(const std::vector<std::string>& infos) {
  pull_sources_.assign(peers_.size(), 0);
  pullers_.assign(peers_.size(), false);
  for (Peer& peer : peers_) {
    const std::string& info = infos[peer.rank];
    const size_t newline = info.find('\n');
    if (newline == std::string::npos || newline + 1 == info.size()) {
      return PeerFailed(RankName(peer.rank) + " sent a malformed UCX connection record (" +
                        std::to_string(info.size()) + " bytes)");
    }
    if (pulling_allowed_ && peer.rank != rank_) {
      pull_sources_[peer.rank] = pullable_.Probe(std::string_view(info).substr(0, newline));
    }
    ucp_ep_params_t params = {};
    params.field_mask =
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(info.data() + newline + 1);
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

std::string UcxTransport::PullSources() const {
  std::string sources;
  for (size_t r = 0; r < pull_sources_.size(); ++r) {
    if (pull_sources_[r] != 0) sources += " " + std::to_string(r);
  }
  return sources;
}

// Each verdict is "ok" followed by that rank's PullSources.
void UcxTransport::LearnPullers(const std::vector<std::string>& verdicts) {
  for (size_t r = 0; r < verdicts.size() && r < pullers_.size(); ++r) {
    std::istringstream sources(verdicts[r].substr(std::min<size_t>(2, verdicts[r].size())));
    long long source = 0;
    while (sources >> source) {
      if (source == rank_) pullers_[r] = true;
    }
  }
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
  Transfer& transfer = ucx::Begin(batch, Kind::kReceive, recv.peer, recv.tag, size);
  if (channel == Channel::kPullDescriptor) {
    batch.pulls.push_back(ucx::PendingPull{&transfer, &batch.descriptors.back(), recv.data, recv.size});
  }
  const ucp_request_param_t param = ucx::ReceiveParam(transfer);
  const uint64_t tag = UcxTag(recv.peer, channel, recv.tag);
  ucx::Track(transfer, ucx_.tag_recv_nbx(worker_, buffer, size, tag, kExactTagMask, &param));
}

// A pulled send announces where its bytes lie, and completes when the receiver acknowledges having read them.
void UcxTransport::PostSend(Batch& batch, const TransferSend& send) {
  const void* buffer = send.data;
  uint64_t size = send.size;
  Channel channel = Channel::kData;
  if (PulledBy(send.peer, send.size)) {
    uint64_t& check = batch.check_words.emplace_back(pullable_.NextCheckValue());
    batch.descriptors.push_back(
        PullDescriptor{reinterpret_cast<uintptr_t>(send.data), send.size, reinterpret_cast<uintptr_t>(&check), check});
    buffer = &batch.descriptors.back();
    size = sizeof(PullDescriptor);
    channel = Channel::kPullDescriptor;
    Transfer& ack = ucx::Begin(batch, Kind::kReceive, send.peer, send.tag, sizeof(uint64_t));
    ack.pull_ack = true;
    const ucp_request_param_t ack_param = ucx::ReceiveParam(ack);
    ucx::Track(ack, ucx_.tag_recv_nbx(worker_, &batch.ack_words.emplace_back(), sizeof(uint64_t),
                                      UcxTag(send.peer, Channel::kPullAck, send.tag), kExactTagMask, &ack_param));
  }
  Transfer& transfer = ucx::Begin(batch, Kind::kSend, send.peer, send.tag, size);
  const ucp_request_param_t param = ucx::SendParam(transfer);
  ucx::Track(transfer, ucx_.tag_send_nbx(peers_[send.peer].ep, buffer, size, UcxTag(rank_, channel, send.tag), &param));
}

void UcxTransport::ServePulls(Batch& batch) {
  for (ucx::PendingPull& pull : batch.pulls) {
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
      const Status pulled = PullFrom(pull_sources_[peer], *pull.descriptor, pull.dst, RankName(peer));
      if (!pulled.ok()) batch.failed_peers.emplace(peer, pulled.message() + " (" + transfer + ")");
    }
    if (peers_[peer].ep == nullptr) continue;
    Transfer& ack = ucx::Begin(batch, Kind::kSend, peer, received.tag, sizeof(uint64_t));
    ack.pull_ack = true;
    const ucp_request_param_t param = ucx::SendParam(ack);
    ucx::Track(ack, ucx_.tag_send_nbx(peers_[peer].ep, &batch.ack_words.emplace_back(), sizeof(uint64_t),
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

}  // namespace

Result<std::unique_ptr<Transport>> MakeUcxTransport(ControlPlane& control, const UcxTransportOptions& options) {
  if (control.world_size() > kMaxRanks) {
    return InvalidArgument("the UCX transport supports at most " + std::to_string(kMaxRanks) + " ranks, not " +
                           std::to_string(control.world_size()));
  }
  ASSIGN_OR_RETURN(const std::string net_devices, AgreeOnNetDevices(control, options.job_host));
  const Result<const UcxApi*> ucx = options.ucx != nullptr ? Result<const UcxApi*>(options.ucx) : LoadUcx();
  Result<PullableProcess> pullable = PullableProcess::Create();
  std::unique_ptr<UcxTransport> transport;
  Status opened = ucx.ok() ? pullable.status() : ucx.status();
  if (opened.ok()) {
    transport = std::make_unique<UcxTransport>(*ucx.value(), control.rank(), control.world_size(),
                                               options.close_timeout, std::move(pullable.value()));
    opened = transport->Open(net_devices);
  }
  Result<std::string> info = opened.ok() ? transport->ConnectionInfo() : Result<std::string>(opened);
  // An empty contribution tells the others that this rank has no worker.
  ASSIGN_OR_RETURN(std::vector<std::string> infos, control.AllGather(info.ok() ? info.value() : ""));
  if (!info.ok()) return info.status();
  const std::string unavailable = RanksThatSentNothing(infos);
  if (!unavailable.empty()) return Unsupported("UCX is unavailable on rank " + unavailable);
  Status connected = transport->Connect(infos);
  if (connected.ok()) connected = transport->StartBackgroundProgress();
  // The verdict carries the peers this rank pulls from: a sender announces instead of sending only to a puller.
  ASSIGN_OR_RETURN(std::vector<std::string> verdicts,
                   control.AllGather(connected.ok() ? "ok" + transport->PullSources() : ""));
  RETURN_IF_ERROR(connected);
  const std::string failed = RanksThatSentNothing(verdicts);
  if (!failed.empty()) return Unsupported("connecting UCX endpoints failed on rank " + failed);
  transport->LearnPullers(verdicts);
  return std::unique_ptr<Transport>(std::move(transport));
}

}  // namespace ckpt::coll

// The UCX transport's class (ucx_transport.h), shared by its two halves: the collective bring-up that connects every
// rank to every other (ucx_connect.cc) and the exchanges, with the failures of peers and the background progress
// between exchanges (ucx_transport.cc).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/transport/same_host_pull.h"
#include "collectives/transport/transport.h"
#include "collectives/transport/ucx_batch.h"
#include "collectives/transport/ucx_library.h"
#include "collectives/transport/ucx_worker.h"
#include "common/status.h"

namespace ckpt::coll::ucx {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The UCX tag carries the sender's rank and a channel above the caller's tag, so that equal tags from different
// peers, and a same-host pull's descriptor and acknowledgement, never match one another or the data.
inline constexpr int kChannelBits = 2;
inline constexpr int kRankShift = kTransferTagBits + kChannelBits;
inline constexpr int kRankBits = 64 - kRankShift;
inline constexpr int kMaxRanks = 1 << kRankBits;

// Transfers this large or larger between two processes of a host go by same-host pull (same_host_pull.h): below
// it, the descriptor and acknowledgement would cost more than the copy they save.
inline constexpr uint64_t kPullThreshold = 64 << 10;

struct Peer {
  int rank = 0;
  ucp_ep_h ep = nullptr;                 // null until the first exchange with the peer, and again once it failed
  ucs_status_t endpoint_error = UCS_OK;  // reported by UCX, not yet handled
  bool* errors_reported = nullptr;       // the transport's flag, so that it need not scan every peer
  std::string failure;                   // why the endpoint was closed or never made; empty until then
  // Transfers with this peer were abandoned: its late messages could match a later exchange's receives.
  bool abandoned = false;
};

// Between exchanges a background thread keeps the worker progressing: a peer may still need this rank's help to
// finish its side (acknowledgements, the rest of a TCP send buffer, connection setup) after this rank's own
// transfers completed, and the caller may then block elsewhere for long (in a control-plane collective).
class UcxTransport : public Transport {
 public:
  UcxTransport(const UcxApi& ucx, int rank, int world_size, milliseconds close_timeout, PullableProcess pullable);
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;
  ~UcxTransport() override;

  const char* name() const override { return "ucx"; }
  // UCX's iovec datatype, and process_vm_readv's iovecs for a same-host pull.
  bool Scatters() const override { return true; }
  Status Exchange(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs,
                  milliseconds timeout) override;

  // Bring-up (ucx_connect.cc).
  // Creates the context, the worker and its event fd, with `net_devices` as UCX's network devices (empty: all).
  Status Open(const std::string& net_devices);
  // What this rank contributes to the connection: how same-host peers pull from it, and its worker address.
  Result<std::string> ConnectionInfo() const;
  // Keeps every rank's worker address from its ConnectionInfo, finds the peers this rank can pull from, and makes
  // their endpoints.
  Status Connect(const std::vector<std::string>& infos);
  // The peers this rank pulls from, as " 1 3" (PullableProcess::Probe succeeded on them).
  std::string PullSources() const;
  // Records which peers pull from this rank, from every rank's connection verdict.
  void LearnPullers(const std::vector<std::string>& verdicts);
  // Starts the thread that progresses the worker between exchanges.
  Status StartBackgroundProgress();

 private:
  ucp_worker_h worker() const { return worker_->get(); }
  Status CheckTransfer(const char* direction, int peer, bool has_buffer, uint64_t size, uint64_t tag) const;
  Status Validate(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs) const;
  // Creates the endpoint to `peer` unless it has one or failed (ucx_connect.cc); fails a peer whose endpoint UCX
  // refuses.
  void ConnectTo(Peer& peer);
  // Creates the endpoints this exchange needs and lacks.
  void ConnectPartners(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs);
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
  // Ends every use of the worker for good: later exchanges fail with `code` and `prefix` + `what`, and neither the
  // progress thread nor the destructor progresses the worker again. The first call wins. The reason goes to a fixed
  // buffer, as the progress thread halts while handling an exception, where an allocation could throw again.
  void Halt(Code code, const char* prefix, const char* what) noexcept;
  void HandleEndpointErrors(Batch* batch);
  void FailPeer(int peer, const std::string& reason);
  void CancelReceivesFrom(Batch& batch, int peer);
  void CancelReceivesFromDisconnected(Batch& batch);
  void Abandon(Batch& batch, milliseconds timeout);
  void ReapClosedEndpoints(Clock::time_point deadline);

  const UcxApi& ucx_;
  const int rank_;
  std::vector<Peer> peers_;  // by rank; sized once, as endpoints hold pointers to them
  const milliseconds close_timeout_;
  std::unique_ptr<UcxWorker> worker_;  // from Open
  PullableProcess pullable_;
  const bool pulling_allowed_;
  std::vector<std::string> addresses_;  // by rank: its worker address, connected to at the first exchange with it
  std::vector<pid_t> pull_sources_;     // by rank: the pid to pull from, 0 where this rank does not pull
  std::vector<bool> pullers_;           // by rank: whether it pulls what this rank sends it
  int wake_fd_ = -1;                    // wakes the background thread for shutdown

  std::atomic<int> exchanges_waiting_{0};  // keeps the background thread from re-taking mutex_ before them
  std::mutex mutex_;                       // serialises every use of the worker and of the members below
  bool errors_reported_ = false;
  bool stopping_ = false;
  std::thread progress_thread_;
  // Why the transport halted (Halt), written once by the call that set halting_, before it sets halted_.
  std::atomic<bool> halting_{false};
  std::atomic<bool> halted_{false};
  Code halt_code_ = Code::kOk;
  char halt_reason_[384] = {};
};

// The endpoints' error handler: records `status` on the Peer that `arg` points to, for HandleEndpointErrors.
void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);

}  // namespace ckpt::coll::ucx

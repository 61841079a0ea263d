#include "collectives/transport/nccl_transport.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "collectives/transport/nccl_library.h"
#include "common/bytes.h"
#include "gpu/cuda_runtime.h"

namespace ckpt::coll {
namespace {

using Clock = std::chrono::steady_clock;

// False while an operation is in progress on `comm`, true once none is; NCCL's error as a Status otherwise.
Result<bool> NcclIdle(const NcclApi& nccl, NcclComm comm, const char* what) {
  int state = kNcclSuccess;
  const int result = nccl.CommGetAsyncError(comm, &state);
  if (result != kNcclSuccess) state = result;
  if (state == kNcclInProgress) return false;
  if (state != kNcclSuccess) return Status(NcclErrorCode(state), NcclErrorText(nccl, what, state, comm));
  return true;
}

// Polls `done` with a growing pause until it reports completion, an error, or the deadline passes (kTimeout).
template <typename Poll>
Status PollUntil(Clock::time_point deadline, const std::string& what, Poll done) {
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    ASSIGN_OR_RETURN(bool finished, done());
    if (finished) return Status::Ok();
    if (Clock::now() >= deadline) return Timeout(what);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

std::string Milliseconds(std::chrono::milliseconds timeout) { return std::to_string(timeout.count()) + " ms"; }

std::string PeerList(const std::vector<int>& peers) {
  std::string text;
  for (int peer : peers) text += (text.empty() ? "" : ", ") + std::to_string(peer);
  return "[" + text + "]";
}

// One pair's transfers, as indices into the caller's vectors in issue order.
struct PairPlan {
  int peer;
  std::vector<size_t> sends;
  std::vector<size_t> recvs;
};

template <typename Transfer>
std::vector<size_t> SortedByPeerAndTag(const std::vector<Transfer>& transfers) {
  std::vector<size_t> order(transfers.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::make_pair(transfers[a].peer, transfers[a].tag) < std::make_pair(transfers[b].peer, transfers[b].tag);
  });
  return order;
}

// Groups the ordered transfers by peer; pairs come out sorted by peer.
std::vector<PairPlan> PlanPairs(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs) {
  std::vector<PairPlan> pairs;
  auto pair_of = [&pairs](int peer) -> PairPlan& {
    auto it = std::lower_bound(pairs.begin(), pairs.end(), peer,
                               [](const PairPlan& pair, int value) { return pair.peer < value; });
    if (it == pairs.end() || it->peer != peer) it = pairs.insert(it, PairPlan{peer, {}, {}});
    return *it;
  };
  for (size_t index : nccl_protocol::IssueOrder(sends)) pair_of(sends[index].peer).sends.push_back(index);
  for (size_t index : nccl_protocol::IssueOrder(recvs)) pair_of(recvs[index].peer).recvs.push_back(index);
  return pairs;
}

template <typename Transfer>
std::vector<nccl_protocol::TransferShape> ShapesOf(const std::vector<Transfer>& transfers,
                                                   const std::vector<size_t>& order) {
  std::vector<nccl_protocol::TransferShape> shapes;
  shapes.reserve(order.size());
  for (size_t index : order) shapes.push_back({transfers[index].tag, transfers[index].size});
  return shapes;
}

// The one-direction half of CheckPairAgrees.
Status CheckDirection(int peer, const char* here, const char* there,
                      const std::vector<nccl_protocol::TransferShape>& mine,
                      const std::vector<nccl_protocol::TransferShape>& theirs) {
  const std::string prefix = "NCCL exchange with peer " + std::to_string(peer) + ": ";
  for (size_t i = 0; i < std::min(mine.size(), theirs.size()); ++i) {
    if (mine[i] == theirs[i]) continue;
    return Mismatch(prefix + "this rank " + here + " tag " + std::to_string(mine[i].tag) + " of " +
                    std::to_string(mine[i].size) + " bytes where the peer " + there + " tag " +
                    std::to_string(theirs[i].tag) + " of " + std::to_string(theirs[i].size) + " bytes");
  }
  if (mine.size() != theirs.size()) {
    const auto& longer = mine.size() > theirs.size() ? mine : theirs;
    return Mismatch(prefix + "this rank " + here + " " + std::to_string(mine.size()) + " transfers where the peer " +
                    there + " " + std::to_string(theirs.size()) + "; tag " +
                    std::to_string(longer[std::min(mine.size(), theirs.size())].tag) + " has no counterpart");
  }
  return Status::Ok();
}

// Caps what a peer may declare, so a corrupt declaration cannot make this rank allocate without bound.
constexpr uint64_t kMaxDeclaredTransfers = uint64_t{1} << 24;
constexpr uint64_t kShapeBytes = 2 * sizeof(uint64_t);
constexpr uint64_t kMinScratchBytes = 64 << 10;

// One ncclSend (data is read) or ncclRecv (data is written) of a group.
struct PointToPoint {
  bool send;
  int peer;
  void* data;
  uint64_t size;
};

class NcclTransport : public Transport {
 public:
  NcclTransport(const NcclApi& nccl, const gpu::CudaRuntime& cuda, gpu::ScopedCudaStream stream, NcclComm comm,
                int rank, int world_size, std::chrono::milliseconds teardown_timeout)
      : nccl_(nccl),
        cuda_(cuda),
        stream_(std::move(stream)),
        comm_(comm),
        rank_(rank),
        world_size_(world_size),
        teardown_timeout_(teardown_timeout) {}
  ~NcclTransport() override;

  const char* name() const override { return "nccl"; }
  Status Exchange(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs,
                  std::chrono::milliseconds timeout) override;

 private:
  Status Validate(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs) const;
  Status ValidateOne(const char* kind, size_t index, int peer, const void* data, uint64_t size, uint64_t tag) const;
  // Swaps (tag, size) declarations with every pair; returns the pairs that agree, and in *mismatch the first
  // disagreement.
  Result<std::vector<PairPlan>> AgreeWithPeers(const std::vector<PairPlan>& pairs,
                                               const std::vector<TransferSend>& sends,
                                               const std::vector<TransferRecv>& recvs, Status* mismatch);
  // Sends outgoing[i] to the i-th peer of the exchange and receives incoming_sizes[i] bytes from it, staged
  // through device scratch memory (NCCL moves device memory only).
  Result<std::vector<std::string>> SwapWithPeers(const std::vector<std::string>& outgoing,
                                                 const std::vector<uint64_t>& incoming_sizes);
  Status MoveData(const std::vector<PairPlan>& pairs, const std::vector<TransferSend>& sends,
                  const std::vector<TransferRecv>& recvs);
  Status EnsureScratch(uint64_t bytes);
  // Issues `ops` as one NCCL group on the stream and waits until the stream has drained.
  Status RunGroup(const std::vector<PointToPoint>& ops);
  // Waits until NCCL has queued all its work on the stream and the stream has drained; kTimeout at the deadline.
  Status AwaitStream();
  // True once no NCCL operation is in progress on the communicator; an asynchronous error is kPeerFailed.
  Result<bool> CommunicatorIdle();
  // Aborts the communicator after a failure or a stall; the transport stays failed with `failure` as the reason.
  Status Fail(Status failure);

  const NcclApi& nccl_;
  const gpu::CudaRuntime& cuda_;
  gpu::ScopedCudaStream stream_;
  std::mutex mutex_;
  NcclComm comm_;
  std::string failure_;
  int rank_;
  int world_size_;
  std::chrono::milliseconds teardown_timeout_;
  // The exchange in progress: its peers, timeout and deadline, for the waits and their messages.
  std::vector<int> peers_;
  std::chrono::milliseconds timeout_{0};
  Clock::time_point deadline_;
  void* scratch_ = nullptr;
  uint64_t scratch_bytes_ = 0;
};

NcclTransport::~NcclTransport() {
  std::lock_guard<std::mutex> lock(mutex_);
  gpu::ScopedCudaDevice on_device(cuda_, stream_.device());
  if (comm_ != nullptr) {
    // Finalize flushes outstanding work and lets peers finish with this rank; a stalled teardown is aborted.
    const int result = nccl_.CommFinalize(comm_);
    const bool finalized =
        (result == kNcclSuccess || result == kNcclInProgress) &&
        PollUntil(Clock::now() + teardown_timeout_, "finalize", [this] { return CommunicatorIdle(); }).ok();
    if (finalized) {
      nccl_.CommDestroy(comm_);
    } else {
      nccl_.CommAbort(comm_);
    }
  }
  (void)cuda_.Synchronize(stream_.get());
  if (scratch_ != nullptr) (void)cuda_.Free(scratch_);
}

Status NcclTransport::ValidateOne(const char* kind, size_t index, int peer, const void* data, uint64_t size,
                                  uint64_t tag) const {
  const std::string what = std::string("NCCL exchange: ") + kind + " #" + std::to_string(index) + " (peer " +
                           std::to_string(peer) + ", tag " + std::to_string(tag) + "): ";
  if (peer < 0 || peer >= world_size_) {
    return InvalidArgument(what + "peer is out of range for world size " + std::to_string(world_size_));
  }
  if (tag > kMaxTransferTag) {
    return InvalidArgument(what + "tag exceeds the maximum of " + std::to_string(kMaxTransferTag));
  }
  if (size == 0) return Status::Ok();
  if (data == nullptr) return InvalidArgument(what + "null buffer for " + std::to_string(size) + " bytes");
  if (!cuda_.IsDevicePointer(data)) {
    return InvalidArgument(what + "buffer is not CUDA device memory (NCCL moves device memory only)");
  }
  return Status::Ok();
}

Status NcclTransport::Validate(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs) const {
  for (size_t i = 0; i < sends.size(); ++i) {
    RETURN_IF_ERROR(ValidateOne("send", i, sends[i].peer, sends[i].data, sends[i].size, sends[i].tag));
    if (!sends[i].runs.empty()) {
      return InvalidArgument("send " + std::to_string(i) + " is scattered, which NCCL cannot send");
    }
  }
  for (size_t i = 0; i < recvs.size(); ++i) {
    RETURN_IF_ERROR(ValidateOne("receive", i, recvs[i].peer, recvs[i].data, recvs[i].size, recvs[i].tag));
    if (!recvs[i].runs.empty()) {
      return InvalidArgument("receive " + std::to_string(i) + " is scattered, which NCCL cannot receive");
    }
  }
  return Status::Ok();
}

Status NcclTransport::Exchange(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs,
                               std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (comm_ == nullptr) {
    return PeerFailed("NCCL transport on rank " + std::to_string(rank_) +
                      " was aborted by an earlier failure: " + failure_);
  }
  RETURN_IF_ERROR(Validate(sends, recvs));
  const std::vector<PairPlan> pairs = PlanPairs(sends, recvs);
  if (pairs.empty()) return Status::Ok();
  peers_.clear();
  for (const PairPlan& pair : pairs) peers_.push_back(pair.peer);
  timeout_ = timeout;
  deadline_ = Clock::now() + timeout;

  gpu::ScopedCudaDevice on_device(cuda_, stream_.device());
  RETURN_IF_ERROR(on_device.status());
  Status mismatch;
  ASSIGN_OR_RETURN(std::vector<PairPlan> agreed, AgreeWithPeers(pairs, sends, recvs, &mismatch));
  RETURN_IF_ERROR(MoveData(agreed, sends, recvs));
  return mismatch;
}

Result<std::vector<PairPlan>> NcclTransport::AgreeWithPeers(const std::vector<PairPlan>& pairs,
                                                            const std::vector<TransferSend>& sends,
                                                            const std::vector<TransferRecv>& recvs, Status* mismatch) {
  // First the counts, so each side knows how long the other's declaration is; then the declarations.
  std::vector<std::string> counts(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    ByteWriter writer;
    writer.U64(pairs[i].sends.size());
    writer.U64(pairs[i].recvs.size());
    counts[i] = writer.Take();
  }
  ASSIGN_OR_RETURN(std::vector<std::string> their_counts,
                   SwapWithPeers(counts, std::vector<uint64_t>(pairs.size(), 2 * sizeof(uint64_t))));

  std::vector<std::string> declarations(pairs.size());
  std::vector<uint64_t> declaration_sizes(pairs.size());
  std::vector<std::pair<uint64_t, uint64_t>> their_totals(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    ByteReader reader(their_counts[i], "NCCL transfer counts from peer " + std::to_string(peers_[i]));
    RETURN_IF_ERROR(reader.U64(&their_totals[i].first));
    RETURN_IF_ERROR(reader.U64(&their_totals[i].second));
    if (their_totals[i].first > kMaxDeclaredTransfers || their_totals[i].second > kMaxDeclaredTransfers) {
      return Fail(Corrupt("NCCL exchange: peer " + std::to_string(peers_[i]) + " declares more than " +
                          std::to_string(kMaxDeclaredTransfers) + " transfers"));
    }
    declaration_sizes[i] = (their_totals[i].first + their_totals[i].second) * kShapeBytes;
    ByteWriter writer;
    for (const auto& shapes : {ShapesOf(sends, pairs[i].sends), ShapesOf(recvs, pairs[i].recvs)}) {
      for (const auto& shape : shapes) {
        writer.U64(shape.tag);
        writer.U64(shape.size);
      }
    }
    declarations[i] = writer.Take();
  }
  ASSIGN_OR_RETURN(std::vector<std::string> theirs, SwapWithPeers(declarations, declaration_sizes));

  std::vector<PairPlan> agreed;
  for (size_t i = 0; i < pairs.size(); ++i) {
    ByteReader reader(theirs[i], "NCCL transfer declaration from peer " + std::to_string(peers_[i]));
    std::vector<nccl_protocol::TransferShape> sent_there(their_totals[i].first);
    std::vector<nccl_protocol::TransferShape> received_there(their_totals[i].second);
    for (auto* list : {&sent_there, &received_there}) {
      for (auto& shape : *list) {
        RETURN_IF_ERROR(reader.U64(&shape.tag));
        RETURN_IF_ERROR(reader.U64(&shape.size));
      }
    }
    Status verdict = nccl_protocol::CheckPairAgrees(peers_[i], ShapesOf(sends, pairs[i].sends), received_there,
                                                    ShapesOf(recvs, pairs[i].recvs), sent_there);
    if (verdict.ok()) {
      agreed.push_back(pairs[i]);
    } else if (mismatch->ok()) {
      *mismatch = std::move(verdict);
    }
  }
  return agreed;
}

Status NcclTransport::EnsureScratch(uint64_t bytes) {
  if (bytes <= scratch_bytes_) return Status::Ok();
  uint64_t capacity = std::max(scratch_bytes_, kMinScratchBytes);
  while (capacity < bytes) capacity *= 2;
  if (scratch_ != nullptr) RETURN_IF_ERROR(cuda_.Free(scratch_));
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  ASSIGN_OR_RETURN(scratch_, cuda_.Malloc(stream_.device(), capacity));
  scratch_bytes_ = capacity;
  return Status::Ok();
}

Result<std::vector<std::string>> NcclTransport::SwapWithPeers(const std::vector<std::string>& outgoing,
                                                              const std::vector<uint64_t>& incoming_sizes) {
  std::string staged_out;
  for (const std::string& bytes : outgoing) staged_out += bytes;
  uint64_t incoming_total = 0;
  for (uint64_t size : incoming_sizes) incoming_total += size;
  RETURN_IF_ERROR(EnsureScratch(staged_out.size() + incoming_total));
  char* out_area = static_cast<char*>(scratch_);
  char* in_area = out_area + staged_out.size();
  if (!staged_out.empty()) {
    Status copied = cuda_.CopyHostToDeviceAsync(out_area, staged_out.data(), staged_out.size(), stream_.get());
    if (!copied.ok()) return Fail(copied);
  }
  std::vector<PointToPoint> ops;
  for (size_t i = 0, out_offset = 0, in_offset = 0; i < peers_.size(); ++i) {
    ops.push_back({true, peers_[i], out_area + out_offset, outgoing[i].size()});
    ops.push_back({false, peers_[i], in_area + in_offset, incoming_sizes[i]});
    out_offset += outgoing[i].size();
    in_offset += incoming_sizes[i];
  }
  RETURN_IF_ERROR(RunGroup(ops));

  std::string staged_in(incoming_total, '\0');
  if (incoming_total > 0) {
    Status copied = cuda_.CopyDeviceToHostAsync(staged_in.data(), in_area, incoming_total, stream_.get());
    if (!copied.ok()) return Fail(copied);
    RETURN_IF_ERROR(AwaitStream());
  }
  std::vector<std::string> incoming(peers_.size());
  for (size_t i = 0, in_offset = 0; i < peers_.size(); ++i) {
    incoming[i] = staged_in.substr(in_offset, incoming_sizes[i]);
    in_offset += incoming_sizes[i];
  }
  return incoming;
}

Status NcclTransport::MoveData(const std::vector<PairPlan>& pairs, const std::vector<TransferSend>& sends,
                               const std::vector<TransferRecv>& recvs) {
  std::vector<PointToPoint> ops;
  for (const PairPlan& pair : pairs) {
    for (size_t index : pair.sends) {
      ops.push_back({true, pair.peer, const_cast<void*>(sends[index].data), sends[index].size});
    }
    for (size_t index : pair.recvs) ops.push_back({false, pair.peer, recvs[index].data, recvs[index].size});
  }
  return RunGroup(ops);
}

Status NcclTransport::RunGroup(const std::vector<PointToPoint>& ops) {
  if (ops.empty()) return Status::Ok();
  int first_error = nccl_.GroupStart();
  if (first_error != kNcclSuccess) {
    return Fail(Status(NcclErrorCode(first_error), NcclErrorText(nccl_, "ncclGroupStart", first_error, comm_)));
  }
  // Empty transfers are skipped on both sides alike: their sizes were agreed beforehand.
  for (const PointToPoint& op : ops) {
    if (op.size == 0 || first_error != kNcclSuccess) continue;
    first_error = op.send ? nccl_.Send(op.data, op.size, kNcclChar, op.peer, comm_, stream_.get())
                          : nccl_.Recv(op.data, op.size, kNcclChar, op.peer, comm_, stream_.get());
  }
  // The group is closed even when a call inside it failed, or NCCL's group state stays open on this thread.
  const int ended = nccl_.GroupEnd();
  if (first_error != kNcclSuccess) {
    return Fail(Status(NcclErrorCode(first_error), NcclErrorText(nccl_, "ncclSend/ncclRecv", first_error, comm_)));
  }
  if (ended != kNcclSuccess && ended != kNcclInProgress) {
    return Fail(Status(NcclErrorCode(ended), NcclErrorText(nccl_, "ncclGroupEnd", ended, comm_)));
  }
  return AwaitStream();
}

Result<bool> NcclTransport::CommunicatorIdle() {
  Result<bool> idle = NcclIdle(nccl_, comm_, "NCCL communicator");
  return idle.ok() ? idle : Result<bool>(PeerFailed(idle.status().message()));
}

Status NcclTransport::AwaitStream() {
  // A non-blocking communicator may still be queuing a group: the stream is polled only once it has finished.
  Status waited = PollUntil(deadline_, "the transfers to complete", [this]() -> Result<bool> {
    RETURN_IF_ERROR(CheckPeers());
    ASSIGN_OR_RETURN(bool idle, CommunicatorIdle());
    if (!idle) return false;
    return cuda_.StreamIdle(stream_.get());
  });
  return waited.ok() ? waited : Fail(waited);
}

Status NcclTransport::Fail(Status failure) {
  if (failure.code() == Code::kTimeout) {
    failure = Timeout("NCCL exchange on rank " + std::to_string(rank_) + " with peers " + PeerList(peers_) +
                      " did not complete within " + Milliseconds(timeout_) + "; the communicator was aborted");
  }
  if (comm_ != nullptr) {
    nccl_.CommAbort(comm_);
    comm_ = nullptr;
    // Abort stops NCCL's kernels, so the stream drains and no buffer is touched after Exchange returns.
    (void)cuda_.Synchronize(stream_.get());
  }
  failure_ = failure.message();
  return failure;
}

// This rank's readiness: NCCL and CUDA loaded and a stream on the device.
struct LocalSetup {
  const NcclApi* nccl = nullptr;
  const gpu::CudaRuntime* cuda = nullptr;
  gpu::ScopedCudaStream stream;
};

Result<LocalSetup> PrepareLocally(int device) {
  LocalSetup setup;
  ASSIGN_OR_RETURN(setup.nccl, LoadNccl());
  Result<gpu::CudaRuntime*> cuda = gpu::CudaRuntime::Get();
  if (!cuda.ok()) return cuda.status();
  setup.cuda = *cuda;
  ASSIGN_OR_RETURN(int devices, setup.cuda->DeviceCount());
  if (device < 0 || device >= devices) {
    return Unsupported("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(devices) +
                       " visible)");
  }
  ASSIGN_OR_RETURN(setup.stream, gpu::ScopedCudaStream::Create(*setup.cuda, device));
  return setup;
}

// A rank's contribution to the setup allgather: ready (with the unique id on rank 0) or the reason it is not.
std::string EncodeReadiness(const Result<LocalSetup>& setup, const std::string& unique_id) {
  ByteWriter writer;
  writer.U8(setup.ok() ? 1 : 0);
  writer.Bytes(setup.ok() ? unique_id : setup.status().message());
  return writer.Take();
}

// The unique id from rank 0, or kUnsupported naming every rank that is not ready.
Result<NcclUniqueId> AgreeOnSetup(const std::vector<std::string>& contributions) {
  std::string unready;
  std::string rank0_id;
  for (size_t rank = 0; rank < contributions.size(); ++rank) {
    ByteReader reader(contributions[rank], "NCCL setup from rank " + std::to_string(rank));
    uint8_t ready = 0;
    std::string payload;
    RETURN_IF_ERROR(reader.U8(&ready));
    RETURN_IF_ERROR(reader.Bytes(&payload));
    RETURN_IF_ERROR(reader.ExpectDone());
    if (!ready) unready += (unready.empty() ? "" : "; ") + ("rank " + std::to_string(rank) + ": " + payload);
    if (rank == 0) rank0_id = payload;
  }
  if (!unready.empty()) return Unsupported("NCCL transport unavailable (" + unready + ")");
  NcclUniqueId id;
  if (rank0_id.size() != sizeof(id.internal)) {
    return Corrupt("NCCL unique id from rank 0 has " + std::to_string(rank0_id.size()) + " bytes, not " +
                   std::to_string(sizeof(id.internal)));
  }
  std::copy(rank0_id.begin(), rank0_id.end(), id.internal);
  return id;
}

Result<NcclComm> CreateCommunicator(const LocalSetup& setup, const NcclUniqueId& id, int rank, int world_size,
                                    std::chrono::milliseconds timeout) {
  const NcclApi& nccl = *setup.nccl;
  gpu::ScopedCudaDevice on_device(*setup.cuda, setup.stream.device());
  RETURN_IF_ERROR(on_device.status());
  NcclConfig config{sizeof(NcclConfig), kNcclConfigMagic, kNcclConfigVersion, /*blocking=*/0};
  NcclComm comm = nullptr;
  const int started = nccl.CommInitRankConfig(&comm, world_size, id, rank, &config);
  const std::string where = "NCCL communicator of " + std::to_string(world_size) + " ranks on rank " +
                            std::to_string(rank) + ", device " + std::to_string(setup.stream.device());
  Status status;
  if (started != kNcclSuccess && started != kNcclInProgress) {
    status = Status(NcclErrorCode(started), NcclErrorText(nccl, "ncclCommInitRankConfig", started, comm));
  } else {
    status = PollUntil(Clock::now() + timeout, "setup", [&] { return NcclIdle(nccl, comm, "ncclCommInitRankConfig"); });
  }
  if (status.ok()) return comm;
  if (comm != nullptr) nccl.CommAbort(comm);
  if (status.code() == Code::kTimeout) {
    return Timeout(where + " was not set up within " + Milliseconds(timeout) + "; it was aborted");
  }
  return status.WithContext(where);
}

}  // namespace

namespace nccl_protocol {

std::vector<size_t> IssueOrder(const std::vector<TransferSend>& transfers) { return SortedByPeerAndTag(transfers); }
std::vector<size_t> IssueOrder(const std::vector<TransferRecv>& transfers) { return SortedByPeerAndTag(transfers); }

Status CheckPairAgrees(int peer, const std::vector<TransferShape>& sent_here,
                       const std::vector<TransferShape>& received_there,
                       const std::vector<TransferShape>& received_here, const std::vector<TransferShape>& sent_there) {
  RETURN_IF_ERROR(CheckDirection(peer, "sends", "receives", sent_here, received_there));
  return CheckDirection(peer, "receives", "sends", received_here, sent_there);
}

}  // namespace nccl_protocol

Status NcclUsable() {
  RETURN_IF_ERROR(LoadNccl().status());
  return gpu::CudaRuntime::Get().status();
}

Result<std::unique_ptr<Transport>> MakeNcclTransport(ControlPlane& control, int device,
                                                     std::chrono::milliseconds timeout) {
  Result<LocalSetup> setup = PrepareLocally(device);
  std::string unique_id;
  if (setup.ok() && control.rank() == 0) {
    NcclUniqueId id;
    const int result = setup->nccl->GetUniqueId(&id);
    if (result != kNcclSuccess) {
      setup = Status(Code::kUnsupported, NcclErrorText(*setup->nccl, "ncclGetUniqueId", result, nullptr));
    } else {
      unique_id.assign(id.internal, sizeof(id.internal));
    }
  }
  ASSIGN_OR_RETURN(std::vector<std::string> contributions, control.AllGather(EncodeReadiness(setup, unique_id)));
  if (contributions.size() != static_cast<size_t>(control.world_size())) {
    return Internal("NCCL setup gathered " + std::to_string(contributions.size()) + " contributions for " +
                    std::to_string(control.world_size()) + " ranks");
  }
  ASSIGN_OR_RETURN(NcclUniqueId id, AgreeOnSetup(contributions));
  if (!setup.ok()) return setup.status();
  ASSIGN_OR_RETURN(NcclComm comm, CreateCommunicator(*setup, id, control.rank(), control.world_size(), timeout));
  return std::unique_ptr<Transport>(new NcclTransport(*setup->nccl, *setup->cuda, std::move(setup->stream), comm,
                                                      control.rank(), control.world_size(), timeout));
}

}  // namespace ckpt::coll

// The data plane: moves tensor bytes between ranks during a load. Implementations are small and named: UCX for host
// memory (collectives/transport/ucx_transport.h), NCCL for device memory.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"

namespace ckpt::coll {

// Callers' tags must fit in this many low bits; transports may use the bits above for their own routing.
inline constexpr int kTransferTagBits = 46;
inline constexpr uint64_t kMaxTransferTag = (uint64_t{1} << kTransferTagBits) - 1;

// A stretch of memory that part of a message lies in, or lands in.
struct MemoryRun {
  void* data;
  uint64_t size;
};

// Sends and receives name their memory at `data`, or scattered over `runs`: the message's bytes in order across the
// runs, whose sizes add up to `size` (`data` is then the first run's), as a region of a wider tensor lies in its
// buffer. Runs are given only to a transport that Scatters.
struct TransferSend {
  int peer;
  const void* data;
  uint64_t size;
  uint64_t tag;
  std::vector<MemoryRun> runs = {};  // read only
};

struct TransferRecv {
  int peer;
  void* data;
  uint64_t size;
  uint64_t tag;
  std::vector<MemoryRun> runs = {};
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;  // "ucx", "nccl"
  // Whether sends and receives may lie scattered over runs of memory (TransferSend::runs, TransferRecv::runs).
  virtual bool Scatters() const { return false; }

  // Collective among the ranks that appear in it as peers; sends and receives are matched by (peer, tag), and
  // several transfers with the same (peer, tag) match in posting order. Posts every receive and send, then
  // progresses until all complete. A peer that dies or stalls fails the call with kPeerFailed / kTimeout naming it
  // (never a hang); a size mismatch is kMismatch naming peer and tag; a tag above kMaxTransferTag or a peer out of
  // range is kInvalidArgument. When the call returns, the transport no longer touches any buffer it was given; one
  // that cannot be sure of that after a failure (its library kept a request it cancelled) fails every later call.
  virtual Status Exchange(const std::vector<TransferSend>& sends, const std::vector<TransferRecv>& recvs,
                          std::chrono::milliseconds timeout) = 0;

  // Consulted every so often while an exchange waits (typically ControlPlane::CheckPeers): a failure, such as a
  // peer the control plane knows is dead, ends the exchange at once with that status instead of at its timeout.
  void SetPeerCheck(std::function<Status()> check) { peer_check_ = std::move(check); }

 protected:
  // How often a waiting exchange consults the peer check.
  static constexpr std::chrono::milliseconds kPeerCheckInterval{200};
  Status CheckPeers() const { return peer_check_ ? peer_check_() : Status::Ok(); }

 private:
  std::function<Status()> peer_check_;
};

}  // namespace ckpt::coll

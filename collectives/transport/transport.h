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

struct TransferSend {
  int peer;
  const void* data;
  uint64_t size;
  uint64_t tag;
};

struct TransferRecv {
  int peer;
  void* data;
  uint64_t size;
  uint64_t tag;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;  // "ucx", "nccl"

  // Collective among the ranks that appear in it as peers; sends and receives are matched by (peer, tag), and
  // several transfers with the same (peer, tag) match in posting order. Posts every receive and send, then
  // progresses until all complete. A peer that dies or stalls fails the call with kPeerFailed / kTimeout naming it
  // (never a hang); a size mismatch is kMismatch naming peer and tag; a tag above kMaxTransferTag or a peer out of
  // range is kInvalidArgument. When the call returns, the transport no longer touches any buffer it was given.
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

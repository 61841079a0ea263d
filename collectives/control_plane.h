// The control plane: small collective messages among the ranks (plans, reports, verdicts). Every call is
// collective, in the same order on every rank, and fails within the timeout when a rank dies or stalls, with a
// message naming the ranks concerned.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ckpt::coll {

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Every rank contributes `mine` (any size, may differ per rank); returns every rank's contribution by rank.
  virtual Result<std::vector<std::string>> AllGather(std::string_view mine) = 0;
  // How long AllGather waits for the other ranks; max() where the control plane cannot bound a wait (a user's
  // callback).
  virtual std::chrono::milliseconds timeout() const { return std::chrono::milliseconds::max(); }
  // AllGather, waiting at most `timeout` (where shorter than the control plane's own) for the other ranks; a rank
  // that arrives after it has passed gets the same failure. Control planes that cannot bound a wait wait as
  // AllGather does.
  virtual Result<std::vector<std::string>> AllGatherWithin(std::string_view mine, std::chrono::milliseconds timeout) {
    (void)timeout;
    return AllGather(mine);
  }

  Status Barrier();

  // Not collective: kPeerFailed naming the ranks that died, as far as the control plane knows. Lets a long wait
  // elsewhere (a data exchange) stop as soon as a peer is gone rather than at its timeout.
  virtual Status CheckPeers() { return Status::Ok(); }
};

// A user-supplied allgather of equal-sized blocks (ckpt_allgather_fn). Returns 0 on success.
using AllGatherCallback = std::function<int32_t(const void* send, uint64_t size, void* recv)>;

// A control plane over the user's callback: sizes are gathered first, then the blocks padded to the largest.
std::unique_ptr<ControlPlane> MakeCallbackControlPlane(int rank, int world_size, AllGatherCallback allgather);

}  // namespace ckpt::coll

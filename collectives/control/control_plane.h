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

// The bytes this rank's collectives have moved so far, as the control plane carries them: what it sent and what
// it received (for the TCP store, the frames' payloads to and from rank 0's server).
struct ControlPlaneCounters {
  uint64_t sent = 0;
  uint64_t received = 0;
  uint64_t collectives = 0;  // collectives run
};

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

  // Every rank sends outgoing[r] to rank r (outgoing.size() == world size; messages may be empty and of any size);
  // returns what each rank sent to this one, by rank. Waits at most `within` where that is shorter than the control
  // plane's own timeout, as AllGatherWithin does. The base version gathers every message everywhere; control planes
  // that can route override it, so that each rank moves only its own messages.
  virtual Result<std::vector<std::string>> AllToAllV(std::vector<std::string> outgoing,
                                                     std::chrono::milliseconds within);
  // Rank 0's `from_root` on every rank (what other ranks pass is ignored), waiting as AllToAllV does. The base
  // version is an AllGather.
  virtual Result<std::string> Broadcast(std::string_view from_root, std::chrono::milliseconds within);
  virtual Status Barrier();

  // What this rank's collectives have moved so far; zeros where the control plane does not count.
  virtual ControlPlaneCounters counters() const { return {}; }

  // Not collective: kPeerFailed naming the ranks that died, as far as the control plane knows. Lets a long wait
  // elsewhere (a data exchange) stop as soon as a peer is gone rather than at its timeout.
  virtual Status CheckPeers() { return Status::Ok(); }
};

// A user-supplied allgather of equal-sized blocks (ckpt_allgather_fn). Returns 0 on success.
using AllGatherCallback = std::function<int32_t(const void* send, uint64_t size, void* recv)>;

// A control plane over the user's callback: sizes are gathered first, then the blocks padded to the largest.
std::unique_ptr<ControlPlane> MakeCallbackControlPlane(int rank, int world_size, AllGatherCallback allgather);

}  // namespace ckpt::coll

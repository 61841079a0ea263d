// Device-memory transport over NCCL point-to-point calls. libnccl.so.2 and the CUDA runtime are loaded at run time,
// so libckpt builds and loads without them; where either is missing the transport is kUnsupported, with the reason.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/control/control_plane.h"
#include "collectives/transport/transport.h"
#include "common/status.h"

namespace ckpt::coll {

// Collective over `control`. Every rank loads NCCL and the CUDA runtime and creates a stream on `device`; rank 0
// makes the communicator's unique id; one control.AllGather shares both the id and every rank's readiness, so all
// ranks agree on the outcome: kUnsupported naming each rank that lacks NCCL, CUDA or the device (no rank is left
// waiting for another that gave up). The communicator is non-blocking, so its setup is bounded by `timeout`
// (kTimeout, after aborting it); `timeout` also bounds its orderly teardown when the transport is destroyed.
// Two ranks on one GPU are refused by NCCL ("Duplicate GPU detected"), as kInvalidArgument.
//
// Exchange buffers must be device memory of `device`, ready when Exchange is called (the caller synchronises the
// stream that produced them). NCCL has no tags: both ends of a pair first swap the (tag, size) lists of what they
// will send and receive, so a disagreement is kMismatch naming the peer and tag, and the pair moves nothing while
// the rank's other pairs proceed; then each pair's transfers are issued on both sides in (peer, tag) order. A stall
// past the deadline aborts the communicator (kTimeout); an error NCCL reports while waiting is kPeerFailed with
// NCCL's message. Either leaves the transport failed: later exchanges are kPeerFailed.
Result<std::unique_ptr<Transport>> MakeNcclTransport(ControlPlane& control, int device,
                                                     std::chrono::milliseconds timeout);

// Ok where this process can load NCCL and the CUDA runtime and sees a device; kUnsupported with the reason otherwise.
// Local, cheap after the first call: for checking a configuration before any communicator is made.
Status NcclUsable();

// The pure parts of the transport's protocol, exposed for tests.
namespace nccl_protocol {

// What one transfer declares to its peer before any byte moves.
struct TransferShape {
  uint64_t tag;
  uint64_t size;
  bool operator==(const TransferShape& other) const { return tag == other.tag && size == other.size; }
};

// Indices of `transfers` in issue order: by peer, then by tag; transfers with the same (peer, tag) keep the order
// they were posted in, so they match in posting order on both sides.
std::vector<size_t> IssueOrder(const std::vector<TransferSend>& transfers);
std::vector<size_t> IssueOrder(const std::vector<TransferRecv>& transfers);

// Checks that what this rank sends to `peer` is what the peer receives from it, and the other way round; kMismatch
// naming the peer and the first tag that differs (or the count, where one side has more transfers).
Status CheckPairAgrees(int peer, const std::vector<TransferShape>& sent_here,
                       const std::vector<TransferShape>& received_there,
                       const std::vector<TransferShape>& received_here, const std::vector<TransferShape>& sent_there);

}  // namespace nccl_protocol
}  // namespace ckpt::coll

// Host-memory transport over UCX tag matching: shared memory and CMA between ranks of a node, TCP between nodes.
#pragma once

#include <chrono>
#include <memory>

#include "collectives/control_plane.h"
#include "collectives/transport.h"
#include "common/status.h"

namespace ckpt::coll {

// Collective. Creates a UCX context and worker, exchanges worker addresses with control.AllGather, and creates an
// endpoint to every rank (itself included) with peer error handling, keeping shared memory usable. kUnsupported
// with UCX's message if UCX cannot initialise; kInvalidArgument beyond 65536 ranks. `timeout` bounds the flush of
// outstanding sends when the transport is destroyed.
//
// A peer that fails, or whose transfers are abandoned at a timeout, stays failed for the transport's lifetime: its
// late messages could otherwise match a later exchange's receives. Exchanges naming it fail with kPeerFailed.
Result<std::unique_ptr<Transport>> MakeUcxTransport(ControlPlane& control, std::chrono::milliseconds timeout);

}  // namespace ckpt::coll

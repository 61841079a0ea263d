// Host-memory transport over UCX tag matching: shared memory between ranks of a node, TCP between nodes. (CMA,
// UCX's zero-copy path within a node, does not support peer error handling in UCX 1.13, so it is not used.)
#pragma once

#include <chrono>
#include <memory>

#include "collectives/control_plane.h"
#include "collectives/transport.h"
#include "common/status.h"

namespace ckpt::coll {

// Collective. Creates a UCX context and worker, exchanges worker addresses with control.AllGather, and creates an
// endpoint to every rank (itself included) with peer error handling, keeping shared memory usable. kUnsupported
// with UCX's message if UCX cannot start on some rank (every rank fails alike); kInvalidArgument beyond 65536
// ranks. `timeout` (at most 10 s) bounds how long destruction waits for endpoints to close.
//
// The transport runs a thread that progresses UCX between exchanges, so that peers still finishing theirs never
// wait on this rank. Exchange calls from several threads are serialised.
//
// Failures: a peer whose endpoint fails while an exchange waits on it, or whose transfers are abandoned at a
// timeout, stays failed for the transport's lifetime (its late messages could otherwise match a later exchange's
// receives): exchanges naming it fail with kPeerFailed. A peer that disconnects after its transfers completed (it
// finished and left) fails only later sends to it, and receives of messages it never sent.
Result<std::unique_ptr<Transport>> MakeUcxTransport(ControlPlane& control, std::chrono::milliseconds timeout);

}  // namespace ckpt::coll

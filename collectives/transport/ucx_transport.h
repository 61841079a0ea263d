// Host-memory transport over UCX tag matching: shared memory between ranks of a node, TCP between nodes. Large
// transfers between processes of a node are instead pulled by the receiver from the sender's memory
// (same_host_pull.h), UCX carrying only their descriptors and acknowledgements: UCX 1.13's own zero-copy path
// within a node (CMA) does not support peer error handling, so UCX alone would copy them twice.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "collectives/control/control_plane.h"
#include "collectives/transport/transport.h"
#include "common/status.h"

namespace ckpt::coll {

struct UcxApi;

struct UcxTransportOptions {
  // Bounds how long destruction waits for endpoints to close; at most 10 s.
  std::chrono::milliseconds close_timeout{10000};
  // The host of the job's store: UCX's TCP transport listens only on the network interface that reaches it, or on
  // loopback alone where every rank reaches it over loopback (RDMA devices stay usable). Empty: every interface.
  std::string job_host;
  // The UCX functions the transport calls; null: libucp.so.0, loaded at run time (ucx_library.h). Tests pass a
  // table of their own to make UCX fail.
  const UcxApi* ucx = nullptr;
};

// Collective. Creates a UCX context and worker, exchanges worker addresses with control.AllGather, and learns which
// peers can read this rank's memory and which this rank can read (same host, permitted by the kernel). Endpoints,
// with peer error handling, keeping shared memory usable, are made then to the ranks this rank can read, and to any
// other rank (itself included) at the first exchange with it: a rank holds endpoints over the network (sockets over
// TCP) only to the ranks it exchanges with. kUnsupported
// with UCX's message if UCX cannot be loaded or cannot start on some rank (every rank fails alike), naming the
// missing library where it is absent; kInvalidArgument beyond 65536 ranks.
//
// The transport runs a thread that progresses UCX between exchanges, so that peers still finishing theirs never
// wait on this rank. Exchange calls from several threads are serialised. Should that thread fail, every later
// exchange fails with kInternal saying why.
//
// Failures: a peer whose endpoint fails while an exchange waits on it, or whose transfers are abandoned at a
// timeout, stays failed for the transport's lifetime (its late messages could otherwise match a later exchange's
// receives): exchanges naming it fail with kPeerFailed. A peer that disconnects after its transfers completed (it
// finished and left) fails only later sends to it, and receives of messages it never sent.
Result<std::unique_ptr<Transport>> MakeUcxTransport(ControlPlane& control, const UcxTransportOptions& options);

}  // namespace ckpt::coll

// A control plane for jobs that bootstrap through ckpt's TCP store without collectives of their own, in which no
// rank relays the others' bytes. The store keeps what only it can do cheaply: AllGather and Barrier, and knowing
// which ranks died. AllToAllV and Broadcast travel over direct links between the ranks (collectives/peer/peer_links.h):
// an all-to-all sends each message that is not empty straight to its receiver and ends with a store barrier of a
// few bytes; a broadcast descends a binomial tree rooted at rank 0, so that rank 0 sends ceil(log2 N) copies.
#pragma once

#include <memory>

#include "collectives/control/control_plane.h"
#include "collectives/store/tcp_store.h"

namespace ckpt::coll {

// Opens this rank's peer links (listening on the interface of its store connection); not collective. The store
// must be connected, with world size > 1.
Result<std::unique_ptr<ControlPlane>> MakePeerControlPlane(std::shared_ptr<TcpStore> store);

}  // namespace ckpt::coll

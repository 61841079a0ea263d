// The descriptors a rank needs to reach the other ranks. Rank 0's store serves a connection and an auxiliary one from
// every rank that reaches it directly, and one link from each row's relay in a job laid out in a grid
// (collectives/store/store_relay.h), whose relay serves two connections per rank of its row; and each rank holds a
// link to and one from each peer its control plane routes through (collectives/peer/peer_grid.h: every rank in a
// small job, its neighbours in a grid in a large one). The usual soft RLIMIT_NOFILE of cluster nodes (1,024) is
// below what a few hundred directly connected ranks need at rank 0, while the hard limit is usually far above it: the
// soft limit is raised toward the hard one at context creation, as Go's and Java's runtimes raise theirs, and a hard
// limit that cannot hold the connections is a clear error up front instead of an accept failing in the middle of a
// collective.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace ckpt {

// What a rank holds open to other processes.
struct DescriptorUse {
  uint64_t store = 0;  // the server or relay ends of store connections, and a relay's link to rank 0
  uint64_t peers = 0;  // the ranks it links to and from
};

// Whether the hard RLIMIT_NOFILE holds at least what `use` needs.
bool HardLimitHolds(const DescriptorUse& use);

// Raises the soft RLIMIT_NOFILE to the hard limit (at most 2^20), as far as setrlimit allows: for a rank that learns
// its part (a store relay, its peers) only as it connects, and is checked by EnsureDescriptors then.
void RaiseDescriptorLimit();

// Raises the soft RLIMIT_NOFILE to the hard limit (at most 2^20) when it is below what the rank may hold open (its
// connections, plus 256 for the trainer's files, the I/O workers' pipes, the data files of a load and UCX).
// kUnsupported, naming the descriptors needed, the limits and how to raise them, when
// even the hard limit cannot hold the rank's connections; kIo when setrlimit refuses to go that far.
Status EnsureDescriptors(int rank, int world_size, const DescriptorUse& use);

}  // namespace ckpt

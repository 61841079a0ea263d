// The descriptors a rank needs: rank 0 serves a store connection and an auxiliary one from every rank, and each rank
// holds a link to and one from each peer its control plane routes through (collectives/peer/peer_grid.h: every rank
// in a small job, its row and column of a grid in a large one). The usual soft RLIMIT_NOFILE of cluster nodes (1,024)
// is below what a few hundred ranks need at rank 0, while the hard limit is usually far above it: the soft limit is
// raised toward the hard one at context creation, as Go's and Java's runtimes raise theirs, and a hard limit that
// cannot hold the connections is a clear error up front instead of an accept failing in the middle of a collective.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace ckpt {

// For `rank` of `world_size` ranks, linked to and from at most `peers` other ranks: raises the soft RLIMIT_NOFILE to
// the hard limit (at most 2^20) when it is below what the rank may hold open (its connections, plus 256 for the
// trainer's files, the I/O workers' pipes, the data files of a load and UCX). kUnsupported, naming the descriptors
// needed, the limits and how to raise them, when even the hard limit cannot hold the rank's connections; kIo when
// setrlimit refuses to go that far.
Status EnsureDescriptors(int rank, int world_size, uint64_t peers);

}  // namespace ckpt

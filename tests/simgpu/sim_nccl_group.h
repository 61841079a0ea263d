// The transfers of one NCCL group, run as one stream operation: every send and receive of the group progresses at
// once over non-blocking sockets, so two ranks sending each other large messages cannot deadlock.
#pragma once

#include <cstddef>
#include <vector>

#include "tests/simgpu/sim_nccl_comm.h"

namespace simgpu {

struct Transfer {
  bool send;
  int peer;
  const void* buffer;  // device memory; read for a send, written for a receive
  size_t size;
};

// Runs `transfers` on `comm`: sends and receives to one peer match in issue order, each message framed with its
// size; a receive that meets a message of another size is ncclInvalidUsage, a peer whose connection fails is
// ncclRemoteError, both recorded on the communicator. Returns the CUDA error the stream reports: success when done
// or stopped by an abort, kCudaErrorLaunchFailure when the group failed.
int RunGroup(Communicator& comm, const std::vector<Transfer>& transfers);

}  // namespace simgpu

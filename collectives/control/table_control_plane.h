// A control plane over the job's own collectives (ckpt_collectives: MPI, NCCL, a coordination service): every
// collective ckpt runs becomes one or two calls of the job's engine, sizes first so that every receiver knows what
// to expect, then the bytes. Nothing goes through ckpt's TCP store, which only answers whether peers are alive.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "collectives/control/control_plane.h"

namespace ckpt::coll {

// The job's functions; each returns 0 on success. Offsets and sizes are in bytes, one entry per rank.
struct CollectiveTable {
  std::function<int32_t(const void* send, uint64_t send_size, void* recv, const uint64_t* recv_sizes,
                        const uint64_t* recv_offsets)>
      allgatherv;
  std::function<int32_t(const void* send, const uint64_t* send_sizes, const uint64_t* send_offsets, void* recv,
                        const uint64_t* recv_sizes, const uint64_t* recv_offsets)>
      alltoallv;
  std::function<int32_t(void* buffer, uint64_t size, int32_t root)> broadcast;
  std::function<int32_t()> barrier;
};

// `peers`, when set, answers CheckPeers (the TCP store knows which ranks died); it carries no collective.
std::unique_ptr<ControlPlane> MakeTableControlPlane(int rank, int world_size, CollectiveTable table,
                                                    std::shared_ptr<ControlPlane> peers);

}  // namespace ckpt::coll

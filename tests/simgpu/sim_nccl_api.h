// The C ABI of the NCCL calls the simulator implements: exactly those ckpt resolves in
// collectives/transport/nccl_library.cc (LoadNcclOnce), with the types declared there and the result numbers of nccl.h.
// Shared by the simulator's definitions and its tests.
#pragma once

#include <cstddef>

#include "tests/simgpu/sim_cuda_api.h"

namespace simgpu {

// ncclResult_t.
enum NcclResult : int {
  kNcclSuccess = 0,
  kNcclUnhandledCudaError = 1,
  kNcclSystemError = 2,
  kNcclInternalError = 3,
  kNcclInvalidArgument = 4,
  kNcclInvalidUsage = 5,
  kNcclRemoteError = 6,
  kNcclInProgress = 7,
};

constexpr int kNcclChar = 0;
constexpr unsigned kNcclConfigMagic = 0xcafebeef;

struct NcclUniqueId {
  char internal[128];
};

// The leading fields of ncclConfig_t; the simulator reads no others.
struct NcclConfig {
  size_t size;
  unsigned magic;
  unsigned version;
  int blocking;
};

}  // namespace simgpu

extern "C" {
SIMGPU_EXPORT int ncclGetUniqueId(simgpu::NcclUniqueId* id);
SIMGPU_EXPORT int ncclCommInitRankConfig(void** comm, int nranks, simgpu::NcclUniqueId id, int rank,
                                         simgpu::NcclConfig* config);
SIMGPU_EXPORT int ncclCommFinalize(void* comm);
SIMGPU_EXPORT int ncclCommDestroy(void* comm);
SIMGPU_EXPORT int ncclCommAbort(void* comm);
SIMGPU_EXPORT int ncclCommGetAsyncError(void* comm, int* async_error);
SIMGPU_EXPORT const char* ncclGetErrorString(int result);
SIMGPU_EXPORT const char* ncclGetLastError(void* comm);
SIMGPU_EXPORT int ncclGroupStart();
SIMGPU_EXPORT int ncclGroupEnd();
SIMGPU_EXPORT int ncclSend(const void* buffer, size_t count, int datatype, int peer, void* comm, void* stream);
SIMGPU_EXPORT int ncclRecv(void* buffer, size_t count, int datatype, int peer, void* comm, void* stream);
}

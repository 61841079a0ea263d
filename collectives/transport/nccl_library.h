// libnccl.so.2, loaded with dlopen at run time so libckpt builds and loads without NCCL: the part of nccl.h the
// NCCL transport uses, the table of functions resolved from the library, and the translation of its errors.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace ckpt::coll {

// Values from nccl.h, stable since NCCL 2.14.
constexpr int kNcclSuccess = 0;
constexpr int kNcclInProgress = 7;
constexpr int kNcclChar = 0;

using NcclComm = void*;

struct NcclUniqueId {
  char internal[128];
};

// The leading fields of ncclConfig_t. NCCL copies `size` bytes and treats every field newer than `version` as
// unset, so this prefix, declared as of 2.14 (the first non-blocking release), stays valid for later versions.
struct NcclConfig {
  size_t size;
  unsigned magic;
  unsigned version;
  int blocking;
};
constexpr unsigned kNcclConfigMagic = 0xcafebeef;
constexpr unsigned kNcclConfigVersion = 21400;  // NCCL_VERSION(2, 14, 0)

struct NcclApi {
  int (*GetUniqueId)(NcclUniqueId*);
  int (*CommInitRankConfig)(NcclComm*, int, NcclUniqueId, int, NcclConfig*);
  int (*CommFinalize)(NcclComm);
  int (*CommDestroy)(NcclComm);
  int (*CommAbort)(NcclComm);
  int (*CommGetAsyncError)(NcclComm, int*);
  const char* (*GetErrorString)(int);
  const char* (*GetLastError)(NcclComm);
  int (*GroupStart)();
  int (*GroupEnd)();
  int (*Send)(const void*, size_t, int, int, NcclComm, void*);
  int (*Recv)(void*, size_t, int, int, NcclComm, void*);
};

// NCCL is loaded once per process and never unloaded: its proxy threads outlive any one communicator. kUnsupported
// where the library is missing or older than 2.14.
Result<const NcclApi*> LoadNccl();

// "ncclGroupEnd: remote process exited or there was a network error (error 6): <NCCL's last message>".
std::string NcclErrorText(const NcclApi& nccl, const char* call, int result, NcclComm comm);

// The Status code for an NCCL error result: kPeerFailed for a system or remote error (a failed peer or network),
// kInvalidArgument for an invalid argument or usage, kInternal otherwise.
Code NcclErrorCode(int result);

}  // namespace ckpt::coll

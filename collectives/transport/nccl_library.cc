#include "collectives/transport/nccl_library.h"

#include <dlfcn.h>

#include <memory>
#include <string>

namespace ckpt::coll {
namespace {

constexpr char kNcclLibrary[] = "libnccl.so.2";

// Error results from nccl.h, stable since NCCL 2.14.
constexpr int kNcclSystemError = 2;
constexpr int kNcclInvalidArgument = 4;
constexpr int kNcclInvalidUsage = 5;
constexpr int kNcclRemoteError = 6;

template <typename Fn>
void Resolve(void* handle, const char* name, Fn* slot, std::string* missing) {
  *slot = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*slot == nullptr && missing->empty()) *missing = name;
}

Result<const NcclApi*> LoadNcclOnce() {
  void* handle = dlopen(kNcclLibrary, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    return Unsupported(std::string("NCCL not found (") + kNcclLibrary + "): " + (error ? error : "dlopen failed"));
  }
  auto api = std::make_unique<NcclApi>();
  std::string missing;
  Resolve(handle, "ncclGetUniqueId", &api->GetUniqueId, &missing);
  Resolve(handle, "ncclCommInitRankConfig", &api->CommInitRankConfig, &missing);
  Resolve(handle, "ncclCommFinalize", &api->CommFinalize, &missing);
  Resolve(handle, "ncclCommDestroy", &api->CommDestroy, &missing);
  Resolve(handle, "ncclCommAbort", &api->CommAbort, &missing);
  Resolve(handle, "ncclCommGetAsyncError", &api->CommGetAsyncError, &missing);
  Resolve(handle, "ncclGetErrorString", &api->GetErrorString, &missing);
  Resolve(handle, "ncclGetLastError", &api->GetLastError, &missing);
  Resolve(handle, "ncclGroupStart", &api->GroupStart, &missing);
  Resolve(handle, "ncclGroupEnd", &api->GroupEnd, &missing);
  Resolve(handle, "ncclSend", &api->Send, &missing);
  Resolve(handle, "ncclRecv", &api->Recv, &missing);
  if (!missing.empty()) {
    dlclose(handle);
    return Unsupported(std::string(kNcclLibrary) + " lacks " + missing + " (NCCL 2.14 or newer is needed)");
  }
  return api.release();
}

}  // namespace

Result<const NcclApi*> LoadNccl() {
  static const Result<const NcclApi*> api = LoadNcclOnce();
  return api;
}

std::string NcclErrorText(const NcclApi& nccl, const char* call, int result, NcclComm comm) {
  const char* text = nccl.GetErrorString(result);
  std::string message =
      std::string(call) + ": " + (text ? text : "unknown NCCL error") + " (error " + std::to_string(result) + ")";
  const char* detail = nccl.GetLastError(comm);
  if (detail != nullptr && *detail != '\0') message += ": " + std::string(detail);
  return message;
}

Code NcclErrorCode(int result) {
  switch (result) {
    case kNcclSystemError:
    case kNcclRemoteError:
      return Code::kPeerFailed;
    case kNcclInvalidArgument:
    case kNcclInvalidUsage:
      return Code::kInvalidArgument;
    default:
      return Code::kInternal;
  }
}

}  // namespace ckpt::coll

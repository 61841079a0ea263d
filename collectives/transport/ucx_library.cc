#include "collectives/transport/ucx_library.h"

#include <dlfcn.h>

#include <memory>
#include <string>

namespace ckpt::coll {
namespace {

constexpr char kUcpLibrary[] = "libucp.so.0";

template <typename Fn>
void Resolve(void* handle, const char* name, Fn* slot, std::string* missing) {
  *slot = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*slot == nullptr && missing->empty()) *missing = name;
}

Result<const UcxApi*> LoadUcxOnce() {
  void* handle = dlopen(kUcpLibrary, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    return Unsupported(std::string("UCX is unavailable: ") + kUcpLibrary +
                       " cannot be loaded: " + (error ? error : "dlopen failed"));
  }
  auto api = std::make_unique<UcxApi>();
  std::string missing;
  Resolve(handle, "ucp_config_read", &api->config_read, &missing);
  Resolve(handle, "ucp_config_modify", &api->config_modify, &missing);
  Resolve(handle, "ucp_config_release", &api->config_release, &missing);
  Resolve(handle, "ucp_init_version", &api->init_version, &missing);
  Resolve(handle, "ucp_cleanup", &api->cleanup, &missing);
  Resolve(handle, "ucp_worker_create", &api->worker_create, &missing);
  Resolve(handle, "ucp_worker_destroy", &api->worker_destroy, &missing);
  Resolve(handle, "ucp_worker_get_efd", &api->worker_get_efd, &missing);
  Resolve(handle, "ucp_worker_arm", &api->worker_arm, &missing);
  Resolve(handle, "ucp_worker_progress", &api->worker_progress, &missing);
  Resolve(handle, "ucp_worker_get_address", &api->worker_get_address, &missing);
  Resolve(handle, "ucp_worker_release_address", &api->worker_release_address, &missing);
  Resolve(handle, "ucp_ep_create", &api->ep_create, &missing);
  Resolve(handle, "ucp_ep_close_nbx", &api->ep_close_nbx, &missing);
  Resolve(handle, "ucp_tag_send_nbx", &api->tag_send_nbx, &missing);
  Resolve(handle, "ucp_tag_recv_nbx", &api->tag_recv_nbx, &missing);
  Resolve(handle, "ucp_tag_probe_nb", &api->tag_probe_nb, &missing);
  Resolve(handle, "ucp_tag_msg_recv_nbx", &api->tag_msg_recv_nbx, &missing);
  Resolve(handle, "ucp_request_free", &api->request_free, &missing);
  Resolve(handle, "ucp_request_cancel", &api->request_cancel, &missing);
  Resolve(handle, "ucp_request_check_status", &api->request_check_status, &missing);
  // A handle's lookups cover the libraries it depends on, so libucs.so.0's functions resolve through libucp's.
  Resolve(handle, "ucs_status_string", &api->status_string, &missing);
  if (!missing.empty()) {
    dlclose(handle);
    return Unsupported(std::string("UCX is unavailable: ") + kUcpLibrary + " lacks " + missing +
                       " (UCX 1.10 or newer is needed)");
  }
  return api.release();
}

}  // namespace

Result<const UcxApi*> LoadUcx() {
  static const Result<const UcxApi*> api = LoadUcxOnce();
  return api;
}

}  // namespace ckpt::coll

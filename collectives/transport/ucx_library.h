// libucp.so.0, loaded with dlopen at run time so that libckpt loads where UCX is absent (its loads then run without
// a host transport): the table of the UCX functions that the UCX transport and the agents' replication call. UCX's
// headers are still needed to build, for its types and constants.
#pragma once

#include <ucp/api/ucp.h>

#include "common/status.h"

namespace ckpt::coll {

// Named after the UCX functions they point to, without the prefix. ucs_status_string comes from libucs.so.0, which
// libucp.so.0 depends on.
struct UcxApi {
  ucs_status_t (*config_read)(const char*, const char*, ucp_config_t**);
  ucs_status_t (*config_modify)(ucp_config_t*, const char*, const char*);
  void (*config_release)(ucp_config_t*);
  // What the inline ucp_init of ucp.h calls, with the API version the headers declare.
  ucs_status_t (*init_version)(unsigned, unsigned, const ucp_params_t*, const ucp_config_t*, ucp_context_h*);
  void (*cleanup)(ucp_context_h);
  ucs_status_t (*worker_create)(ucp_context_h, const ucp_worker_params_t*, ucp_worker_h*);
  void (*worker_destroy)(ucp_worker_h);
  ucs_status_t (*worker_get_efd)(ucp_worker_h, int*);
  ucs_status_t (*worker_arm)(ucp_worker_h);
  unsigned (*worker_progress)(ucp_worker_h);
  ucs_status_t (*worker_get_address)(ucp_worker_h, ucp_address_t**, size_t*);
  void (*worker_release_address)(ucp_worker_h, ucp_address_t*);
  ucs_status_t (*ep_create)(ucp_worker_h, const ucp_ep_params_t*, ucp_ep_h*);
  ucs_status_ptr_t (*ep_close_nbx)(ucp_ep_h, const ucp_request_param_t*);
  ucs_status_ptr_t (*tag_send_nbx)(ucp_ep_h, const void*, size_t, ucp_tag_t, const ucp_request_param_t*);
  ucs_status_ptr_t (*tag_recv_nbx)(ucp_worker_h, void*, size_t, ucp_tag_t, ucp_tag_t, const ucp_request_param_t*);
  // The agents' replication receives messages of a size it learns first (bounded before anything is allocated).
  ucp_tag_message_h (*tag_probe_nb)(ucp_worker_h, ucp_tag_t, ucp_tag_t, int, ucp_tag_recv_info_t*);
  ucs_status_ptr_t (*tag_msg_recv_nbx)(ucp_worker_h, void*, size_t, ucp_tag_message_h, const ucp_request_param_t*);
  void (*request_free)(void*);
  void (*request_cancel)(ucp_worker_h, void*);
  ucs_status_t (*request_check_status)(void*);
  const char* (*status_string)(ucs_status_t);
};

// UCX is loaded once per process and never unloaded: its modules and global state outlive any one context.
// kUnsupported naming the library and dlopen's reason where UCX is missing, or the first function it lacks.
Result<const UcxApi*> LoadUcx();

}  // namespace ckpt::coll

#include "collectives/transport/ucx_worker.h"

#include <algorithm>

#include "collectives/transport/ucx_config.h"

namespace ckpt::coll {

Result<std::unique_ptr<UcxWorker>> UcxWorker::Open(const UcxApi& ucx, const UcxWorkerOptions& options) {
  std::unique_ptr<UcxWorker> worker(new UcxWorker(ucx, options.unavailable));
  RETURN_IF_ERROR(worker->Create(options));
  return worker;
}

Status UcxWorker::Create(const UcxWorkerOptions& options) {
  ASSIGN_OR_RETURN(ucp_config_t * config, ReadUcxConfig(ucx_, options.net_devices));
  ucp_params_t params = {};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  if (options.expected_endpoints > 0) {
    params.field_mask |= UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
    params.estimated_num_eps = options.expected_endpoints;
  }
  ucs_status_t status = ucx_.init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &context_);
  ucx_.config_release(config);
  if (status != UCS_OK) return Failed("ucp_init", status);
  ucp_worker_params_t worker_params = {};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = options.thread_mode;
  status = ucx_.worker_create(context_, &worker_params, &worker_);
  if (status != UCS_OK) return Failed("ucp_worker_create", status);
  status = ucx_.worker_get_efd(worker_, &event_fd_);
  if (status != UCS_OK) return Failed("ucp_worker_get_efd", status);
  return Status::Ok();
}

Status UcxWorker::Failed(const char* call, ucs_status_t status) const {
  return Unsupported(unavailable_ + ": " + call + " failed: " + ucx_.status_string(status));
}

Result<std::string> UcxWorker::Address() const {
  ucp_address_t* address = nullptr;
  size_t length = 0;
  const ucs_status_t status = ucx_.worker_get_address(worker_, &address, &length);
  if (status != UCS_OK) return Failed("ucp_worker_get_address", status);
  std::string bytes(reinterpret_cast<const char*>(address), length);
  ucx_.worker_release_address(worker_, address);
  return bytes;
}

ucs_status_t UcxWorker::Connect(std::string_view address, ucp_err_handler_cb_t on_error, void* arg, ucp_ep_h* ep) {
  ucp_ep_params_t params = {};
  params.field_mask =
      UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = on_error;
  params.err_handler.arg = arg;
  const ucs_status_t status = ucx_.ep_create(worker_, &params, ep);
  if (status != UCS_OK) *ep = nullptr;
  return status;
}

void UcxWorker::CloseEndpoint(ucp_ep_h ep, uint32_t flags) {
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = flags;
  const ucs_status_ptr_t request = ucx_.ep_close_nbx(ep, &param);
  if (UCS_PTR_IS_PTR(request)) closing_.push_back(request);
}

bool UcxWorker::FreeClosedEndpoints() {
  closing_.erase(std::remove_if(closing_.begin(), closing_.end(),
                                [this](void* request) {
                                  if (ucx_.request_check_status(request) == UCS_INPROGRESS) return false;
                                  ucx_.request_free(request);
                                  return true;
                                }),
                 closing_.end());
  return !closing_.empty();
}

void UcxWorker::Close() {
  // Released by UCX when they complete; destroying the worker completes them.
  for (void* request : closing_) ucx_.request_free(request);
  closing_.clear();
  if (worker_ != nullptr) ucx_.worker_destroy(worker_);
  worker_ = nullptr;
  event_fd_ = -1;
  if (context_ != nullptr) ucx_.cleanup(context_);
  context_ = nullptr;
}

}  // namespace ckpt::coll

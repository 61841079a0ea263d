// UCX's bring-up, shared by the transport (ucx_transport.h) and the agents' replication (agent/replicator.h): a UCX
// context for tag matching and wakeups, opened with ckpt's configuration (ucx_config.h), its one worker and the
// worker's event fd; the endpoints to peers, all with peer error handling, and their closing; and the teardown in
// the order UCX needs: the requests of closing endpoints freed, the worker destroyed, then the context.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/transport/ucx_library.h"
#include "common/status.h"

namespace ckpt::coll {

struct UcxWorkerOptions {
  // UCX's network devices (NetDevicesFor); empty: every device.
  std::string net_devices;
  // How many endpoints the context may expect; 0: left to UCX.
  size_t expected_endpoints = 0;
  // UCS_THREAD_MODE_SINGLE where one thread alone uses the worker; SERIALIZED where several take turns.
  ucs_thread_mode_t thread_mode = UCS_THREAD_MODE_SINGLE;
  // What a failure's message starts with: what it means to the caller.
  std::string unavailable = "UCX is unavailable";
};

class UcxWorker {
 public:
  // Reads UCX's configuration and creates the context, the worker and its event fd. kUnsupported with UCX's reason,
  // "<unavailable>: <UCX call> failed: <reason>", where UCX refuses.
  static Result<std::unique_ptr<UcxWorker>> Open(const UcxApi& ucx, const UcxWorkerOptions& options);
  ~UcxWorker() { Close(); }
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_worker_h get() const { return worker_; }
  // The worker's event fd (owned by UCX): readable when the worker, armed with worker_arm, has events.
  int event_fd() const { return event_fd_; }
  // The worker's address, which peers connect to.
  Result<std::string> Address() const;

  // Creates an endpoint to the worker whose Address is `address`, with peer error handling: UCX reports its failure
  // during progress through `on_error`, called with `arg`.
  ucs_status_t Connect(std::string_view address, ucp_err_handler_cb_t on_error, void* arg, ucp_ep_h* ep);
  // Starts closing `ep`: gracefully (flags 0), letting queued sends finish, or by force (UCP_EP_CLOSE_FLAG_FORCE),
  // purging them. Progress completes the close.
  void CloseEndpoint(ucp_ep_h ep, uint32_t flags);
  // Frees what UCX kept of endpoints whose close completed; whether some are still closing.
  bool FreeClosedEndpoints();

  // Frees what closing endpoints still hold, destroys the worker (completing its requests), then the context.
  // Idempotent; the destructor calls it.
  void Close();

 private:
  UcxWorker(const UcxApi& ucx, std::string unavailable) : ucx_(ucx), unavailable_(std::move(unavailable)) {}
  Status Create(const UcxWorkerOptions& options);
  Status Failed(const char* call, ucs_status_t status) const;

  const UcxApi& ucx_;
  const std::string unavailable_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int event_fd_ = -1;
  std::vector<void*> closing_;  // requests of endpoints still closing
};

}  // namespace ckpt::coll

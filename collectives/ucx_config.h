// The settings the UCX transport gives UCX. They go into UCX's configuration object (ucp_config_modify), never into
// the process's environment, which the user's program and its other libraries share.
#pragma once

#include <string>

#include "collectives/ucx_library.h"
#include "common/status.h"

namespace ckpt::coll {

// Reads UCX's configuration (the UCX_* environment variables) and adds what the transport needs, except where the
// user set a value of their own: shared memory kept usable under peer error handling, a keepalive of 1 s, and UCX's
// network devices limited to the interface that reaches `job_host` (the job's store) plus the RDMA ports, so that
// UCX listens on no other interface. Empty `job_host`: every device. The caller releases the configuration with
// ucx.config_release. kUnsupported when UCX refuses it or no interface reaches `job_host`.
Result<ucp_config_t*> ReadUcxConfig(const UcxApi& ucx, const std::string& job_host);

// The network interface whose address this host uses to reach `host`: "lo" for 127.0.0.1. kNotFound when `host`
// does not resolve or no route reaches it.
Result<std::string> InterfaceReaching(const std::string& host);

}  // namespace ckpt::coll

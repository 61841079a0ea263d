// The settings ckpt gives UCX (ucx_worker.h opens UCX with them, for the transport and the agents' replication), and
// what the transport learns from the host to choose them. They go into UCX's configuration object
// (ucp_config_modify), never into the process's environment, which the user's program and its other libraries share.
#pragma once

#include <string>

#include "collectives/transport/ucx_library.h"
#include "common/status.h"

namespace ckpt::coll {

// Reads UCX's configuration (the UCX_* environment variables) and adds what ckpt needs, except where the user set a
// value of their own: shared memory kept usable under peer error handling, a keepalive of 1 s, and
// `net_devices` as UCX's network devices (NetDevicesFor; empty: every device). The caller releases the
// configuration with ucx.config_release. kUnsupported when UCX refuses it.
Result<ucp_config_t*> ReadUcxConfig(const UcxApi& ucx, const std::string& net_devices);

// Whether UCX_TLS lets ranks of a host read one another's memory, as UCX's cross-memory transport (cma) would: unset,
// naming cma, all, sm or shm, or an exclusion list without cma. The transport's same-host pull obeys it, so that
// `UCX_TLS=tcp,self` still sends everything over TCP and `UCX_TLS=^cma` turns pulling off.
bool CrossMemoryAllowed();

struct NetworkInterface {
  std::string name;  // as UCX names it: "eth0", "lo"
  bool loopback = false;
};

// The network interface whose address this host uses to reach `host`: "lo" for 127.0.0.1. kNotFound when `host`
// does not resolve or no route reaches it.
Result<NetworkInterface> InterfaceReaching(const std::string& host);

// UCX's network devices limited to `interface` and the RDMA ports, so that UCX's TCP transport listens on that
// interface alone while InfiniBand and RoCE devices, which are no network interfaces, stay usable.
std::string NetDevicesFor(const std::string& interface);

}  // namespace ckpt::coll

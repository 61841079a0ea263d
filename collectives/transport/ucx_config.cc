#include "collectives/transport/ucx_config.h"

#include <dirent.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/os_error.h"
#include "common/unique_fd.h"

namespace ckpt::coll {
namespace {

// UCX's default keepalive interval (20 s) would leave a dead peer unnoticed for most of a short timeout.
constexpr char kKeepaliveInterval[] = "1s";
// With peer error handling UCX uses no cross-memory attach, so large messages stream through the receiver's
// shared-memory FIFO. Its default of 64 segments (512 KiB) makes a sender wait for the receiver to be scheduled
// every 512 KiB: with more ranks than cores an exchange took 1 to 10 s where 1024 segments (8 MiB of shared memory
// per rank) take 0.5 to 0.9 s, measured with 4 ranks exchanging 384 MiB each on 2 cores.
constexpr char kFifoSegments[] = "1024";

bool AnyInEnvironment(std::initializer_list<const char*> variables) {
  for (const char* name : variables) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

// Whether UCX_TLS lets UCX use a shared-memory transport (unset, an exclusion list, or naming one). Where it does
// not, the shared-memory settings are left out, as UCX warns about unused settings on every worker.
bool SharedMemoryAllowed() {
  const char* tls = std::getenv("UCX_TLS");
  if (tls == nullptr || tls[0] == '^') return true;
  const std::string list = std::string(",") + tls + ",";
  for (const char* name : {"all", "sm", "shm", "mm", "posix", "sysv"}) {
    if (list.find(std::string(",") + name + ",") != std::string::npos) return true;
  }
  return false;
}

// The RDMA ports as UCX names its InfiniBand and RoCE devices ("mlx5_0:1"), from sysfs.
std::vector<std::string> RdmaPorts() {
  std::vector<std::string> ports;
  const std::string root = "/sys/class/infiniband";
  std::unique_ptr<DIR, int (*)(DIR*)> devices(opendir(root.c_str()), closedir);
  if (!devices) return ports;
  while (const dirent* device = readdir(devices.get())) {
    if (device->d_name[0] == '.') continue;
    std::unique_ptr<DIR, int (*)(DIR*)> numbers(opendir((root + "/" + device->d_name + "/ports").c_str()), closedir);
    if (!numbers) continue;
    while (const dirent* number = readdir(numbers.get())) {
      if (number->d_name[0] != '.') ports.push_back(std::string(device->d_name) + ":" + number->d_name);
    }
  }
  return ports;
}

bool SameAddress(const sockaddr& interface, const sockaddr_storage& local) {
  if (interface.sa_family != local.ss_family) return false;
  if (interface.sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in&>(interface).sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in&>(local).sin_addr.s_addr;
  }
  return interface.sa_family == AF_INET6 &&
         std::memcmp(&reinterpret_cast<const sockaddr_in6&>(interface).sin6_addr,
                     &reinterpret_cast<const sockaddr_in6&>(local).sin6_addr, sizeof(in6_addr)) == 0;
}

// The local address the kernel would send from to reach `host`. Connecting a datagram socket sends nothing: it only
// looks the route up.
Result<sockaddr_storage> LocalAddressReaching(const std::string& host) {
  addrinfo hints = {};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int resolved = getaddrinfo(host.c_str(), "9", &hints, &found);
  if (resolved != 0) return NotFound("cannot resolve '" + host + "': " + gai_strerror(resolved));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> addresses(found, freeaddrinfo);
  UniqueFd probe(socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_storage local = {};
  socklen_t length = sizeof local;
  if (!probe.valid() || connect(probe.get(), found->ai_addr, found->ai_addrlen) != 0 ||
      getsockname(probe.get(), reinterpret_cast<sockaddr*>(&local), &length) != 0) {
    return NotFound("no route reaches '" + host + "': " + OsErrorText(errno));
  }
  return local;
}

}  // namespace

bool CrossMemoryAllowed() {
  const char* tls = std::getenv("UCX_TLS");
  if (tls == nullptr) return true;
  const bool excluding = tls[0] == '^';
  const std::string list = std::string(",") + (excluding ? tls + 1 : tls) + ",";
  const bool named = list.find(",cma,") != std::string::npos;
  if (excluding) return !named;
  return named || list.find(",all,") != std::string::npos || list.find(",sm,") != std::string::npos ||
         list.find(",shm,") != std::string::npos;
}

Result<NetworkInterface> InterfaceReaching(const std::string& host) {
  ASSIGN_OR_RETURN(const sockaddr_storage local, LocalAddressReaching(host));
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return NotFound("listing the network interfaces failed: " + OsErrorText(errno));
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> interfaces(list, freeifaddrs);
  for (const ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || !SameAddress(*entry->ifa_addr, local)) continue;
    // An address label ("eth0:1") names its interface before the colon, as UCX does.
    const std::string label = entry->ifa_name;
    return NetworkInterface{label.substr(0, label.find(':')), (entry->ifa_flags & IFF_LOOPBACK) != 0};
  }
  return NotFound("no network interface holds the address this host uses to reach '" + host + "'");
}

std::string NetDevicesFor(const std::string& interface) {
  std::string devices = interface;
  for (const std::string& port : RdmaPorts()) devices += "," + port;
  return devices;
}

Result<ucp_config_t*> ReadUcxConfig(const UcxApi& ucx, const std::string& net_devices) {
  std::vector<std::pair<std::string, std::string>> settings;
  // Peer error handling disables shared memory unless the shared-memory transports declare error handling. UCX 1.13
  // applies transport settings given to ucp_config_modify under the name of their common table (MM_), not under
  // POSIX_ or SYSV_, so those names would be accepted and ignored.
  if (SharedMemoryAllowed()) {
    if (!AnyInEnvironment({"UCX_MM_ERROR_HANDLING", "UCX_POSIX_ERROR_HANDLING", "UCX_SYSV_ERROR_HANDLING"})) {
      settings.emplace_back("MM_ERROR_HANDLING", "y");
    }
    if (!AnyInEnvironment({"UCX_MM_FIFO_SIZE", "UCX_POSIX_FIFO_SIZE", "UCX_SYSV_FIFO_SIZE"})) {
      settings.emplace_back("MM_FIFO_SIZE", kFifoSegments);
    }
  }
  if (!AnyInEnvironment({"UCX_KEEPALIVE_INTERVAL"})) settings.emplace_back("KEEPALIVE_INTERVAL", kKeepaliveInterval);
  if (!net_devices.empty() && !AnyInEnvironment({"UCX_NET_DEVICES"})) settings.emplace_back("NET_DEVICES", net_devices);

  ucp_config_t* config = nullptr;
  ucs_status_t status = ucx.config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) {
    return Unsupported(std::string("UCX is unavailable: reading its configuration failed: ") +
                       ucx.status_string(status));
  }
  for (const auto& [name, value] : settings) {
    status = ucx.config_modify(config, name.c_str(), value.c_str());
    if (status != UCS_OK) {
      ucx.config_release(config);
      return Unsupported("UCX is unavailable: setting " + name + "=" + value + " failed: " + ucx.status_string(status));
    }
  }
  return config;
}

}  // namespace ckpt::coll

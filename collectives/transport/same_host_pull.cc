#include "collectives/transport/same_host_pull.h"

#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "collectives/store/store_auth.h"
#include "common/os_error.h"

namespace ckpt::coll {
namespace {

// The machine (its boot id), this process's pid namespace, where pids mean the same process, and its network
// namespace, so that ranks which see different networks (separate containers, hosts simulated with network
// namespaces) keep to the network as ranks of different machines do. Empty where any is unknown: no pulling.
std::string HostIdentity() {
  std::ifstream boot_id_file("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  struct stat pid_namespace = {}, net_namespace = {};
  if (!std::getline(boot_id_file, boot_id) || boot_id.empty() || stat("/proc/self/ns/pid", &pid_namespace) != 0 ||
      stat("/proc/self/ns/net", &net_namespace) != 0) {
    return "";
  }
  return boot_id + "/" + std::to_string(pid_namespace.st_dev) + ":" + std::to_string(pid_namespace.st_ino) + "/" +
         std::to_string(net_namespace.st_dev) + ":" + std::to_string(net_namespace.st_ino);
}

// Reads `size` bytes at `address` in `pid` into `dst`; 0 or the errno that stopped it (EIO: the read came up short).
int ReadRemote(pid_t pid, uint64_t address, void* dst, uint64_t size) {
  uint64_t done = 0;
  while (done < size) {
    const iovec local{static_cast<char*>(dst) + done, static_cast<size_t>(size - done)};
    const iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(address + done)),
                       static_cast<size_t>(size - done)};
    const ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno;
    if (got == 0) return EIO;
    done += static_cast<uint64_t>(got);
  }
  return 0;
}

}  // namespace

Result<PullableProcess> PullableProcess::Create() {
  ASSIGN_OR_RETURN(const std::string random, store_auth::RandomBytes(2 * sizeof(uint64_t)));
  auto probe = std::make_unique<uint64_t>();
  uint64_t check_base = 0;
  std::memcpy(probe.get(), random.data(), sizeof(uint64_t));
  std::memcpy(&check_base, random.data() + sizeof(uint64_t), sizeof(uint64_t));
  const std::string host = HostIdentity();
  std::string description;
  if (!host.empty()) {
    description = host + " " + std::to_string(getpid()) + " " +
                  std::to_string(reinterpret_cast<uintptr_t>(probe.get())) + " " + std::to_string(*probe);
  }
  return PullableProcess(std::move(probe), host, std::move(description), check_base);
}

uint64_t PullableProcess::NextCheckValue() {
  uint64_t value = check_base_ + ++checks_issued_;
  if (value == 0) value = check_base_ + ++checks_issued_;
  return value;
}

pid_t PullableProcess::Probe(std::string_view description) const {
  std::istringstream fields{std::string(description)};
  std::string their_host;
  long long pid = 0;
  uint64_t address = 0, value = 0;
  if (host_.empty() || !(fields >> their_host >> pid >> address >> value) || their_host != host_ || pid <= 0) {
    return 0;
  }
  uint64_t read_back = 0;
  if (ReadRemote(static_cast<pid_t>(pid), address, &read_back, sizeof read_back) != 0 || read_back != value) return 0;
  return static_cast<pid_t>(pid);
}

Status PullFrom(pid_t pid, const PullDescriptor& descriptor, void* dst, const std::string& peer) {
  const int err = ReadRemote(pid, descriptor.address, dst, descriptor.size);
  if (err == ESRCH) {
    return PeerFailed(peer + " exited before its " + std::to_string(descriptor.size) + " bytes were read");
  }
  if (err != 0) {
    return PeerFailed("reading " + std::to_string(descriptor.size) + " bytes from " + peer +
                      "'s memory failed: " + OsErrorText(err));
  }
  uint64_t check = 0;
  if (ReadRemote(pid, descriptor.check_address, &check, sizeof check) != 0 || check != descriptor.check_value) {
    return PeerFailed(peer + " withdrew its " + std::to_string(descriptor.size) +
                      " bytes while they were read (it gave up on the transfer or exited)");
  }
  return Status::Ok();
}

}  // namespace ckpt::coll

#include "collectives/transport/same_host_pull.h"

#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

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

// A position in a list of runs (as iovecs), handing out what is left of them, at most IOV_MAX at a time.
class RunCursor {
 public:
  explicit RunCursor(std::vector<iovec> runs) : runs_(std::move(runs)) {}
  bool done() {
    while (run_ < runs_.size() && within_ == runs_[run_].iov_len) ++run_, within_ = 0;
    return run_ == runs_.size();
  }
  // What is left, from the current position: at most IOV_MAX iovecs into `out`; returns how many.
  size_t Fill(iovec* out) const {
    size_t used = 0;
    for (size_t r = run_; r < runs_.size() && used < IOV_MAX; ++r) {
      const size_t skip = r == run_ ? within_ : 0;
      if (runs_[r].iov_len > skip)
        out[used++] = iovec{static_cast<char*>(runs_[r].iov_base) + skip, runs_[r].iov_len - skip};
    }
    return used;
  }
  void Advance(uint64_t bytes) {
    while (bytes > 0) {
      const uint64_t taken = std::min<uint64_t>(bytes, runs_[run_].iov_len - within_);
      bytes -= taken, within_ += taken;
      if (within_ == runs_[run_].iov_len) ++run_, within_ = 0;
    }
  }

 private:
  std::vector<iovec> runs_;
  size_t run_ = 0;
  size_t within_ = 0;  // bytes of runs_[run_] already passed
};

// Reads the bytes of `remote` (runs of `pid`'s memory, in order) into `local` (runs of this process's), as many as
// both hold; 0 or the errno that stopped it (EIO: the read came up short).
int ReadRemote(pid_t pid, std::vector<iovec> remote, std::vector<iovec> local) {
  RunCursor from(std::move(remote)), to(std::move(local));
  iovec from_now[IOV_MAX], to_now[IOV_MAX];
  while (!from.done() && !to.done()) {
    const size_t from_count = from.Fill(from_now), to_count = to.Fill(to_now);
    const ssize_t got = process_vm_readv(pid, to_now, to_count, from_now, from_count, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno;
    if (got == 0) return EIO;
    from.Advance(static_cast<uint64_t>(got));
    to.Advance(static_cast<uint64_t>(got));
  }
  return 0;
}

iovec At(uint64_t address, uint64_t size) {
  return iovec{reinterpret_cast<void*>(static_cast<uintptr_t>(address)), static_cast<size_t>(size)};
}

int ReadRemote(pid_t pid, uint64_t address, void* dst, uint64_t size) {
  return ReadRemote(pid, {At(address, size)}, {iovec{dst, static_cast<size_t>(size)}});
}

// A pull's failure to read its sender's memory (`err`, an errno or 0), naming the sender.
Status PullFailure(int err, const PullDescriptor& descriptor, const std::string& peer) {
  if (err == 0) return Status::Ok();
  if (err == ESRCH) {
    return PeerFailed(peer + " exited before its " + std::to_string(descriptor.size) + " bytes were read");
  }
  return PeerFailed("reading " + std::to_string(descriptor.size) + " bytes from " + peer +
                    "'s memory failed: " + OsErrorText(err));
}

// Where the bytes of a pulled send lie in its sender: at `descriptor.address`, or in the runs listed there.
Result<std::vector<iovec>> SendersRuns(pid_t pid, const PullDescriptor& descriptor, const std::string& peer) {
  if (descriptor.run_count == 0) return std::vector<iovec>{At(descriptor.address, descriptor.size)};
  if (descriptor.run_count > kMaxPulledRuns) {
    return Corrupt(peer + " announced " + std::to_string(descriptor.run_count) + " runs for a send, more than " +
                   std::to_string(kMaxPulledRuns));
  }
  std::vector<PulledRun> listed(descriptor.run_count);
  RETURN_IF_ERROR(PullFailure(ReadRemote(pid, descriptor.address, listed.data(), listed.size() * sizeof(PulledRun)),
                              descriptor, peer));
  std::vector<iovec> runs;
  uint64_t total = 0;
  for (const PulledRun& run : listed) {
    runs.push_back(At(run.address, run.size));
    total += run.size;
  }
  if (total != descriptor.size) {
    return Corrupt(peer + "'s send lists runs of " + std::to_string(total) + " bytes for its " +
                   std::to_string(descriptor.size));
  }
  return runs;
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

Status PullFrom(pid_t pid, const PullDescriptor& descriptor, const std::vector<MemoryRun>& runs,
                const std::string& peer) {
  std::vector<iovec> local;
  uint64_t room = 0;
  for (const MemoryRun& run : runs) {
    local.push_back(iovec{run.data, static_cast<size_t>(run.size)});
    room += run.size;
  }
  if (room != descriptor.size) {
    return Mismatch(peer + " announced " + std::to_string(descriptor.size) + " bytes for a receive of " +
                    std::to_string(room));
  }
  ASSIGN_OR_RETURN(std::vector<iovec> remote, SendersRuns(pid, descriptor, peer));
  RETURN_IF_ERROR(PullFailure(ReadRemote(pid, std::move(remote), std::move(local)), descriptor, peer));
  uint64_t check = 0;
  if (ReadRemote(pid, descriptor.check_address, &check, sizeof check) != 0 || check != descriptor.check_value) {
    return PeerFailed(peer + " withdrew its " + std::to_string(descriptor.size) +
                      " bytes while they were read (it gave up on the transfer or exited)");
  }
  return Status::Ok();
}

}  // namespace ckpt::coll

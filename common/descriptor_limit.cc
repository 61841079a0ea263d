#include "common/descriptor_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <string>

#include "common/os_error.h"

namespace ckpt {
namespace {

// What a rank holds besides its connections to the other ranks: at least the standard streams and the I/O workers'
// pipes; at most also the trainer's own files, the data files a load reads at once and UCX's sockets and pipes.
constexpr uint64_t kFewestBesides = 16;
constexpr uint64_t kMostBesides = 256;
constexpr uint64_t kLinksPerPeer = 2;  // the link this rank opened to it and the one it accepted from it
// A hard limit of "unlimited" is not taken at its word: the kernel caps descriptors at fs.nr_open (2^20 by default).
constexpr uint64_t kMostRaised = 1ull << 20;

uint64_t Needed(const DescriptorUse& use) { return use.store + kLinksPerPeer * use.peers + kFewestBesides; }

uint64_t HardLimit(const struct rlimit& limit) {
  return limit.rlim_max == RLIM_INFINITY ? kMostRaised : static_cast<uint64_t>(limit.rlim_max);
}

}  // namespace

void RaiseDescriptorLimit() {
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return;
  struct rlimit raised = limit;
  raised.rlim_cur = std::min(HardLimit(limit), kMostRaised);
  if (raised.rlim_cur > limit.rlim_cur) (void)setrlimit(RLIMIT_NOFILE, &raised);
}

bool HardLimitHolds(const DescriptorUse& use) {
  struct rlimit limit;
  return getrlimit(RLIMIT_NOFILE, &limit) == 0 && HardLimit(limit) >= Needed(use);
}

Status EnsureDescriptors(int rank, int world_size, const DescriptorUse& use) {
  const uint64_t store = use.store;
  const uint64_t peers = use.peers;
  const uint64_t links = kLinksPerPeer * peers;
  const uint64_t connections = store + links;
  const uint64_t wanted = connections + kMostBesides, needed = Needed(use);
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return OsError("cannot read RLIMIT_NOFILE", errno);
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= wanted) return Status::Ok();
  const uint64_t hard = HardLimit(limit);
  if (hard < needed) {
    return Status(Code::kUnsupported,
                  "rank " + std::to_string(rank) + " of " + std::to_string(world_size) + " needs at least " +
                      std::to_string(needed) + " file descriptors (" +
                      (store > 0 ? std::to_string(store) + " for the store's connections, " : std::string()) +
                      std::to_string(links) + " for links to and from " + std::to_string(peers) +
                      " other ranks, plus " + std::to_string(kFewestBesides) + "; " + std::to_string(wanted) +
                      " to be safe), but the hard limit RLIMIT_NOFILE is " + std::to_string(limit.rlim_max) +
                      ": raise it (ulimit -Hn as root, nofile in /etc/security/limits.conf, LimitNOFILE= of a "
                      "systemd unit, or the job scheduler's setting)");
  }
  struct rlimit raised = limit;
  raised.rlim_cur = std::min(hard, kMostRaised);
  if (setrlimit(RLIMIT_NOFILE, &raised) != 0 && limit.rlim_cur < needed) {
    return OsError("cannot raise the soft RLIMIT_NOFILE from " + std::to_string(limit.rlim_cur) + " to " +
                       std::to_string(raised.rlim_cur) + " (" + std::to_string(needed) + " needed)",
                   errno);
  }
  return Status::Ok();
}

}  // namespace ckpt

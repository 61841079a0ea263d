// Within one host, a rank copies what a peer sends it straight out of the peer's memory (process_vm_readv: one copy,
// made by the kernel) instead of through UCX's shared-memory FIFO, where the sender copies in, the receiver copies
// out, and the sender waits for the receiver to be scheduled every few MiB. UCX 1.13's own cross-memory path (CMA)
// is not used under peer error handling, which the transport needs to notice dead peers.
//
// Safety: a rank pulls only from a process it has proven to be the peer (it read back a random value the peer
// published, at the address the peer published), and after every pull it reads back a second value the sender keeps
// in place only while the transfer stands. A sender that gave up on the transfer, exited, or whose pid now names
// another process fails the pull instead of handing over stale or foreign bytes.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collectives/transport/transport.h"
#include "common/status.h"

namespace ckpt::coll {

// What a receiver needs to pull one send: where its bytes lie in the sender, and the word that vouches for them.
struct PullDescriptor {
  uint64_t address = 0;  // of the bytes, or of the list of runs they lie in (PulledRun) where run_count is set
  uint64_t size = 0;
  uint64_t check_address = 0;
  uint64_t check_value = 0;
  uint64_t run_count = 0;  // 0: the bytes lie together at `address`
};

// One run of a send scattered over its sender's memory (TransferSend::runs), as the sender lists them for a pull.
struct PulledRun {
  uint64_t address = 0;
  uint64_t size = 0;
};

// The most runs a receiver reads the list of: more is a corrupt descriptor (the load scatters at most 65,536).
inline constexpr uint64_t kMaxPulledRuns = 1 << 20;

// This process as same-host peers find it: its host, its pid, and a random value at a fixed address.
class PullableProcess {
 public:
  // Fails only if the kernel gives no random bytes.
  static Result<PullableProcess> Create();

  // "<host> <pid> <address> <value>", which Probe reads; <host> names the machine and the pid and network
  // namespaces. Empty where they are unknown.
  const std::string& description() const { return description_; }

  // The pid of the process `description` (a PullableProcess's description) names, if this process can read its
  // memory (this process itself included): same machine and namespaces, and the published value read back at the
  // published address. 0 otherwise (another host or namespace, a refusal such as Yama's ptrace scope, a malformed
  // description, or this process's own host unknown).
  pid_t Probe(std::string_view description) const;

  // A new value for a send's check word: never 0 (a withdrawn send's word), never the same twice from one
  // PullableProcess, and from a random start, so that memory reused after a send was withdrawn is unlikely to hold it.
  uint64_t NextCheckValue();

 private:
  PullableProcess(std::unique_ptr<uint64_t> probe, std::string host, std::string description, uint64_t check_base)
      : probe_(std::move(probe)),
        host_(std::move(host)),
        description_(std::move(description)),
        check_base_(check_base) {}

  std::unique_ptr<uint64_t> probe_;  // a heap cell, so its address outlives moves of this object
  std::string host_;                 // read once: a probe per peer compares against it
  std::string description_;
  uint64_t check_base_;
  uint64_t checks_issued_ = 0;
};

// Copies the `descriptor.size` bytes `descriptor` names in process `pid` into `runs`, in order, then reads back the
// check word: kPeerFailed naming `peer` if the process is gone, refuses, or no longer vouches for the bytes;
// kMismatch where the runs do not hold exactly `descriptor.size` bytes; kCorrupt for a list of runs that is too long
// or does not add up to that size.
Status PullFrom(pid_t pid, const PullDescriptor& descriptor, const std::vector<MemoryRun>& runs,
                const std::string& peer);

}  // namespace ckpt::coll

// Test-only fault hooks. A build with CKPT_FAULT_INJECTION defined (the CMake option of that name, which
// tools/test.sh turns on) reads the variables below, so that tests can make I/O fail or stop short, or a rank die,
// where real faults are hard to provoke. Without it every hook is a constant: a library built for users carries
// neither the code nor the variables' names, and no environment can make it misbehave on purpose.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#ifdef CKPT_FAULT_INJECTION
#include <cerrno>
#include <thread>

#include "common/settings.h"
#endif

namespace ckpt::fault {

// CKPT_FAULT_EIO_PATH: every read or write of a file whose path contains this text fails with EIO, as a failing
// disk would (in the I/O backends, so in worker processes too: they inherit the environment).
inline constexpr char kEioPathVar[] = "CKPT_FAULT_EIO_PATH";
// CKPT_FAULT_SHORT_TRANSFER_BYTES: every read or write attempt asks the kernel for at most this many bytes, so each
// request completes short and must be resumed. A multiple of 4096 keeps O_DIRECT requests aligned.
inline constexpr char kShortTransferVar[] = "CKPT_FAULT_SHORT_TRANSFER_BYTES";
// CKPT_FAULT_EXIT_BEFORE_EXCHANGE: the rank with this number exits abruptly right before a load's data exchange, as
// a crashed peer would; RANK@ROUND: before the exchange of that round (from 0), while its peers read the next one.
inline constexpr char kExitBeforeExchangeVar[] = "CKPT_FAULT_EXIT_BEFORE_EXCHANGE";
// CKPT_FAULT_STOP_BEFORE_EXCHANGE: the rank with this number stops (SIGSTOP) right before a load's data exchange, as
// a hung peer would: alive, connected, silent. RANK@ROUND as above.
inline constexpr char kStopBeforeExchangeVar[] = "CKPT_FAULT_STOP_BEFORE_EXCHANGE";
// CKPT_FAULT_AGENT_DIES_ON_PUSH_ASK: the ckpt-agent of the node with this name dies (SIGKILL) when a peer asks it to
// send files for a fetch, as a node lost after it told the fetching peer what it holds.
inline constexpr char kAgentDiesOnPushAskVar[] = "CKPT_FAULT_AGENT_DIES_ON_PUSH_ASK";
// CKPT_FAULT_LISTEN_DELAY_MS: a socket bound by AgentListener (collectives/agent/agent_socket.h) starts listening only
// this many milliseconds later, as when the ckpt-agent that bound it is preempted there.
inline constexpr char kListenDelayVar[] = "CKPT_FAULT_LISTEN_DELAY_MS";
// CKPT_FAULT_STAGING_PAUSE_MS: a save's staging pauses this many milliseconds before each window it copies, and
// before each replica it checksums (CKPT_SAVE_CHECK_REPLICAS), as a slow copy would, so that a test can see what the
// I/O workers, or the trainer, do meanwhile.
inline constexpr char kStagingPauseVar[] = "CKPT_FAULT_STAGING_PAUSE_MS";
// CKPT_FAULT_DIRECTORY_SYNC_EIO: syncing the directory whose path is exactly this text, as the library spells it,
// fails with EIO (in io::SyncDirectory, which every directory sync goes through), so that a test can prove the
// library syncs that directory. A whole path, unlike CKPT_FAULT_EIO_PATH's fragment: every directory's path contains
// its parent's.
inline constexpr char kDirectorySyncEioVar[] = "CKPT_FAULT_DIRECTORY_SYNC_EIO";
// CKPT_FAULT_RETENTION_PAUSE_MS: each retention pass of a manager pauses this many milliseconds first, as the
// removal of a large step would take, so that a test can see that saves do not wait for it.
inline constexpr char kRetentionPauseVar[] = "CKPT_FAULT_RETENTION_PAUSE_MS";
// CKPT_FAULT_LOAD_ROUND_BYTES: a load's read-once rounds hold at most this many bytes each (instead of 64 to 128
// MiB), so that a test's small state loads in many rounds.
inline constexpr char kLoadRoundBytesVar[] = "CKPT_FAULT_LOAD_ROUND_BYTES";
// CKPT_FAULT_NO_USERFAULTFD: any value but empty makes userfaultfd look refused to copy-on-write saves, as a kernel
// without it or a sandbox forbidding it would, so that a test sees them fall back to copying at the call.
inline constexpr char kNoUserFaultFdVar[] = "CKPT_FAULT_NO_USERFAULTFD";
// CKPT_FAULT_UNPROTECT_EAGAIN: a copy-on-write save's stager finds each lift of a stripe's write protection refused
// with EAGAIN this many times before it is tried, as the kernel refuses it while an event (a madvise, unmap, mremap
// or fork) waits unread by the fault handler.
inline constexpr char kUnprotectRefusedVar[] = "CKPT_FAULT_UNPROTECT_EAGAIN";
// CKPT_FAULT_NO_SCATTER: any value but empty makes loads treat their transport as one that cannot scatter transfers
// over runs of memory (Transport::Scatters), so that a test can compare a load with and without scattering.
inline constexpr char kNoScatterVar[] = "CKPT_FAULT_NO_SCATTER";

#ifdef CKPT_FAULT_INJECTION

inline constexpr bool kCompiledIn = true;

// The errno an I/O attempt on `path` is made to fail with, or 0.
inline int InjectedIoError(const std::string& path) {
  const std::string pattern = settings::StringFromEnv(kEioPathVar);
  return !pattern.empty() && path.find(pattern) != std::string::npos ? EIO : 0;
}

// How many of `length` bytes one I/O attempt may ask for.
inline uint64_t LimitTransfer(uint64_t length) {
  const uint64_t limit = settings::PositiveFromEnv(kShortTransferVar, length);
  return limit < length ? limit : length;
}

// Whether the setting of `var` ("RANK" or "RANK@ROUND"; a bare rank means round 0) names `rank` at `round`.
inline bool NamesRankAtRound(const char* var, int rank, size_t round) {
  const std::string value = settings::StringFromEnv(var);
  const size_t at = value.find('@');
  const std::string named_round = at == std::string::npos ? "0" : value.substr(at + 1);
  return value.substr(0, at) == std::to_string(rank) && named_round == std::to_string(round);
}

// Whether `rank` is the one told to die before the exchange of a load's round `round`.
inline bool ExitBeforeExchange(int rank, size_t round) { return NamesRankAtRound(kExitBeforeExchangeVar, rank, round); }

// Whether `rank` is the one told to stop before the exchange of a load's round `round`.
inline bool StopBeforeExchange(int rank, size_t round) { return NamesRankAtRound(kStopBeforeExchangeVar, rank, round); }

// Whether the agent of node `node` is the one told to die when asked to push files for a fetch.
inline bool AgentDiesOnPushAsk(const std::string& node) {
  return settings::StringFromEnv(kAgentDiesOnPushAskVar) == node;
}

// How long to wait between binding a socket and listening on it.
inline std::chrono::milliseconds ListenDelay() {
  return std::chrono::milliseconds(settings::PositiveFromEnv(kListenDelayVar, 0));
}

inline void PauseBeforeStaging() {
  std::this_thread::sleep_for(std::chrono::milliseconds(settings::PositiveFromEnv(kStagingPauseVar, 0)));
}

inline void PauseBeforeRetention() {
  std::this_thread::sleep_for(std::chrono::milliseconds(settings::PositiveFromEnv(kRetentionPauseVar, 0)));
}

// The bytes a load's round may hold, `bytes` unless a test asks for fewer.
inline uint64_t LoadRoundBytes(uint64_t bytes) {
  const uint64_t limit = settings::PositiveFromEnv(kLoadRoundBytesVar, bytes);
  return limit < bytes ? limit : bytes;
}

// Whether copy-on-write saves are to find userfaultfd refused.
inline bool NoUserFaultFd() { return !settings::StringFromEnv(kNoUserFaultFdVar).empty(); }

// Whether loads are to scatter no transfer.
inline bool NoScatter() { return !settings::StringFromEnv(kNoScatterVar).empty(); }

// Whether the stager's `attempt`-th lift (from 0) of one stripe's protection is to be refused with EAGAIN.
inline bool RefuseUnprotect(uint64_t attempt) { return attempt < settings::PositiveFromEnv(kUnprotectRefusedVar, 0); }

// The errno a sync of the directory `path` is made to fail with, or 0.
inline int InjectedDirectorySyncError(const std::string& path) {
  const std::string failing = settings::StringFromEnv(kDirectorySyncEioVar);
  return !failing.empty() && path == failing ? EIO : 0;
}

#else

inline constexpr bool kCompiledIn = false;
constexpr int InjectedIoError(const std::string&) { return 0; }
constexpr uint64_t LimitTransfer(uint64_t length) { return length; }
constexpr bool ExitBeforeExchange(int, size_t) { return false; }
constexpr bool StopBeforeExchange(int, size_t) { return false; }
inline bool AgentDiesOnPushAsk(const std::string&) { return false; }
constexpr std::chrono::milliseconds ListenDelay() { return std::chrono::milliseconds(0); }
inline void PauseBeforeStaging() {}
inline void PauseBeforeRetention() {}
inline int InjectedDirectorySyncError(const std::string&) { return 0; }
constexpr uint64_t LoadRoundBytes(uint64_t bytes) { return bytes; }
constexpr bool NoUserFaultFd() { return false; }
constexpr bool RefuseUnprotect(uint64_t) { return false; }
constexpr bool NoScatter() { return false; }

#endif

}  // namespace ckpt::fault

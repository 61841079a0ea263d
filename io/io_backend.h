// Private to io/: the backends that move a file job's requests between arena memory and a file descriptor. A backend
// knows nothing of segments or checksums; file_jobs.cc plans the requests and checks what came back.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace ckpt::io {

// Alignment of file offsets, lengths and buffers of direct I/O requests.
inline constexpr uint64_t kDirectAlignment = 4096;

enum class IoDirection { kWrite, kRead };

struct IoRequest {
  char* buffer = nullptr;
  uint64_t length = 0;
  uint64_t file_offset = 0;
  uint64_t transferred = 0;  // bytes done so far; a read may stop short at the end of the file
  uint32_t stalls = 0;       // consecutive attempts that moved no byte (EAGAIN, EINTR, zero-length writes)
};

// One file and what to do to it: every request of a Run targets the same descriptor.
struct IoTarget {
  IoDirection direction = IoDirection::kWrite;
  int fd = -1;
  bool direct = false;  // the descriptor has O_DIRECT: resubmissions must stay aligned
  const std::string* path = nullptr;
};

// What spare work has left after a piece: more to do now, more that needs requests still in flight (reads it
// checks), or nothing.
enum class SpareStep { kMore, kWaitForIo, kDone };
// Work the submitting thread does between completions (checksumming what is written or was read), one bounded piece
// a call. Work that looks at the requests (kWaitForIo) needs their state to be this thread's: the pwrite backend,
// whose own threads move the bytes, runs a read's spare work only once they are done.
using SpareWork = std::function<SpareStep()>;

class IoBackend {
 public:
  virtual ~IoBackend() = default;
  // Runs every request to completion: writes transfer all their bytes, reads until their length or the end of the
  // file. Runs spare_work (when set) until it reports kDone, overlapping it with the I/O; after kWaitForIo, calls it
  // again only once another request has completed, and not at all once none is left. On the first failure,
  // starts no new request, waits for those in flight, and returns the failure naming the file and offset.
  virtual Status Run(const IoTarget& target, std::vector<IoRequest>& requests, const SpareWork& spare_work) = 0;
  virtual const char* name() const = 0;
};

// What to do with a request after one attempt returned `result` (bytes transferred, or -errno).
enum class NextStep { kDone, kResubmit, kFail };
// Updates the request with the attempt's result. On kFail sets *error to the errno to report.
NextStep ApplyAttempt(const IoTarget& target, IoRequest& request, int64_t result, int* error);

// How many bytes the next attempt of `request` asks for: the rest of it (less when a test cuts transfers short).
uint64_t AttemptLength(const IoRequest& request);

// The status for an errno from a transfer (OsError: the code follows the errno); names the file and offset.
Status TransferError(const IoTarget& target, const IoRequest& request, int error);

// The most an io_uring registered buffer may hold (the kernel's limit).
inline constexpr uint64_t kMaxRegisteredBuffer = 1ull << 30;

// kUnsupported with the errno when the kernel refuses io_uring (seccomp, the io_uring_disabled sysctl, no support),
// so that the caller may fall back; another failure is kIo. `arena` (every request's buffers lie in it) is
// registered with the ring in buffers of `max_registered_buffer` bytes, where the kernel allows it; name() is then
// "io_uring+fixed".
Result<std::unique_ptr<IoBackend>> CreateUringBackend(uint32_t queue_depth, char* arena = nullptr,
                                                      uint64_t arena_size = 0,
                                                      uint64_t max_registered_buffer = kMaxRegisteredBuffer);
// kIo if the system refuses to start the threads.
Result<std::unique_ptr<IoBackend>> CreatePwriteBackend(uint32_t threads);

}  // namespace ckpt::io

#include "io/io_backend.h"

#include <algorithm>
#include <cerrno>

#include "common/fault_injection.h"
#include "common/os_error.h"

namespace ckpt::io {
namespace {

// A request that keeps moving no byte (EAGAIN forever, a write that writes nothing) fails instead of spinning.
constexpr uint32_t kMaxStalls = 1000;

NextStep Stall(IoRequest& request, int* error, int error_if_exhausted) {
  if (++request.stalls < kMaxStalls) return NextStep::kResubmit;
  *error = error_if_exhausted;
  return NextStep::kFail;
}

}  // namespace

NextStep ApplyAttempt(const IoTarget& target, IoRequest& request, int64_t result, int* error) {
  if (const int injected = fault::InjectedIoError(*target.path)) result = -injected;
  if (result < 0) {
    const int err = static_cast<int>(-result);
    if (err == EAGAIN || err == EINTR) return Stall(request, error, err);
    *error = err;
    return NextStep::kFail;
  }
  if (result == 0) {
    if (target.direction == IoDirection::kRead) return NextStep::kDone;  // end of file
    return Stall(request, error, EIO);
  }
  const uint64_t before = request.transferred;
  request.transferred += std::min<uint64_t>(static_cast<uint64_t>(result), request.length - request.transferred);
  if (request.transferred == request.length) return NextStep::kDone;
  if (target.direct && request.transferred % kDirectAlignment != 0) {
    // Direct reads end at an unaligned offset only at the end of the file. A direct write must resume aligned:
    // rewriting the partial block's bytes is harmless.
    if (target.direction == IoDirection::kRead) return NextStep::kDone;
    request.transferred -= request.transferred % kDirectAlignment;
  }
  if (request.transferred > before) {
    request.stalls = 0;
    return NextStep::kResubmit;
  }
  return Stall(request, error, EIO);
}

uint64_t AttemptLength(const IoRequest& request) { return fault::LimitTransfer(request.length - request.transferred); }

Status TransferError(const IoTarget& target, const IoRequest& request, int error) {
  const std::string verb = target.direction == IoDirection::kWrite ? "cannot write " : "cannot read ";
  const std::string offset = std::to_string(request.file_offset + request.transferred);
  return OsError(verb + Quoted(*target.path) + " at offset " + offset, error);
}

}  // namespace ckpt::io

// What every file implementing include/ckpt.h shares: the error object, the one translation of the core's Status
// into status codes (Report, Guard), and the copies of caller structs that respect their struct_size.
#pragma once

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "ckpt.h"
#include "common/status.h"
#include "runtime/core/box.h"

struct ckpt_error {
  int32_t status = CKPT_OK;
  std::string message;
};

// Status codes cross the C ABI as the numbers of ckpt::Code: the two lists must stay equal, entry by entry.
static_assert(static_cast<int32_t>(ckpt::Code::kOk) == CKPT_OK);
static_assert(static_cast<int32_t>(ckpt::Code::kInvalidArgument) == CKPT_E_INVALID_ARGUMENT);
static_assert(static_cast<int32_t>(ckpt::Code::kNotFound) == CKPT_E_NOT_FOUND);
static_assert(static_cast<int32_t>(ckpt::Code::kAlreadyExists) == CKPT_E_ALREADY_EXISTS);
static_assert(static_cast<int32_t>(ckpt::Code::kMismatch) == CKPT_E_MISMATCH);
static_assert(static_cast<int32_t>(ckpt::Code::kCorrupt) == CKPT_E_CORRUPT);
static_assert(static_cast<int32_t>(ckpt::Code::kVersion) == CKPT_E_VERSION);
static_assert(static_cast<int32_t>(ckpt::Code::kIo) == CKPT_E_IO);
static_assert(static_cast<int32_t>(ckpt::Code::kNoSpace) == CKPT_E_NO_SPACE);
static_assert(static_cast<int32_t>(ckpt::Code::kTimeout) == CKPT_E_TIMEOUT);
static_assert(static_cast<int32_t>(ckpt::Code::kPeerFailed) == CKPT_E_PEER_FAILED);
static_assert(static_cast<int32_t>(ckpt::Code::kUnsupported) == CKPT_E_UNSUPPORTED);
static_assert(static_cast<int32_t>(ckpt::Code::kNoMemory) == CKPT_E_NO_MEMORY);
static_assert(static_cast<int32_t>(ckpt::Code::kInProgress) == CKPT_E_IN_PROGRESS);
static_assert(static_cast<int32_t>(ckpt::Code::kInternal) == CKPT_E_INTERNAL);

namespace ckpt::capi {

inline int32_t Report(ckpt_error_t* err, const Status& status) {
  if (err != nullptr) {
    err->status = static_cast<int32_t>(status.code());
    err->message = status.message();
  }
  return static_cast<int32_t>(status.code());
}

// Runs `fn` (returning Status) and reports its outcome; exceptions become CKPT_E_NO_MEMORY or CKPT_E_INTERNAL.
template <typename Fn>
int32_t Guard(ckpt_error_t* err, Fn&& fn) {
  try {
    return Report(err, fn());
  } catch (const std::bad_alloc&) {
    return Report(err, Status(Code::kNoMemory, "out of memory"));
  } catch (const std::exception& e) {
    return Report(err, ckpt::Internal(std::string("unexpected exception: ") + e.what()));
  } catch (...) {
    return Report(err, ckpt::Internal("unexpected exception"));
  }
}

// Copies the caller's options over `defaults`, at most the caller's struct_size bytes (older callers pass a smaller
// struct; newer fields keep their defaults).
template <typename Options>
Status CopyOptions(const Options* user, Options* out, const char* name) {
  if (user == nullptr) return Status::Ok();
  if (user->struct_size < sizeof(uint32_t)) {
    return ckpt::InvalidArgument(std::string(name) + ".struct_size is " + std::to_string(user->struct_size) +
                                 ": initialise the struct with its _INIT macro");
  }
  std::memcpy(out, user, std::min<size_t>(user->struct_size, sizeof(Options)));
  out->struct_size = sizeof(Options);
  return Status::Ok();
}

// Copies `full` into the caller's info struct, at most the caller's struct_size bytes, keeping its struct_size.
template <typename Info>
Status FillInfo(const Info& full, Info* out, const char* name) {
  const uint32_t caller_size = out->struct_size;
  if (caller_size < sizeof(uint32_t)) {
    return ckpt::InvalidArgument(std::string(name) + ".struct_size is " + std::to_string(caller_size) +
                                 ": initialise the struct with its _INIT macro");
  }
  std::memcpy(out, &full, std::min<size_t>(caller_size, sizeof(Info)));
  out->struct_size = caller_size;
  return Status::Ok();
}

inline Status NullArgument(const char* name) { return ckpt::InvalidArgument(std::string(name) + " is NULL"); }

inline runtime::Shape ToShape(const uint64_t* values, uint32_t n) {
  return n == 0 ? runtime::Shape() : runtime::Shape(values, values + n);
}

}  // namespace ckpt::capi

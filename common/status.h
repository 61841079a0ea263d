// The one internal error type: a status code plus a precise message.
// Every layer returns Status (or Result<T>); only the C API layer turns it into C status codes (Report and Guard in
// runtime/capi/capi_internal.h).
#pragma once

#include <cstdint>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ckpt {

// Numbering mirrors CKPT_* in include/ckpt.h and is pinned: never renumber.
enum class Code : int32_t {
  kOk = 0,
  kInvalidArgument = 1,
  kNotFound = 2,
  kAlreadyExists = 3,
  kMismatch = 4,
  kCorrupt = 5,
  kVersion = 6,
  kIo = 7,
  kNoSpace = 8,
  kTimeout = 9,
  kPeerFailed = 10,
  kUnsupported = 11,
  kNoMemory = 12,
  kInProgress = 13,
  kInternal = 14,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with where the error surfaced ("loading 'w': ...").
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return Status(Code::kInvalidArgument, std::move(m)); }
inline Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
inline Status AlreadyExists(std::string m) { return Status(Code::kAlreadyExists, std::move(m)); }
inline Status Mismatch(std::string m) { return Status(Code::kMismatch, std::move(m)); }
inline Status Corrupt(std::string m) { return Status(Code::kCorrupt, std::move(m)); }
inline Status VersionError(std::string m) { return Status(Code::kVersion, std::move(m)); }
inline Status IoError(std::string m) { return Status(Code::kIo, std::move(m)); }
inline Status NoSpace(std::string m) { return Status(Code::kNoSpace, std::move(m)); }
inline Status Timeout(std::string m) { return Status(Code::kTimeout, std::move(m)); }
inline Status PeerFailed(std::string m) { return Status(Code::kPeerFailed, std::move(m)); }
inline Status Unsupported(std::string m) { return Status(Code::kUnsupported, std::move(m)); }
inline Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }

// A path, key or name as messages quote it: 'data/0-0.bin'. Whatever could garble a message, drive a terminal or
// pass for another name is escaped: a backslash, a quote, control characters (C0, DEL, C1) and bytes that are not
// UTF-8 (\\, \', \n, \x1b, \u0085, \xff); other UTF-8 is kept as it is (common/key_text.cc).
std::string Quoted(std::string_view text);

// Runs `work` at a background thread's boundary, where no exception may pass (std::terminate would end the
// trainer): nullopt if it returned, else what the exception means for that work (kNoMemory for bad_alloc,
// kInternal otherwise), for the caller to fail the work with. `where` names the work.
template <typename Work>
std::optional<Status> ExceptionIn(const std::string& where, Work&& work) {
  try {
    work();
    return std::nullopt;
  } catch (const std::bad_alloc&) {
    return Status(Code::kNoMemory, "out of memory " + where);
  } catch (const std::exception& e) {
    return Internal("unexpected exception " + where + ": " + e.what());
  } catch (...) {
    return Internal("unexpected exception of unknown type " + where);
  }
}

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}
  Result(Status status) : value_(std::move(status)) {}

  bool ok() const { return std::holds_alternative<T>(value_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(value_);
  }
  T& value() & { return std::get<T>(value_); }
  const T& value() const& { return std::get<T>(value_); }
  T&& value() && { return std::get<T>(std::move(value_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> value_;
};

}  // namespace ckpt

#define CKPT_CONCAT_INNER(a, b) a##b
#define CKPT_CONCAT(a, b) CKPT_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    ::ckpt::Status ckpt_status_ = (expr);        \
    if (!ckpt_status_.ok()) return ckpt_status_; \
  } while (0)

// ASSIGN_OR_RETURN(auto x, MakeX()) declares x from a Result or returns its Status.
#define ASSIGN_OR_RETURN(lhs, expr) ASSIGN_OR_RETURN_IMPL(CKPT_CONCAT(ckpt_result_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

#include "common/os_error.h"

#include <cerrno>
#include <cstring>

namespace ckpt {
namespace {

// strerror_r has an XSI form (returns int, fills buf) and a GNU form (returns the text); these overloads accept both.
[[maybe_unused]] const char* StrerrorResult(int /*xsi_result*/, const char* buf) { return buf; }
[[maybe_unused]] const char* StrerrorResult(const char* gnu_result, const char* /*buf*/) { return gnu_result; }

Code CodeForErrno(int error) {
  switch (error) {
    case ENOENT:
      return Code::kNotFound;
    case EEXIST:
      return Code::kAlreadyExists;
    case ENOSPC:
    case EDQUOT:
      return Code::kNoSpace;
    case ENOMEM:
      return Code::kNoMemory;
    default:
      return Code::kIo;
  }
}

}  // namespace

Status OsError(const std::string& what, int error) {
  return Status(CodeForErrno(error), what + ": " + OsErrorText(error));
}

std::string OsErrorText(int error) {
  char buf[256] = {0};
  return StrerrorResult(strerror_r(error, buf, sizeof buf), buf);
}

}  // namespace ckpt

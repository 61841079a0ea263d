// The one place an errno becomes a Status: call sites say what failed ("cannot open 'a/b'") and OsError appends
// the system's text and picks the code, so every layer reports the same errno the same way.
#pragma once

#include <string>

#include "common/status.h"

namespace ckpt {

// `what` failed with errno `error`: the message is "<what>: <system text>" and the code follows the errno:
// ENOENT kNotFound, EEXIST kAlreadyExists, ENOSPC and EDQUOT kNoSpace, ENOMEM kNoMemory, anything else kIo.
Status OsError(const std::string& what, int error);

// The system's text for errno `error` ("No such file or directory"), for log lines that are not a Status.
// Safe to call from any thread.
std::string OsErrorText(int error);

}  // namespace ckpt

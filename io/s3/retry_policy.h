// Which failed attempts are worth another, and how long to wait before it: S3's own advice (retry 5xx, SlowDown,
// RequestTimeout, InternalError, throttling, dropped connections and stalls; never other 4xx) with jittered
// exponential backoff.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "io/s3/http_transfer.h"

namespace ckpt::s3 {

enum class Verdict {
  kDone,   // the request succeeded
  kRetry,  // a transient failure: try again if attempts are left
  kFail,   // a failure another attempt would repeat
};

// The server's error code of a reply: its <Error><Code>, or "" when it has none (or is malformed).
std::string ErrorCodeOf(const HttpReply& reply);
bool IsRetryableErrorCode(const std::string& code);

// What an attempt's reply means for the request.
Verdict Judge(const HttpRequest& request, const HttpReply& reply);

// Full jitter: a uniformly random wait in [0, min(5 s, 100 ms * 2^retry)] before retry number `retry` (0 first).
std::chrono::milliseconds BackoffBefore(uint32_t retry);

}  // namespace ckpt::s3

#include "io/s3/retry_policy.h"

#include <algorithm>
#include <random>

#include "io/s3/xml_replies.h"

namespace ckpt::s3 {
namespace {

constexpr std::chrono::milliseconds kBackoffBase{100};
constexpr std::chrono::milliseconds kBackoffCap{5000};

bool IsTransientCurlFailure(const HttpReply& reply) {
  switch (reply.curl_code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:  // a connect timeout or a stall
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:  // the connection closed before Content-Length bytes came
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    case CURLE_WRITE_ERROR:  // a body past its bound: the server would send it again
    default:
      return false;
  }
}

bool IsRetryableStatus(long status) {
  return status == 408 || status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

}  // namespace

std::string ErrorCodeOf(const HttpReply& reply) {
  if (!LooksLikeErrorDocument(reply.body)) return "";
  Result<ErrorDocument> document = ParseErrorDocument(reply.body, "");
  return document.ok() ? document->code : "";
}

bool IsRetryableErrorCode(const std::string& code) {
  return code == "SlowDown" || code == "RequestTimeout" || code == "InternalError" || code == "ServiceUnavailable" ||
         code == "Throttling" || code == "ThrottlingException";
}

Verdict Judge(const HttpRequest& request, const HttpReply& reply) {
  if (reply.body_overflow) return Verdict::kFail;
  if (reply.curl_code != CURLE_OK) return IsTransientCurlFailure(reply) ? Verdict::kRetry : Verdict::kFail;
  if (reply.status >= 200 && reply.status < 300) {
    if (request.destination != nullptr && reply.received != request.destination_length) return Verdict::kFail;
    if (!request.success_may_be_error || !LooksLikeErrorDocument(reply.body)) return Verdict::kDone;
    return IsRetryableErrorCode(ErrorCodeOf(reply)) ? Verdict::kRetry : Verdict::kFail;
  }
  // S3 sends RequestTimeout as a 400: the code decides, then the status.
  if (IsRetryableStatus(reply.status) || IsRetryableErrorCode(ErrorCodeOf(reply))) return Verdict::kRetry;
  return Verdict::kFail;
}

std::chrono::milliseconds BackoffBefore(uint32_t retry) {
  thread_local std::minstd_rand random(std::random_device{}());
  auto ceiling = kBackoffBase * (1ll << std::min<uint32_t>(retry, 16));
  ceiling = std::min<std::chrono::milliseconds>(ceiling, kBackoffCap);
  std::uniform_int_distribution<int64_t> wait(0, ceiling.count());
  return std::chrono::milliseconds(wait(random));
}

}  // namespace ckpt::s3

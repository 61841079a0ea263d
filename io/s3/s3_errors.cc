#include "io/s3/s3_errors.h"

#include "io/s3/xml_replies.h"

namespace ckpt::s3 {
namespace {

std::string Target(const RequestContext& context) {
  return context.key.empty() ? UrlOf(context.bucket, "") : UrlOf(context.bucket, context.key);
}

std::string Attempts(const RequestOutcome& outcome) {
  return outcome.attempts > 1 ? " after " + std::to_string(outcome.attempts) + " attempts" : "";
}

// "HTTP 404 NoSuchKey (The specified key does not exist.)"
std::string HttpDescription(long status, const ErrorDocument& error) {
  std::string text = "HTTP " + std::to_string(status);
  if (!error.code.empty()) text += " " + error.code;
  if (!error.message.empty()) text += " (" + error.message + ")";
  return text;
}

bool CannotConnect(const HttpReply& reply) {
  switch (reply.curl_code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    case CURLE_OPERATION_TIMEDOUT:
      return !reply.request_sent;
    default:
      return false;
  }
}

Status TransportFailure(const Settings& settings, const RequestContext& context, const RequestOutcome& outcome) {
  const HttpReply& reply = outcome.reply;
  std::string failed = Target(context) + ": " + context.operation + " failed";
  if (CannotConnect(reply)) {
    return IoError("cannot reach the S3 endpoint " + settings.endpoint + " after " + std::to_string(outcome.attempts) +
                   " attempt" + (outcome.attempts > 1 ? "s" : "") + ": " + reply.curl_error);
  }
  if (outcome.every_attempt_stalled) {
    return Timeout(Target(context) + ": " + context.operation + " stalled (no byte moved for " +
                   std::to_string(settings.stall_timeout.count()) + " ms) in each of " +
                   std::to_string(outcome.attempts) + " attempts");
  }
  if (reply.curl_code == CURLE_PARTIAL_FILE) {
    return Corrupt(failed + ": the reply was truncated (" + std::to_string(reply.received) + " of " +
                   std::to_string(reply.content_length) + " bytes came)" + Attempts(outcome));
  }
  return IoError(failed + Attempts(outcome) + ": " + reply.curl_error);
}

Status HttpFailure(const Settings& settings, const RequestContext& context, const RequestOutcome& outcome,
                   const ErrorDocument& error) {
  const HttpReply& reply = outcome.reply;
  std::string description = HttpDescription(reply.status, error);
  std::string failed = Target(context) + ": " + context.operation + " failed" + Attempts(outcome) + ": ";
  if (error.code == "NoSuchBucket") {
    return NotFound("bucket " + Quoted(context.bucket) + " does not exist at " + settings.endpoint + " (" +
                    description + ")");
  }
  if (reply.status == 403 || error.code == "InvalidAccessKeyId" || error.code == "SignatureDoesNotMatch") {
    std::string check = settings.profile.empty() ? "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"
                                                 : "the profile " + Quoted(settings.profile);
    return InvalidArgument("access to " + Target(context) + " refused for access key " + settings.access_key_id + " (" +
                           description + "): check " + check);
  }
  if (reply.status == 412 && context.condition == Condition::Kind::kIfNoneMatch) {
    return AlreadyExists(Target(context) + " already exists (" + description + ")");
  }
  if (reply.status == 412 && context.condition == Condition::Kind::kIfMatch) {
    return Mismatch(Target(context) + " is no longer the object expected: its ETag changed (" + description + ")");
  }
  if (reply.status == 404) {
    if (error.code.empty()) description += " (no such key, or no such bucket)";
    return NotFound(failed + description);
  }
  if (reply.status == 400 || reply.status == 416) return InvalidArgument(failed + description);
  return IoError(failed + description);
}

}  // namespace

Status FailureStatus(const Settings& settings, const RequestContext& context, const HttpRequest& request,
                     const RequestOutcome& outcome) {
  const HttpReply& reply = outcome.reply;
  std::string failed = Target(context) + ": " + context.operation + " failed";
  if (reply.body_overflow) {
    bool success = reply.status >= 200 && reply.status < 300;
    uint64_t bound = !success ? kMaxXmlReplyBytes : request.destination ? request.destination_length : request.max_body;
    return Corrupt(failed + ": the reply's body is longer than the " + std::to_string(bound) +
                   " bytes accepted (HTTP " + std::to_string(reply.status) + ")");
  }
  if (reply.curl_code != CURLE_OK) return TransportFailure(settings, context, outcome);
  bool success = reply.status >= 200 && reply.status < 300;
  if (success && request.destination != nullptr && reply.received != request.destination_length) {
    return Corrupt(failed + ": the reply was truncated (" + std::to_string(reply.received) + " of " +
                   std::to_string(request.destination_length) + " bytes came)");
  }
  ErrorDocument error;
  if (LooksLikeErrorDocument(reply.body)) {
    Result<ErrorDocument> parsed = ParseErrorDocument(reply.body, failed);
    if (!parsed.ok()) return parsed.status();
    error = *parsed;
  }
  if (success) {  // CompleteMultipartUpload's 200 carrying an <Error>
    std::string description = "HTTP " + std::to_string(reply.status) + " carrying an error document " + error.code;
    if (!error.message.empty()) description += " (" + error.message + ")";
    if (IsRetryableErrorCode(error.code)) return IoError(failed + Attempts(outcome) + ": " + description);
    return Corrupt(failed + ": " + description);
  }
  return HttpFailure(settings, context, outcome, error);
}

}  // namespace ckpt::s3

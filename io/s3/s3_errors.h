// What a failed request means, as a Status whose message names the object, the HTTP status and the server's error
// code (the codes are s3_client.h's): one place decides it for every request the client makes.
#pragma once

#include <string>

#include "io/s3/request_runner.h"
#include "io/s3/s3_client.h"

namespace ckpt::s3 {

// The request as messages name it.
struct RequestContext {
  std::string bucket;
  std::string key;        // "" for a request on the bucket (listings)
  std::string operation;  // "GET", "PUT part 3", "POST uploads", ...
  Condition::Kind condition = Condition::Kind::kNone;
};

// The Status of an outcome whose verdict is not kDone.
Status FailureStatus(const Settings& settings, const RequestContext& context, const HttpRequest& request,
                     const RequestOutcome& outcome);

}  // namespace ckpt::s3

// One HTTP exchange with the S3 endpoint on a libcurl easy handle: the request signed by libcurl (CURLOPT_AWS_SIGV4),
// its body read straight from the caller's memory, and the reply's body written straight to its destination with
// its length checked. Retries and concurrency are request_runner.h's; what a reply means is s3_errors.h's.
#pragma once

#include <curl/curl.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/s3/curl_library.h"
#include "io/s3/s3_client.h"

namespace ckpt::s3 {

// What a request does, for RequestCounts and the HTTP method.
enum class RequestKind { kGet, kPut, kHead, kDelete, kList, kPost };
const char* MethodOf(RequestKind kind);

struct HttpRequest {
  RequestKind kind = RequestKind::kGet;
  std::string url;
  std::vector<std::string> headers;  // "Name: value", signed with the rest
  std::string_view upload;           // the body of a PUT or POST
  // A successful reply's body goes to `destination` when set (exactly destination_length bytes must come), else
  // to HttpReply::body (at most max_body bytes), as do error bodies (at most kMaxXmlReplyBytes); a body past its
  // bound ends the transfer (HttpReply::body_overflow).
  char* destination = nullptr;
  uint64_t destination_length = 0;
  uint64_t max_body = 0;
  // CompleteMultipartUpload: S3 may answer 200 and an <Error> document.
  bool success_may_be_error = false;
};

struct HttpReply {
  CURLcode curl_code = CURLE_OK;
  std::string curl_error;     // libcurl's detailed message, when curl_code is not CURLE_OK
  bool request_sent = false;  // the request went out (a timeout after it is a stall, not a connect failure)
  long status = 0;
  std::string body;
  uint64_t received = 0;  // body bytes received, wherever they went
  bool body_overflow = false;
  std::string etag;
  int64_t content_length = -1;
  int64_t last_modified_unix = -1;
};

// One attempt of a request: an easy handle configured from the settings, owning the header list and the state its
// callbacks write. Not copyable: libcurl holds pointers to it.
class Transfer {
 public:
  Transfer(const CurlApi& api, const Settings& settings, CURLSH* share, const HttpRequest& request);
  ~Transfer();
  Transfer(const Transfer&) = delete;
  Transfer& operator=(const Transfer&) = delete;

  // kInternal when libcurl refuses an option (a libcurl built without a feature ckpt needs).
  Status status() const { return setup_; }
  CURL* handle() const { return easy_; }
  // The reply, once libcurl reported the transfer done with `code`.
  HttpReply Finish(CURLcode code);

 private:
  static size_t OnBody(char* data, size_t size, size_t count, void* self);
  static size_t OnUpload(char* data, size_t size, size_t count, void* self);
  static int OnSeek(void* self, curl_off_t offset, int origin);
  static size_t OnHeader(char* data, size_t size, size_t count, void* self);
  Status Configure(const Settings& settings, CURLSH* share);
  template <typename Value>
  Status Set(CURLoption option, Value value);

  const CurlApi& api_;
  const HttpRequest& request_;
  CURL* easy_ = nullptr;
  curl_slist* headers_ = nullptr;
  Status setup_;
  uint64_t uploaded_ = 0;
  HttpReply reply_;
  char error_[CURL_ERROR_SIZE] = {};
};

}  // namespace ckpt::s3

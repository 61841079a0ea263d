#include "io/s3/http_transfer.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "io/s3/xml_replies.h"

namespace ckpt::s3 {
namespace {

// libcurl's own low-speed check counts whole seconds: a stall_timeout below a second is one second.
long StallSeconds(const Settings& settings) {
  return std::max<long>(1, static_cast<long>((settings.stall_timeout.count() + 999) / 1000));
}

bool IsSuccess(long status) { return status >= 200 && status < 300; }

// The value of header `name` in the header line `line` ("Name: value\r\n"), or "" for another header.
std::string_view HeaderValue(std::string_view line, std::string_view name) {
  if (line.size() <= name.size() || line[name.size()] != ':' || strncasecmp(line.data(), name.data(), name.size())) {
    return {};
  }
  line.remove_prefix(name.size() + 1);
  size_t begin = line.find_first_not_of(" \t");
  size_t end = line.find_last_not_of(" \t\r\n");
  return begin == std::string_view::npos ? std::string_view() : line.substr(begin, end - begin + 1);
}

}  // namespace

const char* MethodOf(RequestKind kind) {
  switch (kind) {
    case RequestKind::kGet:
    case RequestKind::kList:
      return "GET";
    case RequestKind::kPut:
      return "PUT";
    case RequestKind::kHead:
      return "HEAD";
    case RequestKind::kDelete:
      return "DELETE";
    case RequestKind::kPost:
      return "POST";
  }
  return "GET";
}

Transfer::Transfer(const CurlApi& api, const Settings& settings, CURLSH* share, const HttpRequest& request)
    : api_(api), request_(request) {
  easy_ = api_.easy_init();
  setup_ = easy_ == nullptr ? Status(Code::kNoMemory, "curl_easy_init failed") : Configure(settings, share);
}

Transfer::~Transfer() {
  if (easy_ != nullptr) api_.easy_cleanup(easy_);
  if (headers_ != nullptr) api_.slist_free_all(headers_);
}

template <typename Value>
Status Transfer::Set(CURLoption option, Value value) {
  CURLcode code = api_.easy_setopt(easy_, option, value);
  if (code == CURLE_OK) return Status::Ok();
  return Internal("libcurl refused option " + std::to_string(option) + ": " + api_.easy_strerror(code));
}

Status Transfer::Configure(const Settings& settings, CURLSH* share) {
  // The payload is not hashed (libcurl 7.88 would hash only CURLOPT_POSTFIELDS, never a read callback's body):
  // x-amz-content-sha256 says so and is signed like every header; TLS protects the body in transit.
  std::vector<std::string> headers = request_.headers;
  headers.push_back("x-amz-content-sha256: UNSIGNED-PAYLOAD");
  if (!settings.session_token.empty()) headers.push_back("x-amz-security-token: " + settings.session_token);
  for (const std::string& header : headers) {
    curl_slist* appended = api_.slist_append(headers_, header.c_str());
    if (appended == nullptr) return Status(Code::kNoMemory, "curl_slist_append failed");
    headers_ = appended;
  }
  std::string sigv4 = "aws:amz:" + settings.region + ":s3";
  RETURN_IF_ERROR(Set(CURLOPT_URL, request_.url.c_str()));
  RETURN_IF_ERROR(Set(CURLOPT_SHARE, share));
  RETURN_IF_ERROR(Set(CURLOPT_NOSIGNAL, 1L));
  RETURN_IF_ERROR(Set(CURLOPT_ERRORBUFFER, error_));
  RETURN_IF_ERROR(Set(CURLOPT_AWS_SIGV4, sigv4.c_str()));
  RETURN_IF_ERROR(Set(CURLOPT_USERNAME, settings.access_key_id.c_str()));
  RETURN_IF_ERROR(Set(CURLOPT_PASSWORD, settings.secret_access_key.c_str()));
  RETURN_IF_ERROR(Set(CURLOPT_HTTPHEADER, headers_));
  if (!settings.ca_bundle.empty()) RETURN_IF_ERROR(Set(CURLOPT_CAINFO, settings.ca_bundle.c_str()));
  RETURN_IF_ERROR(Set(CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(settings.connect_timeout.count())));
  RETURN_IF_ERROR(Set(CURLOPT_LOW_SPEED_LIMIT, 1L));
  RETURN_IF_ERROR(Set(CURLOPT_LOW_SPEED_TIME, StallSeconds(settings)));
  RETURN_IF_ERROR(Set(CURLOPT_FILETIME, 1L));
  RETURN_IF_ERROR(Set(CURLOPT_WRITEFUNCTION, &Transfer::OnBody));
  RETURN_IF_ERROR(Set(CURLOPT_WRITEDATA, this));
  RETURN_IF_ERROR(Set(CURLOPT_HEADERFUNCTION, &Transfer::OnHeader));
  RETURN_IF_ERROR(Set(CURLOPT_HEADERDATA, this));
  switch (request_.kind) {
    case RequestKind::kGet:
    case RequestKind::kList:
      return Status::Ok();
    case RequestKind::kHead:
      return Set(CURLOPT_NOBODY, 1L);
    case RequestKind::kDelete:
      return Set(CURLOPT_CUSTOMREQUEST, "DELETE");
    case RequestKind::kPut:
      RETURN_IF_ERROR(Set(CURLOPT_UPLOAD, 1L));
      RETURN_IF_ERROR(Set(CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(request_.upload.size())));
      break;
    case RequestKind::kPost:
      RETURN_IF_ERROR(Set(CURLOPT_POST, 1L));
      RETURN_IF_ERROR(Set(CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request_.upload.size())));
      break;
  }
  RETURN_IF_ERROR(Set(CURLOPT_READFUNCTION, &Transfer::OnUpload));
  RETURN_IF_ERROR(Set(CURLOPT_READDATA, this));
  RETURN_IF_ERROR(Set(CURLOPT_SEEKFUNCTION, &Transfer::OnSeek));
  return Set(CURLOPT_SEEKDATA, this);
}

size_t Transfer::OnBody(char* data, size_t size, size_t count, void* self) {
  auto* transfer = static_cast<Transfer*>(self);
  HttpReply& reply = transfer->reply_;
  const HttpRequest& request = transfer->request_;
  size_t length = size * count;
  long status = 0;
  transfer->api_.easy_getinfo(transfer->easy_, CURLINFO_RESPONSE_CODE, &status);
  bool to_destination = request.destination != nullptr && IsSuccess(status);
  uint64_t bound = !IsSuccess(status) ? kMaxXmlReplyBytes
                   : to_destination   ? request.destination_length
                                      : request.max_body;
  if (reply.received + length > bound) {
    reply.body_overflow = true;
    return 0;  // ends the transfer: CURLE_WRITE_ERROR
  }
  if (to_destination) {
    std::memcpy(request.destination + reply.received, data, length);
  } else {
    reply.body.append(data, length);
  }
  reply.received += length;
  return length;
}

size_t Transfer::OnUpload(char* data, size_t size, size_t count, void* self) {
  auto* transfer = static_cast<Transfer*>(self);
  std::string_view rest = transfer->request_.upload.substr(transfer->uploaded_);
  size_t length = std::min(rest.size(), size * count);
  std::memcpy(data, rest.data(), length);
  transfer->uploaded_ += length;
  return length;
}

int Transfer::OnSeek(void* self, curl_off_t offset, int origin) {
  auto* transfer = static_cast<Transfer*>(self);
  if (origin != SEEK_SET || offset < 0 || static_cast<uint64_t>(offset) > transfer->request_.upload.size()) {
    return CURL_SEEKFUNC_FAIL;
  }
  transfer->uploaded_ = static_cast<uint64_t>(offset);
  return CURL_SEEKFUNC_OK;
}

size_t Transfer::OnHeader(char* data, size_t size, size_t count, void* self) {
  auto* transfer = static_cast<Transfer*>(self);
  HttpReply& reply = transfer->reply_;
  std::string_view line(data, size * count);
  if (line.substr(0, 5) == "HTTP/") {  // a new reply (after a 100 Continue, say): forget the previous one's headers
    reply.etag.clear();
    reply.content_length = -1;
  } else if (std::string_view etag = HeaderValue(line, "ETag"); !etag.empty()) {
    reply.etag = etag;
  } else if (std::string_view length = HeaderValue(line, "Content-Length"); !length.empty()) {
    reply.content_length = std::strtoll(std::string(length).c_str(), nullptr, 10);
  }
  return line.size();
}

HttpReply Transfer::Finish(CURLcode code) {
  reply_.curl_code = code;
  if (code != CURLE_OK) reply_.curl_error = error_[0] != '\0' ? error_ : api_.easy_strerror(code);
  api_.easy_getinfo(easy_, CURLINFO_RESPONSE_CODE, &reply_.status);
  long request_bytes = 0;
  api_.easy_getinfo(easy_, CURLINFO_REQUEST_SIZE, &request_bytes);
  reply_.request_sent = request_bytes > 0;
  long file_time = -1;
  if (api_.easy_getinfo(easy_, CURLINFO_FILETIME, &file_time) == CURLE_OK && file_time >= 0) {
    reply_.last_modified_unix = file_time;
  }
  return std::move(reply_);
}

}  // namespace ckpt::s3

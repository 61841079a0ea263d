// Client::Create: the client of s3_client.h on libcurl (request_runner.h) — each call builds its requests, runs them,
// and reads the replies (xml_replies.h) or says why they failed (s3_errors.h).
#include "io/s3/s3_client.h"

#include "io/s3/request_runner.h"
#include "io/s3/request_url.h"
#include "io/s3/s3_errors.h"
#include "io/s3/xml_replies.h"

namespace ckpt::s3 {
namespace {

using Query = std::vector<std::pair<std::string, std::string>>;

constexpr uint32_t kMaxPartNumber = 10000;

bool IsMissing(const RequestOutcome& outcome) {
  return outcome.reply.curl_code == CURLE_OK && outcome.reply.status == 404 &&
         ErrorCodeOf(outcome.reply) != "NoSuchBucket";
}

// An ETag without its quotes: radosgw compares If-Match with the bare value (a quoted one never matches there), and
// AWS S3 accepts both.
std::string Unquoted(const std::string& etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') return etag.substr(1, etag.size() - 2);
  return etag;
}

std::string XmlEscaped(std::string_view text) {
  std::string escaped;
  for (char c : text) {
    switch (c) {
      case '&':
        escaped += "&amp;";
        break;
      case '<':
        escaped += "&lt;";
        break;
      case '>':
        escaped += "&gt;";
        break;
      default:
        escaped += c;
    }
  }
  return escaped;
}

std::string CompleteBody(const std::vector<PartUpload>& parts) {
  std::string body = "<CompleteMultipartUpload>";
  for (const PartUpload& part : parts) {
    body += "<Part><PartNumber>" + std::to_string(part.part_number) + "</PartNumber><ETag>" + XmlEscaped(part.etag) +
            "</ETag></Part>";
  }
  return body + "</CompleteMultipartUpload>";
}

class CurlClient final : public Client {
 public:
  explicit CurlClient(std::unique_ptr<RequestRunner> runner) : runner_(std::move(runner)) {}

  const Settings& settings() const override { return runner_->settings(); }
  RequestCounts counts() const override { return runner_->counts(); }

  Result<ObjectInfo> Head(const std::string& bucket, const std::string& key) override {
    HttpRequest request = Request(RequestKind::kHead, bucket, key);
    ASSIGN_OR_RETURN(RequestOutcome outcome, Perform({bucket, key, "HEAD"}, request));
    if (outcome.reply.content_length < 0) {
      return Corrupt(UrlOf(bucket, key) + ": HEAD failed: the reply has no Content-Length");
    }
    return InfoOf(outcome.reply);
  }

  Result<std::string> Get(const std::string& bucket, const std::string& key, uint64_t max_bytes,
                          ObjectInfo* info) override {
    HttpRequest request = Request(RequestKind::kGet, bucket, key);
    request.max_body = max_bytes;
    ASSIGN_OR_RETURN(RequestOutcome outcome, Perform({bucket, key, "GET"}, request));
    if (info != nullptr) *info = InfoOf(outcome.reply);
    return std::move(outcome.reply.body);
  }

  Status GetRanges(const std::string& bucket, std::vector<RangeRead>& reads) override {
    std::vector<HttpRequest> requests;
    std::vector<const RangeRead*> of_request;
    for (const RangeRead& read : reads) {
      if (read.length == 0) continue;
      HttpRequest request = Request(RequestKind::kGet, bucket, read.key);
      request.headers.push_back("Range: " + RangeOf(read));
      request.destination = read.destination;
      request.destination_length = read.length;
      requests.push_back(std::move(request));
      of_request.push_back(&read);
    }
    ASSIGN_OR_RETURN(RunResult result, runner_->Run(requests));
    if (!result.first_failure) return Status::Ok();
    size_t failed = *result.first_failure;
    RequestContext context{bucket, of_request[failed]->key, "GET " + RangeOf(*of_request[failed])};
    return FailureStatus(settings(), context, requests[failed], result.outcomes[failed]);
  }

  Result<std::string> Put(const std::string& bucket, const std::string& key, std::string_view body,
                          const Condition& condition) override {
    HttpRequest request = Request(RequestKind::kPut, bucket, key);
    request.upload = body;
    if (condition.kind == Condition::Kind::kIfNoneMatch) request.headers.push_back("If-None-Match: *");
    if (condition.kind == Condition::Kind::kIfMatch) {
      request.headers.push_back("If-Match: " + Unquoted(condition.etag));
    }
    ASSIGN_OR_RETURN(RequestOutcome outcome, Perform({bucket, key, "PUT", condition.kind}, request));
    return std::move(outcome.reply.etag);
  }

  Status Delete(const std::string& bucket, const std::string& key) override {
    return DeleteTolerant(Request(RequestKind::kDelete, bucket, key), {bucket, key, "DELETE"});
  }

  Result<std::vector<ListedObject>> List(const std::string& bucket, const std::string& prefix,
                                         uint64_t max_keys) override {
    std::vector<ListedObject> objects;
    std::string token;
    while (objects.size() < max_keys) {
      uint64_t page_keys = std::min<uint64_t>(settings().list_page_keys, max_keys - objects.size());
      Query query{{"list-type", "2"}, {"prefix", prefix}, {"max-keys", std::to_string(page_keys)}};
      if (!token.empty()) query.emplace_back("continuation-token", token);
      HttpRequest request = Request(RequestKind::kList, bucket, "", std::move(query));
      RequestContext context{bucket, prefix, "ListObjectsV2"};
      ASSIGN_OR_RETURN(RequestOutcome outcome, Perform(context, request));
      ASSIGN_OR_RETURN(ObjectPage page, ParseListObjectsResult(outcome.reply.body, Describe(context)));
      for (ListedObject& object : page.objects) {
        if (objects.size() < max_keys) objects.push_back(std::move(object));
      }
      if (!page.truncated) break;
      token = std::move(page.next_continuation_token);
    }
    return objects;
  }

  Result<std::string> CreateMultipartUpload(const std::string& bucket, const std::string& key) override {
    HttpRequest request = Request(RequestKind::kPost, bucket, key, {{"uploads", ""}});
    RequestContext context{bucket, key, "CreateMultipartUpload"};
    ASSIGN_OR_RETURN(RequestOutcome outcome, Perform(context, request));
    return ParseInitiateResult(outcome.reply.body, Describe(context));
  }

  Status UploadParts(const std::string& bucket, const std::string& key, const std::string& upload_id,
                     std::vector<PartUpload>& parts) override {
    std::vector<HttpRequest> requests;
    for (const PartUpload& part : parts) {
      if (part.part_number < 1 || part.part_number > kMaxPartNumber) {
        return InvalidArgument(UrlOf(bucket, key) + ": part number " + std::to_string(part.part_number) +
                               " is not in 1.." + std::to_string(kMaxPartNumber));
      }
      HttpRequest request = Request(RequestKind::kPut, bucket, key,
                                    {{"partNumber", std::to_string(part.part_number)}, {"uploadId", upload_id}});
      request.upload = std::string_view(part.data, part.length);
      requests.push_back(std::move(request));
    }
    ASSIGN_OR_RETURN(RunResult result, runner_->Run(requests));
    if (result.first_failure) {
      size_t failed = *result.first_failure;
      RequestContext context{bucket, key, "UploadPart " + std::to_string(parts[failed].part_number)};
      return FailureStatus(settings(), context, requests[failed], result.outcomes[failed]);
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      if (result.outcomes[i].reply.etag.empty()) {
        return Corrupt(UrlOf(bucket, key) + ": UploadPart " + std::to_string(parts[i].part_number) +
                       " failed: the reply has no ETag");
      }
      parts[i].etag = std::move(result.outcomes[i].reply.etag);
    }
    return Status::Ok();
  }

  Result<std::string> CompleteMultipartUpload(const std::string& bucket, const std::string& key,
                                              const std::string& upload_id,
                                              const std::vector<PartUpload>& parts) override {
    std::string body = CompleteBody(parts);
    HttpRequest request = Request(RequestKind::kPost, bucket, key, {{"uploadId", upload_id}});
    request.upload = body;
    request.success_may_be_error = true;
    RequestContext context{bucket, key, "CompleteMultipartUpload"};
    ASSIGN_OR_RETURN(RequestOutcome outcome, Perform(context, request));
    ASSIGN_OR_RETURN(std::string etag, ParseCompleteResult(outcome.reply.body, Describe(context)));
    if (!etag.empty()) return etag;
    // radosgw 16 answers <ETag></ETag>: the object's own ETag says it.
    ASSIGN_OR_RETURN(ObjectInfo info, Head(bucket, key));
    return info.etag;
  }

  Status AbortMultipartUpload(const std::string& bucket, const std::string& key,
                              const std::string& upload_id) override {
    return DeleteTolerant(Request(RequestKind::kDelete, bucket, key, {{"uploadId", upload_id}}),
                          {bucket, key, "AbortMultipartUpload"});
  }

  Result<std::vector<ListedUpload>> ListMultipartUploads(const std::string& bucket,
                                                         const std::string& prefix) override {
    std::vector<ListedUpload> uploads;
    std::string key_marker, upload_id_marker;
    while (true) {
      Query query{{"uploads", ""}, {"prefix", prefix}};
      if (!key_marker.empty()) query.emplace_back("key-marker", key_marker);
      if (!upload_id_marker.empty()) query.emplace_back("upload-id-marker", upload_id_marker);
      HttpRequest request = Request(RequestKind::kList, bucket, "", std::move(query));
      RequestContext context{bucket, prefix, "ListMultipartUploads"};
      ASSIGN_OR_RETURN(RequestOutcome outcome, Perform(context, request));
      ASSIGN_OR_RETURN(UploadPage page, ParseListUploadsResult(outcome.reply.body, Describe(context)));
      for (ListedUpload& upload : page.uploads) uploads.push_back(std::move(upload));
      if (!page.truncated) return uploads;
      key_marker = std::move(page.next_key_marker);
      upload_id_marker = std::move(page.next_upload_id_marker);
    }
  }

 private:
  HttpRequest Request(RequestKind kind, const std::string& bucket, const std::string& key, Query query = {}) const {
    HttpRequest request;
    request.kind = kind;
    request.url = RequestUrl(settings(), bucket, key, std::move(query));
    request.max_body = kMaxXmlReplyBytes;
    return request;
  }

  static std::string Describe(const RequestContext& context) {
    return UrlOf(context.bucket, context.key) + ": " + context.operation;
  }

  static std::string RangeOf(const RangeRead& read) {
    return "bytes=" + std::to_string(read.offset) + "-" + std::to_string(read.offset + read.length - 1);
  }

  static ObjectInfo InfoOf(const HttpReply& reply) {
    return ObjectInfo{reply.content_length >= 0 ? static_cast<uint64_t>(reply.content_length) : reply.received,
                      reply.etag, reply.last_modified_unix >= 0 ? reply.last_modified_unix : 0};
  }

  // One request; its outcome when it succeeded, else why it failed.
  Result<RequestOutcome> Perform(const RequestContext& context, const HttpRequest& request) {
    ASSIGN_OR_RETURN(RequestOutcome outcome, runner_->RunOne(request));
    if (outcome.verdict != Verdict::kDone) return FailureStatus(settings(), context, request, outcome);
    return outcome;
  }

  // A DELETE whose target is already gone (404 other than NoSuchBucket) succeeds.
  Status DeleteTolerant(const HttpRequest& request, const RequestContext& context) {
    ASSIGN_OR_RETURN(RequestOutcome outcome, runner_->RunOne(request));
    if (outcome.verdict == Verdict::kDone || IsMissing(outcome)) return Status::Ok();
    return FailureStatus(settings(), context, request, outcome);
  }

  std::unique_ptr<RequestRunner> runner_;
};

}  // namespace

Result<std::unique_ptr<Client>> Client::Create(const Settings& settings) {
  ASSIGN_OR_RETURN(const CurlApi* api, LoadCurl());
  if (settings.endpoint.rfind("http://", 0) != 0 && settings.endpoint.rfind("https://", 0) != 0) {
    return InvalidArgument("S3 settings: the endpoint " + Quoted(settings.endpoint) + " is not an http(s) URL");
  }
  if (settings.max_attempts == 0 || settings.connections == 0 || settings.list_page_keys == 0 ||
      settings.list_page_keys > 1000) {
    return InvalidArgument("S3 settings: max_attempts and connections must be at least 1, list_page_keys 1..1000");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<RequestRunner> runner, RequestRunner::Create(api, settings));
  return std::unique_ptr<Client>(new CurlClient(std::move(runner)));
}

}  // namespace ckpt::s3

// The XML documents S3 answers with, read through expat: error documents and the results of the multipart and
// listing requests. Every parser returns kCorrupt naming `what` (the request, e.g. "s3://b/k: POST uploads") for a
// document that is not well-formed XML, is too deep, or is not the document expected.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "io/s3/s3_client.h"

namespace ckpt::s3 {

// Replies larger than this (errors, listings, multipart results) are refused as kCorrupt before being parsed.
inline constexpr uint64_t kMaxXmlReplyBytes = 4ull << 20;

struct ErrorDocument {
  std::string code, message, resource, request_id;
};

// Whether `body` is an S3 <Error> document (its root element), cheaply, before parsing it.
bool LooksLikeErrorDocument(std::string_view body);
Result<ErrorDocument> ParseErrorDocument(std::string_view body, const std::string& what);

// InitiateMultipartUploadResult: the UploadId.
Result<std::string> ParseInitiateResult(std::string_view body, const std::string& what);
// CompleteMultipartUploadResult: the ETag, "" when the element is empty (radosgw 16). (A 200 carrying <Error> is told
// apart first with LooksLikeErrorDocument.)
Result<std::string> ParseCompleteResult(std::string_view body, const std::string& what);

struct ObjectPage {
  std::vector<ListedObject> objects;
  bool truncated = false;
  std::string next_continuation_token;
};
// ListBucketResult of ListObjectsV2.
Result<ObjectPage> ParseListObjectsResult(std::string_view body, const std::string& what);

struct UploadPage {
  std::vector<ListedUpload> uploads;
  bool truncated = false;
  std::string next_key_marker, next_upload_id_marker;
};
// ListMultipartUploadsResult.
Result<UploadPage> ParseListUploadsResult(std::string_view body, const std::string& what);

// "2026-12-02T12:00:00.000Z" (S3's timestamps) as Unix seconds; -1 when malformed.
int64_t ParseIsoTime(std::string_view text);

}  // namespace ckpt::s3

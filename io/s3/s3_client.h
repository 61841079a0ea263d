// An S3 client: the requests ckpt makes of an S3-compatible object store (AWS S3, GCS's XML API with HMAC keys,
// Ceph's radosgw, ...), through libcurl (loaded at run time; CURLOPT_AWS_SIGV4 signs every request) and expat (the
// XML of replies). Every request is retried with jittered exponential backoff on 5xx, SlowDown, connection resets
// and timeouts, and re-issued when it stalls; errors name the bucket, the key, the HTTP status and the server's
// error code. Thread-safe: the calls of several threads reuse each other's connections (request_runner.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ckpt::s3 {

// "s3://bucket/prefix": the bucket, and the key prefix without a leading or trailing '/' (may be empty).
struct Location {
  std::string bucket;
  std::string prefix;
};

inline constexpr std::string_view kUrlScheme = "s3://";
bool IsS3Url(std::string_view path);
// kInvalidArgument naming what is wrong: no bucket, a bucket name S3 refuses, an empty or '.'/'..' path component,
// "//" inside the prefix.
Result<Location> ParseUrl(std::string_view url);
// "s3://bucket/key".
std::string UrlOf(const std::string& bucket, const std::string& key);

enum class Addressing { kAuto, kPath, kVirtualHosted };

// Where and who: what ResolveSettings finds in the AWS conventions, which the C API's options may override.
struct Settings {
  std::string endpoint;  // "https://s3.<region>.amazonaws.com" unless AWS_ENDPOINT_URL(_S3) or the profile says
  std::string region = "us-east-1";
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty: none
  // kAuto: path-style for a custom endpoint or a bucket name with dots, virtual-hosted for AWS's own endpoints.
  Addressing addressing = Addressing::kAuto;
  std::string ca_bundle;  // AWS_CA_BUNDLE; empty: the system's CA store
  uint32_t max_attempts = 6;  // AWS_MAX_ATTEMPTS: attempts per request, the first included
  std::chrono::milliseconds connect_timeout{10000};
  // A request that moves no byte for this long is abandoned and re-issued (counts as an attempt).
  std::chrono::milliseconds stall_timeout{30000};
  uint32_t connections = 16;      // CKPT_S3_CONNECTIONS: requests in flight per parallel call
  uint64_t part_bytes = 16ull << 20;  // CKPT_S3_PART_BYTES: multipart part size (5 MiB .. 5 GiB)
  std::string profile;  // which profile the credentials came from, for messages ("" when from the environment)
  // Keys asked per ListObjectsV2 request (1..1000); tests lower it to page through a listing with few keys.
  uint32_t list_page_keys = 1000;
};

// From, in order: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN; the profile AWS_PROFILE (default
// "default") of AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials) and AWS_CONFIG_FILE (~/.aws/config: region,
// endpoint_url, s3.addressing_style); AWS_REGION / AWS_DEFAULT_REGION; AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL;
// CKPT_S3_ADDRESSING (path|virtual|auto), CKPT_S3_CONNECTIONS, CKPT_S3_PART_BYTES, CKPT_S3_STALL_MS.
// kInvalidArgument naming the variable or file line that is malformed, or when no credentials are found (naming
// where it looked).
Result<Settings> ResolveSettings();

struct ObjectInfo {
  uint64_t size = 0;
  std::string etag;
  int64_t last_modified_unix = 0;
};

// What a PUT requires of the key's current object.
struct Condition {
  enum class Kind { kNone, kIfNoneMatch, kIfMatch } kind = Kind::kNone;
  std::string etag;  // kIfMatch only
};

struct ListedObject {
  std::string key;
  uint64_t size = 0;
  int64_t last_modified_unix = 0;
};
struct ListedUpload {
  std::string key;
  std::string upload_id;
  int64_t initiated_unix = 0;
};

struct RangeRead {
  std::string key;
  uint64_t offset = 0;
  uint64_t length = 0;  // exactly this many bytes must come back, or kCorrupt "truncated" naming the object
  char* destination = nullptr;
};

struct PartUpload {
  uint32_t part_number = 0;  // 1..10000
  const char* data = nullptr;
  uint64_t length = 0;
  std::string etag;  // filled on success
};

// Counts of requests sent (attempts, retries included), for tests and benchmarks.
struct RequestCounts {
  uint64_t get = 0, put = 0, head = 0, del = 0, list = 0, post = 0, retries = 0;
};

// Status codes: kNotFound for a missing key (NoSuchKey) or bucket (NoSuchBucket, its message saying so);
// kInvalidArgument for refused credentials or signature (403: InvalidAccessKeyId, SignatureDoesNotMatch,
// AccessDenied), naming the access key id; kAlreadyExists for a failed kIfNoneMatch; kMismatch for a failed kIfMatch;
// kIo for an endpoint that cannot be reached (after the retries, with curl's reason) and for a server error that
// stays after the retries; kTimeout when every attempt stalled; kCorrupt for a reply that is malformed (bad XML, a
// body shorter or longer than its Content-Length or than the range asked, a 200 that carries an error document).
class Client {
 public:
  // kUnsupported naming libcurl.so.4 when libcurl cannot be loaded.
  static Result<std::unique_ptr<Client>> Create(const Settings& settings);
  virtual ~Client() = default;
  virtual const Settings& settings() const = 0;

  virtual Result<ObjectInfo> Head(const std::string& bucket, const std::string& key) = 0;
  // The whole object; kCorrupt when it is larger than max_bytes (read nothing past that).
  virtual Result<std::string> Get(const std::string& bucket, const std::string& key, uint64_t max_bytes,
                                  ObjectInfo* info = nullptr) = 0;
  // Runs the reads concurrently (up to settings().connections at a time); the first failure is returned after the
  // reads in flight end; no new read starts after it.
  virtual Status GetRanges(const std::string& bucket, std::vector<RangeRead>& reads) = 0;
  // Returns the new object's ETag.
  virtual Result<std::string> Put(const std::string& bucket, const std::string& key, std::string_view body,
                                  const Condition& condition = {}) = 0;
  // Deleting a missing key succeeds.
  virtual Status Delete(const std::string& bucket, const std::string& key) = 0;
  // Up to 1000 per request, following continuation tokens; at most max_keys in all.
  virtual Result<std::vector<ListedObject>> List(const std::string& bucket, const std::string& prefix,
                                                 uint64_t max_keys = UINT64_MAX) = 0;

  virtual Result<std::string> CreateMultipartUpload(const std::string& bucket, const std::string& key) = 0;
  // Uploads the parts concurrently (up to settings().connections at a time), filling their etags.
  virtual Status UploadParts(const std::string& bucket, const std::string& key, const std::string& upload_id,
                             std::vector<PartUpload>& parts) = 0;
  // `parts` in increasing part numbers. A 200 whose body is an <Error> is kIo/kCorrupt as its code says.
  virtual Result<std::string> CompleteMultipartUpload(const std::string& bucket, const std::string& key,
                                                      const std::string& upload_id,
                                                      const std::vector<PartUpload>& parts) = 0;
  // Aborting an upload the server no longer knows succeeds.
  virtual Status AbortMultipartUpload(const std::string& bucket, const std::string& key,
                                      const std::string& upload_id) = 0;
  virtual Result<std::vector<ListedUpload>> ListMultipartUploads(const std::string& bucket,
                                                                 const std::string& prefix) = 0;

  virtual RequestCounts counts() const = 0;
};

// One client per process, made on first use from ResolveSettings(); what every S3 path of ckpt uses. Settings
// resolved again when the environment changed since (a test that swaps credentials).
Result<Client*> SharedClient();

}  // namespace ckpt::s3

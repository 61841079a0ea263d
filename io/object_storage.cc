#include "io/object_storage.h"

#include <cstdio>
#include <map>
#include <mutex>
#include <random>

#include "io/s3/s3_client.h"

namespace ckpt::io {
namespace {

struct Address {
  s3::Client* client = nullptr;
  std::string bucket;
  std::string key;
};

Result<Address> AddressOf(const std::string& url) {
  ASSIGN_OR_RETURN(const s3::Location location, s3::ParseUrl(url));
  if (location.prefix.empty()) return InvalidArgument(Quoted(url) + " names a bucket, not an object under it");
  ASSIGN_OR_RETURN(s3::Client * client, s3::SharedClient());
  return Address{client, location.bucket, location.prefix};
}

std::string RandomSuffix() {
  std::random_device entropy;
  char text[17];
  std::snprintf(text, sizeof text, "%08x%08x", entropy(), entropy());
  return text;
}

// Whether the server honours If-None-Match: * on a PUT, asked once per bucket and endpoint by creating a probe object
// twice beside `key`: a server that ignores the header lets the second create through.
Result<bool> HonoursConditionalCreate(const Address& at) {
  static std::mutex mutex;
  static std::map<std::string, bool> known;
  const std::string bucket_id = at.client->settings().endpoint + " " + at.bucket;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(bucket_id); it != known.end()) return it->second;
  const size_t slash = at.key.rfind('/');
  const std::string probe =
      (slash == std::string::npos ? std::string() : at.key.substr(0, slash + 1)) + ".ckpt-probe-" + RandomSuffix();
  const s3::Condition absent{s3::Condition::Kind::kIfNoneMatch, ""};
  RETURN_IF_ERROR(at.client->Put(at.bucket, probe, "probe", absent).status());
  const Result<std::string> again = at.client->Put(at.bucket, probe, "probe", absent);
  const Status removed = at.client->Delete(at.bucket, probe);
  if (!again.ok() && again.status().code() != Code::kAlreadyExists) return again.status();
  RETURN_IF_ERROR(removed);
  const bool honoured = !again.ok();
  if (!honoured) {
    std::fprintf(stderr,
                 "ckpt: warning: the S3 server at %s ignores conditional writes (If-None-Match) for bucket '%s': a "
                 "commit checks that its manifest is absent and then writes it, which a save racing it to the same "
                 "path could slip between\n",
                 at.client->settings().endpoint.c_str(), at.bucket.c_str());
  }
  known.emplace(bucket_id, honoured);
  return honoured;
}

std::string PrefixOf(const Address& at) { return at.key + "/"; }

}  // namespace

bool IsObjectStorePath(std::string_view path) { return s3::IsS3Url(path); }

Result<std::string> ReadObject(const std::string& url, uint64_t max_bytes, std::string* etag) {
  ASSIGN_OR_RETURN(const Address at, AddressOf(url));
  s3::ObjectInfo info;
  ASSIGN_OR_RETURN(std::string bytes, at.client->Get(at.bucket, at.key, max_bytes, &info));
  if (etag != nullptr) *etag = info.etag;
  return bytes;
}

Result<uint64_t> ObjectSize(const std::string& url) {
  ASSIGN_OR_RETURN(const Address at, AddressOf(url));
  ASSIGN_OR_RETURN(const s3::ObjectInfo info, at.client->Head(at.bucket, at.key));
  return info.size;
}

Result<bool> ObjectOrPrefixExists(const std::string& url) {
  ASSIGN_OR_RETURN(const Address at, AddressOf(url));
  const Result<s3::ObjectInfo> object = at.client->Head(at.bucket, at.key);
  if (object.ok()) return true;
  if (object.status().code() != Code::kNotFound) return object.status();
  ASSIGN_OR_RETURN(const std::vector<s3::ListedObject> under, at.client->List(at.bucket, PrefixOf(at), 1));
  return !under.empty();
}

Status ReadObjectRange(const std::string& url, uint64_t offset, uint64_t length, char* destination) {
  if (length == 0) return Status::Ok();
  ASSIGN_OR_RETURN(const Address at, AddressOf(url));
  std::vector<s3::RangeRead> reads{s3::RangeRead{at.key, offset, length, destination}};
  return at.client->GetRanges(at.bucket, reads);
}

Status CreateObjectExclusive(const std::string& url, std::string_view bytes) {
  ASSIGN_OR_RETURN(const Address at, AddressOf(url));
  ASSIGN_OR_RETURN(const bool conditional, HonoursConditionalCreate(at));
  if (!conditional) {
    const Result<s3::ObjectInfo> there = at.client->Head(at.bucket, at.key);
    if (there.ok()) return AlreadyExists(Quoted(url) + " already exists");
    if (there.status().code() != Code::kNotFound) return there.status();
    return at.client->Put(at.bucket, at.key, bytes).status();
  }
  Result<std::string> put = at.client->Put(at.bucket, at.key, bytes, {s3::Condition::Kind::kIfNoneMatch, ""});
  if (put.status().code() == Code::kAlreadyExists) return AlreadyExists(Quoted(url) + " already exists");
  return put.status();
}

Result<std::string> ReplaceObject(const std::string& url, std::string_view bytes, const std::string& etag) {
  ASSIGN_OR_RETURN(const Address at, AddressOf(url));
  if (etag.empty()) {
    Status created = CreateObjectExclusive(url, bytes);
    if (created.code() == Code::kAlreadyExists) return Mismatch(Quoted(url) + " was created meanwhile");
    RETURN_IF_ERROR(created);
    ASSIGN_OR_RETURN(const s3::ObjectInfo info, at.client->Head(at.bucket, at.key));
    return info.etag;
  }
  Result<std::string> put = at.client->Put(at.bucket, at.key, bytes, {s3::Condition::Kind::kIfMatch, etag});
  if (put.status().code() == Code::kMismatch) return Mismatch(Quoted(url) + " was replaced meanwhile");
  return put;
}

Status RemoveObject(const std::string& url) {
  ASSIGN_OR_RETURN(const Address at, AddressOf(url));
  return at.client->Delete(at.bucket, at.key);
}

Result<std::vector<StoredObject>> ListObjects(const std::string& url) {
  ASSIGN_OR_RETURN(const Address at, AddressOf(url));
  const std::string prefix = PrefixOf(at);
  ASSIGN_OR_RETURN(const std::vector<s3::ListedObject> listed, at.client->List(at.bucket, prefix));
  std::vector<StoredObject> objects;
  for (const s3::ListedObject& o : listed) {
    if (o.key.compare(0, prefix.size(), prefix) != 0) continue;  // a server that ignores the prefix
    objects.push_back(StoredObject{o.key.substr(prefix.size()), o.size, o.last_modified_unix});
  }
  return objects;
}

Status RemoveObjectsUnder(const std::string& url, int64_t before_unix) {
  ASSIGN_OR_RETURN(const Address at, AddressOf(url));
  const std::string prefix = PrefixOf(at);
  ASSIGN_OR_RETURN(const std::vector<s3::ListedUpload> uploads, at.client->ListMultipartUploads(at.bucket, prefix));
  for (const s3::ListedUpload& u : uploads) {
    if (u.key.compare(0, prefix.size(), prefix) != 0 || u.initiated_unix >= before_unix) continue;
    RETURN_IF_ERROR(at.client->AbortMultipartUpload(at.bucket, u.key, u.upload_id));
  }
  ASSIGN_OR_RETURN(const std::vector<s3::ListedObject> listed, at.client->List(at.bucket, prefix));
  for (const s3::ListedObject& o : listed) {
    if (o.key.compare(0, prefix.size(), prefix) != 0 || o.last_modified_unix >= before_unix) continue;
    RETURN_IF_ERROR(at.client->Delete(at.bucket, o.key));
  }
  return Status::Ok();
}

}  // namespace ckpt::io

// Whole-object operations on checkpoint storage that is an object store ("s3://bucket/prefix" URLs), for what the
// POSIX side does with files and renames: a commit by a conditional create instead of a rename, pointers replaced by
// compare-and-swap instead of rename-over, and cleanup by listing a prefix. The data files themselves move through
// the I/O workers (io/s3_file_jobs.h); io/file_io.h's File, PathExists, RemoveTree and ReadWholeFile also accept
// such URLs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ckpt::io {

// Whether `path` names object storage rather than a POSIX path.
bool IsObjectStorePath(std::string_view path);

// The object at `url`, whole; kNotFound when it is missing, kCorrupt when larger than max_bytes. `etag`, when set,
// receives the version read, for ReplaceObject.
Result<std::string> ReadObject(const std::string& url, uint64_t max_bytes, std::string* etag = nullptr);

// The size of the object at `url`: kNotFound when it is missing (one HEAD).
Result<uint64_t> ObjectSize(const std::string& url);
// Whether an object is at `url` or any object lies under `url` + "/" (at most a HEAD and a one-key LIST).
Result<bool> ObjectOrPrefixExists(const std::string& url);
// Reads exactly `length` bytes at `offset` of the object at `url` into `destination`; kCorrupt ("truncated") when
// the object ends first.
Status ReadObjectRange(const std::string& url, uint64_t offset, uint64_t length, char* destination);

// Creates the object at `url` if nothing is there: kAlreadyExists (nothing written) otherwise. Where the server
// ignores conditional writes (found once per bucket by a probe), the check is a HEAD before the PUT, which a save
// racing this one could slip between; the first such create logs a warning to stderr saying so.
Status CreateObjectExclusive(const std::string& url, std::string_view bytes);

// Replaces the object at `url` only if it is still the version `etag` (from ReadObject); an empty etag creates it
// only if absent. kMismatch (nothing written) when someone replaced it since; returns the new version's etag.
Result<std::string> ReplaceObject(const std::string& url, std::string_view bytes, const std::string& etag);

// Removes one object; a missing one is not an error.
Status RemoveObject(const std::string& url);

struct StoredObject {
  std::string name;  // relative to the prefix listed, without its leading '/'
  uint64_t size = 0;
  int64_t modified_unix = 0;
};
// The objects under `url` + "/", by name. A LIST: for cleanup and tools, never on the path of a save or a load.
Result<std::vector<StoredObject>> ListObjects(const std::string& url);

// Removes every object under `url` + "/" last modified before `before_unix` (all of them by default), and aborts the
// multipart uploads under it started before then: what a failed or abandoned save left behind.
Status RemoveObjectsUnder(const std::string& url, int64_t before_unix = INT64_MAX);

}  // namespace ckpt::io

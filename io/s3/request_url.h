// The HTTP URL of a request: the endpoint, the bucket (in the path or the host name), the key percent-encoded as
// SigV4's canonical form wants it, and a query already in canonical order (libcurl 7.88 signs the query as it is
// given, neither sorted nor re-encoded).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/s3/s3_client.h"

namespace ckpt::s3 {

// RFC 3986 encoding: A-Z a-z 0-9 - . _ ~ stay, '/' stays too when keep_slash, every other byte is %XX.
std::string PercentEncode(std::string_view text, bool keep_slash);

// Whether requests for `bucket` name it in the host ("bucket.s3.region.amazonaws.com") rather than the path.
bool UsesVirtualHost(const Settings& settings, const std::string& bucket);

// `query`: name/value pairs, sorted here by name; a pair with an empty value is sent as "name=".
std::string RequestUrl(const Settings& settings, const std::string& bucket, std::string_view key,
                       std::vector<std::pair<std::string, std::string>> query = {});

}  // namespace ckpt::s3

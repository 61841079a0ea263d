#include "io/s3/request_url.h"

#include <algorithm>

namespace ckpt::s3 {
namespace {

bool IsUnreserved(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

// "https://host:port" split at "://".
std::pair<std::string_view, std::string_view> SchemeAndAuthority(std::string_view endpoint) {
  size_t separator = endpoint.find("://");
  if (separator == std::string_view::npos) return {"https", endpoint};
  return {endpoint.substr(0, separator), endpoint.substr(separator + 3)};
}

}  // namespace

std::string PercentEncode(std::string_view text, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string encoded;
  encoded.reserve(text.size());
  for (char c : text) {
    if (IsUnreserved(c) || (keep_slash && c == '/')) {
      encoded += c;
    } else {
      auto byte = static_cast<unsigned char>(c);
      encoded += '%';
      encoded += kHex[byte >> 4];
      encoded += kHex[byte & 15];
    }
  }
  return encoded;
}

bool UsesVirtualHost(const Settings& settings, const std::string& bucket) {
  switch (settings.addressing) {
    case Addressing::kPath:
      return false;
    case Addressing::kVirtualHosted:
      return true;
    case Addressing::kAuto:
      break;
  }
  // A dotted bucket name would not match the wildcard certificate of *.s3.amazonaws.com.
  if (bucket.find('.') != std::string::npos) return false;
  std::string_view authority = SchemeAndAuthority(settings.endpoint).second;
  authority = authority.substr(0, authority.find(':'));
  constexpr std::string_view kAwsSuffix = ".amazonaws.com";
  return authority.size() > kAwsSuffix.size() && authority.substr(authority.size() - kAwsSuffix.size()) == kAwsSuffix;
}

std::string RequestUrl(const Settings& settings, const std::string& bucket, std::string_view key,
                       std::vector<std::pair<std::string, std::string>> query) {
  auto [scheme, authority] = SchemeAndAuthority(settings.endpoint);
  std::string url(scheme);
  url += "://";
  if (UsesVirtualHost(settings, bucket)) {
    url += bucket + "." + std::string(authority) + "/";
  } else {
    url += std::string(authority) + "/" + bucket + "/";
  }
  url += PercentEncode(key, /*keep_slash=*/true);
  std::sort(query.begin(), query.end());
  for (size_t i = 0; i < query.size(); ++i) {
    url += i == 0 ? '?' : '&';
    url += PercentEncode(query[i].first, false) + "=" + PercentEncode(query[i].second, false);
  }
  return url;
}

}  // namespace ckpt::s3

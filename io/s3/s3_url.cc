// s3://bucket/prefix URLs: ParseUrl, IsS3Url and UrlOf of s3_client.h.
#include <string>
#include <string_view>

#include "io/s3/s3_client.h"

namespace ckpt::s3 {
namespace {

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// S3's rules for bucket names made since 2018: 3..63 characters of [a-z0-9.-], a letter or digit at each end,
// no "..", not an IPv4 address. The reason it is refused, or "".
std::string BucketNameProblem(std::string_view bucket) {
  if (bucket.size() < 3 || bucket.size() > 63) return "a bucket name has 3 to 63 characters";
  for (char c : bucket) {
    if (!IsLowerAlnum(c) && c != '.' && c != '-') return "a bucket name has only a-z, 0-9, '.' and '-'";
  }
  if (!IsLowerAlnum(bucket.front()) || !IsLowerAlnum(bucket.back())) {
    return "a bucket name starts and ends with a letter or digit";
  }
  if (bucket.find("..") != std::string_view::npos) return "a bucket name has no \"..\"";
  bool all_digits_and_dots = true;
  int dots = 0;
  for (char c : bucket) {
    if (c == '.')
      ++dots;
    else if (c < '0' || c > '9')
      all_digits_and_dots = false;
  }
  if (all_digits_and_dots && dots == 3) return "a bucket name is not an IP address";
  return "";
}

// Why the prefix (the URL past "bucket/", its one trailing '/' removed) is refused, or "".
std::string PrefixProblem(std::string_view prefix) {
  if (prefix.empty()) return "";
  size_t start = 0;
  while (true) {
    size_t end = prefix.find('/', start);
    std::string_view component = prefix.substr(start, end == std::string_view::npos ? end : end - start);
    if (component.empty()) return "an empty path component (\"//\")";
    if (component == "." || component == "..") return "a '.' or '..' path component";
    for (char c : component) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "a control character";
    }
    if (end == std::string_view::npos) return "";
    start = end + 1;
  }
}

}  // namespace

bool IsS3Url(std::string_view path) { return path.substr(0, kUrlScheme.size()) == kUrlScheme; }

Result<Location> ParseUrl(std::string_view url) {
  auto refuse = [&](const std::string& why) { return InvalidArgument("invalid S3 URL " + Quoted(url) + ": " + why); };
  if (!IsS3Url(url)) return refuse("it does not start with s3://");
  std::string_view rest = url.substr(kUrlScheme.size());
  size_t slash = rest.find('/');
  std::string_view bucket = rest.substr(0, slash);
  if (bucket.empty()) return refuse("no bucket");
  if (std::string problem = BucketNameProblem(bucket); !problem.empty()) return refuse(problem);
  std::string_view prefix = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  if (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
  if (std::string problem = PrefixProblem(prefix); !problem.empty()) return refuse(problem);
  return Location{std::string(bucket), std::string(prefix)};
}

std::string UrlOf(const std::string& bucket, const std::string& key) {
  std::string url = std::string(kUrlScheme) + bucket;
  if (!key.empty()) url += "/" + key;
  return url;
}

}  // namespace ckpt::s3

#include "io/s3/curl_library.h"

#include <dlfcn.h>

#include <memory>
#include <string>

namespace ckpt::s3 {
namespace {

constexpr char kCurlLibrary[] = "libcurl.so.4";
// 7.75.0: CURLOPT_AWS_SIGV4.
constexpr unsigned kOldestCurl = 0x074B00;

template <typename Fn>
void Resolve(void* handle, const char* name, Fn* slot, std::string* missing) {
  *slot = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*slot == nullptr && missing->empty()) *missing = name;
}

// Resolves every entry; the name of the first one missing, or "".
std::string ResolveAll(void* handle, CurlApi* api) {
  std::string missing;
  Resolve(handle, "curl_global_init", &api->global_init, &missing);
  Resolve(handle, "curl_version_info", &api->version_info, &missing);
  Resolve(handle, "curl_easy_init", &api->easy_init, &missing);
  Resolve(handle, "curl_easy_cleanup", &api->easy_cleanup, &missing);
  Resolve(handle, "curl_easy_setopt", &api->easy_setopt, &missing);
  Resolve(handle, "curl_easy_getinfo", &api->easy_getinfo, &missing);
  Resolve(handle, "curl_easy_strerror", &api->easy_strerror, &missing);
  Resolve(handle, "curl_slist_append", &api->slist_append, &missing);
  Resolve(handle, "curl_slist_free_all", &api->slist_free_all, &missing);
  Resolve(handle, "curl_share_init", &api->share_init, &missing);
  Resolve(handle, "curl_share_setopt", &api->share_setopt, &missing);
  Resolve(handle, "curl_share_cleanup", &api->share_cleanup, &missing);
  Resolve(handle, "curl_multi_init", &api->multi_init, &missing);
  Resolve(handle, "curl_multi_setopt", &api->multi_setopt, &missing);
  Resolve(handle, "curl_multi_add_handle", &api->multi_add_handle, &missing);
  Resolve(handle, "curl_multi_remove_handle", &api->multi_remove_handle, &missing);
  Resolve(handle, "curl_multi_perform", &api->multi_perform, &missing);
  Resolve(handle, "curl_multi_poll", &api->multi_poll, &missing);
  Resolve(handle, "curl_multi_info_read", &api->multi_info_read, &missing);
  Resolve(handle, "curl_multi_cleanup", &api->multi_cleanup, &missing);
  Resolve(handle, "curl_multi_strerror", &api->multi_strerror, &missing);
  return missing;
}

Result<const CurlApi*> LoadCurlOnce() {
  void* handle = dlopen(kCurlLibrary, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    return Unsupported(std::string("S3 is unavailable: ") + kCurlLibrary +
                       " cannot be loaded: " + (error ? error : "dlopen failed"));
  }
  auto api = std::make_unique<CurlApi>();
  std::string missing = ResolveAll(handle, api.get());
  if (!missing.empty()) {
    dlclose(handle);
    return Unsupported(std::string("S3 is unavailable: ") + kCurlLibrary + " lacks " + missing);
  }
  const curl_version_info_data* version = api->version_info(CURLVERSION_NOW);
  if (version == nullptr || version->version_num < kOldestCurl) {
    dlclose(handle);
    return Unsupported(std::string("S3 is unavailable: ") + kCurlLibrary + " is version " +
                       (version ? version->version : "unknown") + "; 7.75 or newer is needed (CURLOPT_AWS_SIGV4)");
  }
  // Once, before any thread makes a handle: curl_global_init is not thread-safe on older libcurls.
  if (CURLcode code = api->global_init(CURL_GLOBAL_DEFAULT); code != CURLE_OK) {
    return Unsupported(std::string("S3 is unavailable: curl_global_init failed: ") + api->easy_strerror(code));
  }
  return api.release();
}

}  // namespace

Result<const CurlApi*> LoadCurl() {
  static const Result<const CurlApi*> api = LoadCurlOnce();
  return api;
}

}  // namespace ckpt::s3

// libcurl.so.4, loaded with dlopen at first use so that libckpt loads where libcurl is absent (S3 paths then fail
// with kUnsupported): the table of the libcurl functions io/s3 calls. curl's headers are still needed to build, for
// its types and constants.
#pragma once

#include <curl/curl.h>

#include "common/status.h"

namespace ckpt::s3 {

// Named after the libcurl functions they point to, without the curl_ prefix.
struct CurlApi {
  CURLcode (*global_init)(long);
  curl_version_info_data* (*version_info)(CURLversion);
  CURL* (*easy_init)();
  void (*easy_cleanup)(CURL*);
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...);
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...);
  const char* (*easy_strerror)(CURLcode);
  curl_slist* (*slist_append)(curl_slist*, const char*);
  void (*slist_free_all)(curl_slist*);
  CURLSH* (*share_init)();
  CURLSHcode (*share_setopt)(CURLSH*, CURLSHoption, ...);
  CURLSHcode (*share_cleanup)(CURLSH*);
  CURLM* (*multi_init)();
  CURLMcode (*multi_setopt)(CURLM*, CURLMoption, ...);
  CURLMcode (*multi_add_handle)(CURLM*, CURL*);
  CURLMcode (*multi_remove_handle)(CURLM*, CURL*);
  CURLMcode (*multi_perform)(CURLM*, int*);
  CURLMcode (*multi_poll)(CURLM*, curl_waitfd*, unsigned, int, int*);
  CURLMsg* (*multi_info_read)(CURLM*, int*);
  CURLMcode (*multi_cleanup)(CURLM*);
  const char* (*multi_strerror)(CURLMcode);
};

// libcurl is loaded and globally initialized once per process and never unloaded. kUnsupported naming libcurl.so.4
// and dlopen's reason where it is missing, the first function it lacks, or a libcurl older than 7.75 (the first with
// CURLOPT_AWS_SIGV4).
Result<const CurlApi*> LoadCurl();

}  // namespace ckpt::s3

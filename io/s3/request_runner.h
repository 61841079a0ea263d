// Runs requests on a curl multi handle, up to settings.connections at once, retrying each as retry_policy.h says:
// a failed attempt waits its backoff while the others go on. The client's calls, single or parallel, all come here.
//
// Connections: libcurl does not support sharing one connection cache between threads that run transfers at the
// same time (CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT), so each call borrows a multi handle from a pool and gives it
// back with its open connections, which the next call on any thread reuses; the DNS cache and TLS sessions are
// shared by every handle through one CURLSH with a lock per kind of data.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "io/s3/curl_library.h"
#include "io/s3/http_transfer.h"
#include "io/s3/retry_policy.h"

namespace ckpt::s3 {

struct AttemptCounters {
  std::atomic<uint64_t> get{0}, put{0}, head{0}, del{0}, list{0}, post{0}, retries{0};

  void Count(RequestKind kind);
  RequestCounts Snapshot() const;
};

struct RequestOutcome {
  HttpReply reply;  // the last attempt's
  uint32_t attempts = 0;
  bool every_attempt_stalled = false;
  Verdict verdict = Verdict::kFail;
};

struct RunResult {
  std::vector<RequestOutcome> outcomes;  // in the requests' order; attempts == 0 for one never started
  std::optional<size_t> first_failure;   // the first request that failed for good
};

class RequestRunner {
 public:
  static Result<std::unique_ptr<RequestRunner>> Create(const CurlApi* api, const Settings& settings);
  ~RequestRunner();

  // After the first request that fails for good no other starts (nor retries); those in flight finish. kInternal
  // or kNoMemory only when libcurl itself fails.
  Result<RunResult> Run(const std::vector<HttpRequest>& requests);
  // A single request.
  Result<RequestOutcome> RunOne(const HttpRequest& request);

  const Settings& settings() const { return settings_; }
  RequestCounts counts() const { return counters_.Snapshot(); }

 private:
  RequestRunner(const CurlApi* api, const Settings& settings) : api_(api), settings_(settings) {}
  Status MakeShare();
  Result<CURLM*> BorrowMulti();
  void ReturnMulti(CURLM* multi);
  static void Lock(CURL*, curl_lock_data data, curl_lock_access, void* self);
  static void Unlock(CURL*, curl_lock_data data, void* self);

  const CurlApi* api_;
  const Settings settings_;
  CURLSH* share_ = nullptr;
  std::mutex share_locks_[CURL_LOCK_DATA_LAST];
  std::mutex pool_mutex_;
  std::vector<CURLM*> idle_multis_;
  AttemptCounters counters_;
};

}  // namespace ckpt::s3

#include "io/s3/request_runner.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <thread>
#include <unordered_map>

namespace ckpt::s3 {
namespace {

using Clock = std::chrono::steady_clock;

// A poll never sleeps longer, so that retries waiting their backoff start on time.
constexpr std::chrono::milliseconds kLongestPoll{1000};

// The state of one Run: which requests wait to start (fresh or after a backoff), which are in flight.
class Batch {
 public:
  Batch(const CurlApi& api, const Settings& settings, CURLSH* share, CURLM* multi, AttemptCounters& counters,
        const std::vector<HttpRequest>& requests)
      : api_(api),
        settings_(settings),
        share_(share),
        multi_(multi),
        counters_(counters),
        requests_(requests),
        transfers_(requests.size()) {
    result_.outcomes.resize(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) fresh_.push_back(i);
  }

  Result<RunResult> Run() {
    while (true) {
      RETURN_IF_ERROR(StartReady());
      if (running_ == 0) {
        if (stopped() || (fresh_.empty() && backing_off_.empty())) break;
        std::this_thread::sleep_until(NextRetryTime());
        continue;
      }
      int still_running = 0;
      if (CURLMcode code = api_.multi_perform(multi_, &still_running); code != CURLM_OK) return MultiError(code);
      ReapFinished();
      if (running_ == 0) continue;  // start the next, or end, without waiting on no transfer
      auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(NextRetryTime() - Clock::now());
      int timeout = static_cast<int>(std::clamp(wait, std::chrono::milliseconds(0), kLongestPoll).count());
      if (CURLMcode code = api_.multi_poll(multi_, nullptr, 0, timeout, nullptr); code != CURLM_OK) {
        return MultiError(code);
      }
    }
    return std::move(result_);
  }

  // Removes whatever is still in the multi handle (after a libcurl failure), so that it goes back to the pool clean.
  ~Batch() {
    for (auto& transfer : transfers_) {
      if (transfer) api_.multi_remove_handle(multi_, transfer->handle());
    }
  }

 private:
  bool stopped() const { return result_.first_failure.has_value(); }

  Status MultiError(CURLMcode code) {
    return Internal(std::string("libcurl's multi handle failed: ") + api_.multi_strerror(code));
  }

  Clock::time_point NextRetryTime() const {
    Clock::time_point next = Clock::now() + kLongestPoll;
    for (const auto& [when, index] : backing_off_) next = std::min(next, when);
    return next;
  }

  // The next request allowed to start: a retry whose backoff is over, else a fresh one.
  std::optional<size_t> NextReady() {
    Clock::time_point now = Clock::now();
    for (auto it = backing_off_.begin(); it != backing_off_.end(); ++it) {
      if (it->first <= now) {
        size_t index = it->second;
        backing_off_.erase(it);
        return index;
      }
    }
    if (fresh_.empty()) return std::nullopt;
    size_t index = fresh_.front();
    fresh_.pop_front();
    return index;
  }

  Status StartReady() {
    while (!stopped() && running_ < settings_.connections) {
      std::optional<size_t> index = NextReady();
      if (!index) break;
      auto transfer = std::make_unique<Transfer>(api_, settings_, share_, requests_[*index]);
      RETURN_IF_ERROR(transfer->status());
      if (CURLMcode code = api_.multi_add_handle(multi_, transfer->handle()); code != CURLM_OK) {
        return MultiError(code);
      }
      by_handle_[transfer->handle()] = *index;
      transfers_[*index] = std::move(transfer);
      counters_.Count(requests_[*index].kind);
      if (result_.outcomes[*index].attempts++ > 0) counters_.retries.fetch_add(1, std::memory_order_relaxed);
      ++running_;
    }
    return Status::Ok();
  }

  void ReapFinished() {
    int left = 0;
    while (CURLMsg* message = api_.multi_info_read(multi_, &left)) {
      if (message->msg != CURLMSG_DONE) continue;
      size_t index = by_handle_.at(message->easy_handle);
      by_handle_.erase(message->easy_handle);
      api_.multi_remove_handle(multi_, message->easy_handle);
      RequestOutcome& outcome = result_.outcomes[index];
      outcome.reply = transfers_[index]->Finish(message->data.result);
      transfers_[index].reset();
      --running_;
      Judged(index, outcome);
    }
  }

  void Judged(size_t index, RequestOutcome& outcome) {
    const HttpReply& reply = outcome.reply;
    bool stalled = reply.curl_code == CURLE_OPERATION_TIMEDOUT && reply.request_sent;
    outcome.every_attempt_stalled = stalled && (outcome.attempts == 1 || outcome.every_attempt_stalled);
    outcome.verdict = Judge(requests_[index], reply);
    if (outcome.verdict == Verdict::kRetry && outcome.attempts < settings_.max_attempts) {
      backing_off_.emplace_back(Clock::now() + BackoffBefore(outcome.attempts - 1), index);
      return;
    }
    if (outcome.verdict == Verdict::kRetry) outcome.verdict = Verdict::kFail;
    if (outcome.verdict == Verdict::kFail && !stopped()) result_.first_failure = index;
  }

  const CurlApi& api_;
  const Settings& settings_;
  CURLSH* share_;
  CURLM* multi_;
  AttemptCounters& counters_;
  const std::vector<HttpRequest>& requests_;
  std::vector<std::unique_ptr<Transfer>> transfers_;
  std::unordered_map<CURL*, size_t> by_handle_;
  std::deque<size_t> fresh_;
  std::vector<std::pair<Clock::time_point, size_t>> backing_off_;
  uint32_t running_ = 0;
  RunResult result_;
};

}  // namespace

void AttemptCounters::Count(RequestKind kind) {
  std::atomic<uint64_t>* counter = &get;
  switch (kind) {
    case RequestKind::kGet:
      counter = &get;
      break;
    case RequestKind::kPut:
      counter = &put;
      break;
    case RequestKind::kHead:
      counter = &head;
      break;
    case RequestKind::kDelete:
      counter = &del;
      break;
    case RequestKind::kList:
      counter = &list;
      break;
    case RequestKind::kPost:
      counter = &post;
      break;
  }
  counter->fetch_add(1, std::memory_order_relaxed);
}

RequestCounts AttemptCounters::Snapshot() const {
  auto load = [](const std::atomic<uint64_t>& counter) { return counter.load(std::memory_order_relaxed); };
  return RequestCounts{load(get), load(put), load(head), load(del), load(list), load(post), load(retries)};
}

Result<std::unique_ptr<RequestRunner>> RequestRunner::Create(const CurlApi* api, const Settings& settings) {
  std::unique_ptr<RequestRunner> runner(new RequestRunner(api, settings));
  RETURN_IF_ERROR(runner->MakeShare());
  return runner;
}

RequestRunner::~RequestRunner() {
  for (CURLM* multi : idle_multis_) api_->multi_cleanup(multi);
  if (share_ != nullptr) api_->share_cleanup(share_);
}

void RequestRunner::Lock(CURL*, curl_lock_data data, curl_lock_access, void* self) {
  static_cast<RequestRunner*>(self)->share_locks_[data].lock();
}

void RequestRunner::Unlock(CURL*, curl_lock_data data, void* self) {
  static_cast<RequestRunner*>(self)->share_locks_[data].unlock();
}

Status RequestRunner::MakeShare() {
  share_ = api_->share_init();
  if (share_ == nullptr) return Status(Code::kNoMemory, "curl_share_init failed");
  using LockFunction = void (*)(CURL*, curl_lock_data, curl_lock_access, void*);
  using UnlockFunction = void (*)(CURL*, curl_lock_data, void*);
  bool ok = api_->share_setopt(share_, CURLSHOPT_LOCKFUNC, static_cast<LockFunction>(&Lock)) == CURLSHE_OK &&
            api_->share_setopt(share_, CURLSHOPT_UNLOCKFUNC, static_cast<UnlockFunction>(&Unlock)) == CURLSHE_OK &&
            api_->share_setopt(share_, CURLSHOPT_USERDATA, this) == CURLSHE_OK &&
            api_->share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) == CURLSHE_OK &&
            api_->share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) == CURLSHE_OK;
  return ok ? Status::Ok() : Internal("libcurl refused to share its DNS cache and TLS sessions (curl_share_setopt)");
}

Result<CURLM*> RequestRunner::BorrowMulti() {
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    if (!idle_multis_.empty()) {
      CURLM* multi = idle_multis_.back();
      idle_multis_.pop_back();
      return multi;
    }
  }
  CURLM* multi = api_->multi_init();
  if (multi == nullptr) return Status(Code::kNoMemory, "curl_multi_init failed");
  api_->multi_setopt(multi, CURLMOPT_MAXCONNECTS, static_cast<long>(settings_.connections));
  return multi;
}

void RequestRunner::ReturnMulti(CURLM* multi) {
  std::lock_guard<std::mutex> lock(pool_mutex_);
  idle_multis_.push_back(multi);
}

Result<RunResult> RequestRunner::Run(const std::vector<HttpRequest>& requests) {
  ASSIGN_OR_RETURN(CURLM * multi, BorrowMulti());
  Result<RunResult> result = Batch(*api_, settings_, share_, multi, counters_, requests).Run();
  ReturnMulti(multi);
  return result;
}

Result<RequestOutcome> RequestRunner::RunOne(const HttpRequest& request) {
  std::vector<HttpRequest> requests{request};
  ASSIGN_OR_RETURN(RunResult result, Run(requests));
  return std::move(result.outcomes[0]);
}

}  // namespace ckpt::s3

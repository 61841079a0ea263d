// The pwrite/pread backend, for kernels or sandboxes that refuse io_uring: a fixed pool of threads takes a job's
// requests one at a time, while the calling thread hashes.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>

#include "io/io_backend.h"

namespace ckpt::io {
namespace {

// The requests of one Run, shared by the pool's threads.
struct Batch {
  Batch(const IoTarget& target, std::vector<IoRequest>& requests) : target(target), requests(requests) {}

  const IoTarget& target;
  std::vector<IoRequest>& requests;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex failure_mutex;
  Status failure;
};

class PwriteBackend final : public IoBackend {
 public:
  PwriteBackend() = default;
  ~PwriteBackend() override;

  // Starts `count` threads; kIo if the system refuses a thread.
  Status Start(uint32_t count);
  Status Run(const IoTarget& target, std::vector<IoRequest>& requests, const SpareWork& spare_work) override;
  const char* name() const override { return "pwrite"; }

 private:
  void ThreadMain();
  static void Drain(Batch& batch);
  static void Transfer(Batch& batch, IoRequest& request);

  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  Batch* batch_ = nullptr;
  uint64_t generation_ = 0;  // one per Run: every thread takes part in each exactly once
  size_t busy_ = 0;          // threads not yet done with the current batch
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

PwriteBackend::~PwriteBackend() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

Status PwriteBackend::Start(uint32_t count) {
  try {
    for (uint32_t i = 0; i < count; ++i) threads_.emplace_back([this] { ThreadMain(); });
  } catch (const std::system_error& e) {
    return IoError("cannot start the pwrite pool's thread " + std::to_string(threads_.size() + 1) + " of " +
                   std::to_string(count) + ": " + e.what());
  }
  return Status::Ok();
}

void PwriteBackend::ThreadMain() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    Batch* batch = batch_;
    lock.unlock();
    Drain(*batch);
    lock.lock();
    if (--busy_ == 0) work_done_.notify_all();
  }
}

void PwriteBackend::Drain(Batch& batch) {
  while (!batch.failed.load(std::memory_order_relaxed)) {
    const size_t index = batch.next.fetch_add(1, std::memory_order_relaxed);
    if (index >= batch.requests.size()) return;
    Transfer(batch, batch.requests[index]);
  }
}

void PwriteBackend::Transfer(Batch& batch, IoRequest& request) {
  const IoTarget& target = batch.target;
  for (;;) {
    char* buffer = request.buffer + request.transferred;
    const size_t length = AttemptLength(request);
    const auto offset = static_cast<off_t>(request.file_offset + request.transferred);
    const ssize_t moved = target.direction == IoDirection::kWrite ? pwrite(target.fd, buffer, length, offset)
                                                                  : pread(target.fd, buffer, length, offset);
    int error = 0;
    switch (ApplyAttempt(target, request, moved >= 0 ? moved : -errno, &error)) {
      case NextStep::kDone:
        return;
      case NextStep::kResubmit:
        continue;
      case NextStep::kFail: {
        std::lock_guard<std::mutex> lock(batch.failure_mutex);
        if (batch.failure.ok()) batch.failure = TransferError(target, request, error);
        batch.failed.store(true, std::memory_order_relaxed);
        return;
      }
    }
  }
}

Status PwriteBackend::Run(const IoTarget& target, std::vector<IoRequest>& requests, const SpareWork& spare_work) {
  Batch batch(target, requests);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    batch_ = &batch;
    busy_ = threads_.size();
    ++generation_;
  }
  work_ready_.notify_all();
  SpareStep spare = spare_work ? SpareStep::kMore : SpareStep::kDone;
  // A read's spare work looks at what the requests brought, which the pool's threads are still changing.
  if (target.direction == IoDirection::kWrite) {
    while (!batch.failed.load(std::memory_order_relaxed) && spare == SpareStep::kMore) spare = spare_work();
  }
  {
    // The pool's threads hold no lock while in pread/pwrite; this waits for the last of them to return.
    std::unique_lock<std::mutex> lock(mutex_);
    work_done_.wait(lock, [&] { return busy_ == 0; });
    batch_ = nullptr;
  }
  while (!batch.failed.load(std::memory_order_relaxed) && spare == SpareStep::kMore) spare = spare_work();
  std::lock_guard<std::mutex> lock(batch.failure_mutex);
  return batch.failure;
}

}  // namespace

Result<std::unique_ptr<IoBackend>> CreatePwriteBackend(uint32_t threads) {
  auto backend = std::make_unique<PwriteBackend>();
  RETURN_IF_ERROR(backend->Start(threads));
  return std::unique_ptr<IoBackend>(std::move(backend));
}

}  // namespace ckpt::io

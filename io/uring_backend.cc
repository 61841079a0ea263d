// The io_uring backend: keeps up to queue_depth requests in flight on one ring, submitted from the calling thread,
// which hashes between completions.
#include <liburing.h>
#include <sched.h>

#include <cerrno>
#include <cstring>
#include <deque>

#include "io/io_backend.h"

namespace ckpt::io {
namespace {

// How often a submission refused with EAGAIN/EBUSY, with nothing of ours in flight to wait for, is retried.
constexpr int kMaxIdleSubmitRetries = 1000;

std::string ErrnoText(int err) { return std::strerror(err); }

// The requests of one Run and where they stand.
struct Batch {
  Batch(const IoTarget& target, std::vector<IoRequest>& requests) : target(target), requests(requests) {}

  const IoTarget& target;
  std::vector<IoRequest>& requests;
  std::deque<size_t> resubmit;  // started, stopped short: their rest goes first
  size_t next_new = 0;
  uint32_t in_flight = 0;  // SQEs prepared whose completion has not been reaped
  Status failure;

  bool HasWork() const { return failure.ok() && (!resubmit.empty() || next_new < requests.size()); }
};

class UringBackend final : public IoBackend {
 public:
  explicit UringBackend(uint32_t queue_depth) : queue_depth_(queue_depth) {}
  ~UringBackend() override {
    if (initialized_) io_uring_queue_exit(&ring_);
  }

  // 0 or -errno, from io_uring_queue_init.
  int Init() {
    const int rc = io_uring_queue_init(queue_depth_, &ring_, 0);
    initialized_ = rc == 0;
    return rc;
  }

  Status Run(const IoTarget& target, std::vector<IoRequest>& requests, const SpareWork& spare_work) override;
  const char* name() const override { return "io_uring"; }

 private:
  void Prepare(Batch& batch);
  Status Submit(Batch& batch);
  void Complete(Batch& batch, const io_uring_cqe& cqe);
  void ReapAvailable(Batch& batch);
  Status WaitAndReap(Batch& batch);
  // Requests the kernel holds (submitted, not completed), as opposed to prepared SQEs still in the ring.
  uint32_t Submitted(const Batch& batch) { return batch.in_flight - io_uring_sq_ready(&ring_); }
  Status MarkBroken(const std::string& what, int err);

  io_uring ring_{};
  uint32_t queue_depth_;
  bool initialized_ = false;
  Status broken_;  // once the ring itself fails, later jobs are refused: the worker should be restarted
};

void UringBackend::Prepare(Batch& batch) {
  while (batch.in_flight < queue_depth_ && batch.HasWork()) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return;
    size_t index;
    if (!batch.resubmit.empty()) {
      index = batch.resubmit.front();
      batch.resubmit.pop_front();
    } else {
      index = batch.next_new++;
    }
    IoRequest& request = batch.requests[index];
    char* buffer = request.buffer + request.transferred;
    const auto length = static_cast<unsigned>(AttemptLength(request));
    const uint64_t offset = request.file_offset + request.transferred;
    if (batch.target.direction == IoDirection::kWrite) {
      io_uring_prep_write(sqe, batch.target.fd, buffer, length, offset);
    } else {
      io_uring_prep_read(sqe, batch.target.fd, buffer, length, offset);
    }
    io_uring_sqe_set_data64(sqe, index);
    ++batch.in_flight;
  }
}

Status UringBackend::Submit(Batch& batch) {
  for (int idle_retries = 0; io_uring_sq_ready(&ring_) > 0;) {
    const int rc = io_uring_submit(&ring_);
    if (rc > 0 || rc == -EINTR) continue;
    if (rc < 0 && rc != -EAGAIN && rc != -EBUSY) return MarkBroken("cannot submit to the io_uring ring", -rc);
    // The kernel is short of resources: completions of ours free them; with none pending, yield and retry.
    if (Submitted(batch) > 0) return WaitAndReap(batch);
    if (++idle_retries > kMaxIdleSubmitRetries) {
      return MarkBroken("io_uring accepts no submission", rc == 0 ? EAGAIN : -rc);
    }
    sched_yield();
  }
  return Status::Ok();
}

void UringBackend::Complete(Batch& batch, const io_uring_cqe& cqe) {
  --batch.in_flight;
  const size_t index = io_uring_cqe_get_data64(&cqe);
  IoRequest& request = batch.requests[index];
  int error = 0;
  switch (ApplyAttempt(batch.target, request, cqe.res, &error)) {
    case NextStep::kDone:
      return;
    case NextStep::kResubmit:
      if (batch.failure.ok()) batch.resubmit.push_back(index);
      return;
    case NextStep::kFail:
      if (batch.failure.ok()) batch.failure = TransferError(batch.target, request, error);
      return;
  }
}

void UringBackend::ReapAvailable(Batch& batch) {
  io_uring_cqe* cqe = nullptr;
  while (batch.in_flight > 0 && io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe != nullptr) {
    const io_uring_cqe copy = *cqe;
    io_uring_cqe_seen(&ring_, cqe);
    Complete(batch, copy);
  }
}

Status UringBackend::WaitAndReap(Batch& batch) {
  io_uring_cqe* cqe = nullptr;
  int rc;
  do {
    rc = io_uring_wait_cqe(&ring_, &cqe);
  } while (rc == -EINTR);
  if (rc != 0) return MarkBroken("cannot wait for io_uring completions", -rc);
  const io_uring_cqe copy = *cqe;
  io_uring_cqe_seen(&ring_, cqe);
  Complete(batch, copy);
  ReapAvailable(batch);
  return Status::Ok();
}

Status UringBackend::MarkBroken(const std::string& what, int err) {
  broken_ = IoError(what + ": " + ErrnoText(err));
  return broken_;
}

Status UringBackend::Run(const IoTarget& target, std::vector<IoRequest>& requests, const SpareWork& spare_work) {
  if (!broken_.ok()) return broken_;
  Batch batch(target, requests);
  bool spare_left = static_cast<bool>(spare_work);
  for (;;) {
    Prepare(batch);
    Status ring_status = Submit(batch);
    if (ring_status.ok() && batch.in_flight == 0 && !batch.HasWork()) break;
    if (ring_status.ok() && spare_left && batch.failure.ok()) {
      spare_left = spare_work();
      ReapAvailable(batch);
      continue;
    }
    if (ring_status.ok() && Submitted(batch) > 0) ring_status = WaitAndReap(batch);
    if (!ring_status.ok()) {
      // The ring failed: reap what the kernel still holds (it may write into the arena) before giving up.
      while (Submitted(batch) > 0 && WaitAndReap(batch).ok()) {
      }
      return ring_status;
    }
  }
  while (batch.failure.ok() && spare_left) spare_left = spare_work();
  return batch.failure;
}

}  // namespace

Result<std::unique_ptr<IoBackend>> CreateUringBackend(uint32_t queue_depth) {
  auto backend = std::make_unique<UringBackend>(queue_depth);
  const int rc = backend->Init();
  if (rc == 0) return std::unique_ptr<IoBackend>(std::move(backend));
  const int err = -rc;
  const std::string message = "io_uring is not available (io_uring_queue_init with " + std::to_string(queue_depth) +
                              " entries: " + ErrnoText(err) + ")";
  // EPERM/EACCES: seccomp or the io_uring_disabled sysctl; ENOSYS: no kernel support; ENOMEM: older kernels
  // charge rings to RLIMIT_MEMLOCK.
  if (err == EPERM || err == EACCES || err == ENOSYS || err == ENOMEM) return Unsupported(message);
  return IoError(message);
}

}  // namespace ckpt::io

// The io_uring backend: keeps up to queue_depth requests in flight on one ring, submitted from the calling thread,
// which hashes between completions. The staging arena is registered with the ring (as buffers of at most
// kMaxRegisteredBuffer bytes), and each job's file in a one-slot file table, so that a request neither pins its
// pages nor takes a reference to its file again: requests then use the fixed forms. Where the kernel refuses either
// registration (RLIMIT_MEMLOCK for users without CAP_IPC_LOCK, older kernels), requests use the plain forms.
#include <liburing.h>
#include <sched.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <deque>
#include <vector>

#include "common/os_error.h"
#include "io/io_backend.h"

namespace ckpt::io {
namespace {

// How often a submission refused with EAGAIN/EBUSY, with nothing of ours in flight to wait for, is retried.
constexpr int kMaxIdleSubmitRetries = 1000;

// The requests of one Run and where they stand.
struct Batch {
  Batch(const IoTarget& target, std::vector<IoRequest>& requests) : target(target), requests(requests) {}

  const IoTarget& target;
  std::vector<IoRequest>& requests;
  std::deque<size_t> resubmit;  // started, stopped short: their rest goes first
  size_t next_new = 0;
  uint32_t in_flight = 0;    // SQEs prepared whose completion has not been reaped
  uint64_t completions = 0;  // reaped so far: spare work waiting for I/O goes on after the next
  Status failure;

  bool HasWork() const { return failure.ok() && (!resubmit.empty() || next_new < requests.size()); }
};

class UringBackend final : public IoBackend {
 public:
  explicit UringBackend(uint32_t queue_depth) : queue_depth_(queue_depth) {}
  ~UringBackend() override {
    if (initialized_) io_uring_queue_exit(&ring_);
  }

  // 0 or -errno, from io_uring_queue_init. Then registers `arena` (when given) in buffers of at most
  // `max_buffer_bytes`, and a file table of one slot; either may be refused, which only loses the fixed forms.
  int Init(char* arena, uint64_t arena_size, uint64_t max_buffer_bytes) {
    const int rc = io_uring_queue_init(queue_depth_, &ring_, 0);
    initialized_ = rc == 0;
    if (!initialized_) return rc;
    if (arena != nullptr && arena_size > 0 && max_buffer_bytes > 0) {
      std::vector<iovec> buffers;
      for (uint64_t at = 0; at < arena_size; at += max_buffer_bytes) {
        buffers.push_back(iovec{arena + at, static_cast<size_t>(std::min(max_buffer_bytes, arena_size - at))});
      }
      if (io_uring_register_buffers(&ring_, buffers.data(), static_cast<unsigned>(buffers.size())) == 0) {
        arena_ = arena;
        arena_size_ = arena_size;
        max_buffer_bytes_ = max_buffer_bytes;
      }
    }
    fixed_file_ = io_uring_register_files_sparse(&ring_, 1) == 0;
    return 0;
  }

  Status Run(const IoTarget& target, std::vector<IoRequest>& requests, const SpareWork& spare_work) override;
  const char* name() const override { return arena_ != nullptr ? "io_uring+fixed" : "io_uring"; }

 private:
  // The registered buffer that holds all of [buffer, buffer + length), or -1.
  int RegisteredBuffer(const char* buffer, uint64_t length) const {
    const uintptr_t at = reinterpret_cast<uintptr_t>(buffer), base = reinterpret_cast<uintptr_t>(arena_);
    if (arena_ == nullptr || length == 0 || at < base || length > arena_size_ || at - base > arena_size_ - length) {
      return -1;
    }
    const uint64_t first = (at - base) / max_buffer_bytes_;
    const uint64_t last = (at - base + length - 1) / max_buffer_bytes_;
    return first == last ? static_cast<int>(first) : -1;
  }
  // Puts `fd` in the file table's slot for one Run; false (the plain descriptor is used) if the kernel refuses.
  bool InstallFile(int fd) { return fixed_file_ && io_uring_register_files_update(&ring_, 0, &fd, 1) == 1; }
  // Empties the slot, so that the ring holds no reference to a file the executor closes or abandons.
  void RemoveFile() {
    int none = -1;
    (void)io_uring_register_files_update(&ring_, 0, &none, 1);
  }
  Status RunBatch(const IoTarget& target, std::vector<IoRequest>& requests, const SpareWork& spare_work);
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
  char* arena_ = nullptr;  // registered as buffers; null when not
  uint64_t arena_size_ = 0;
  uint64_t max_buffer_bytes_ = 0;
  bool fixed_file_ = false;      // the one-slot file table exists
  bool file_installed_ = false;  // this Run's file is in it
  Status broken_;                // once the ring itself fails, later jobs are refused: the worker should be restarted
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
    const int fd = file_installed_ ? 0 : batch.target.fd;
    const int registered = RegisteredBuffer(buffer, length);
    const bool write = batch.target.direction == IoDirection::kWrite;
    if (registered >= 0) {
      if (write) {
        io_uring_prep_write_fixed(sqe, fd, buffer, length, offset, registered);
      } else {
        io_uring_prep_read_fixed(sqe, fd, buffer, length, offset, registered);
      }
    } else if (write) {
      io_uring_prep_write(sqe, fd, buffer, length, offset);
    } else {
      io_uring_prep_read(sqe, fd, buffer, length, offset);
    }
    if (file_installed_) sqe->flags |= IOSQE_FIXED_FILE;
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
  ++batch.completions;
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
  broken_ = OsError(what, err);
  return broken_;
}

Status UringBackend::Run(const IoTarget& target, std::vector<IoRequest>& requests, const SpareWork& spare_work) {
  if (!broken_.ok()) return broken_;
  file_installed_ = InstallFile(target.fd);
  const Status status = RunBatch(target, requests, spare_work);
  if (file_installed_) RemoveFile();
  file_installed_ = false;
  return status;
}

Status UringBackend::RunBatch(const IoTarget& target, std::vector<IoRequest>& requests, const SpareWork& spare_work) {
  Batch batch(target, requests);
  SpareStep spare = spare_work ? SpareStep::kMore : SpareStep::kDone;
  uint64_t completions_seen = 0;
  for (;;) {
    Prepare(batch);
    Status ring_status = Submit(batch);
    if (ring_status.ok() && batch.in_flight == 0 && !batch.HasWork()) break;
    if (spare == SpareStep::kWaitForIo && batch.completions != completions_seen) spare = SpareStep::kMore;
    if (ring_status.ok() && spare == SpareStep::kMore && batch.failure.ok()) {
      completions_seen = batch.completions;
      spare = spare_work();
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
  if (spare == SpareStep::kWaitForIo) spare = SpareStep::kMore;  // every request is done now
  while (batch.failure.ok() && spare == SpareStep::kMore) spare = spare_work();
  return batch.failure;
}

}  // namespace

Result<std::unique_ptr<IoBackend>> CreateUringBackend(uint32_t queue_depth, char* arena, uint64_t arena_size,
                                                      uint64_t max_registered_buffer) {
  auto backend = std::make_unique<UringBackend>(queue_depth);
  const int rc = backend->Init(arena, arena_size, max_registered_buffer);
  if (rc == 0) return std::unique_ptr<IoBackend>(std::move(backend));
  const int err = -rc;
  const std::string message = "io_uring is not available (io_uring_queue_init with " + std::to_string(queue_depth) +
                              " entries: " + OsErrorText(err) + ")";
  // EPERM/EACCES: seccomp or the io_uring_disabled sysctl; ENOSYS: no kernel support; ENOMEM: older kernels
  // charge rings to RLIMIT_MEMLOCK.
  if (err == EPERM || err == EACCES || err == ENOSYS || err == ENOMEM) return Unsupported(message);
  return IoError(message);
}

}  // namespace ckpt::io

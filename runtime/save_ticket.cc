#include "runtime/save_ticket.h"

namespace ckpt::runtime {

void SaveTicket::Finish(Status status) {
  std::lock_guard<std::mutex> lock(mutex_);
  status_ = std::move(status);
  done_ = true;
  finished_.notify_all();
}

Status SaveTicket::Test() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_ ? status_ : Status(Code::kInProgress, "the save is still in progress");
}

Status SaveTicket::Wait(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  auto done = [this] { return done_; };
  if (timeout.count() == 0) {
    finished_.wait(lock, done);
  } else if (!finished_.wait_for(lock, timeout, done)) {
    return Status(Code::kInProgress, "the save did not finish within " + std::to_string(timeout.count()) + " ms");
  }
  return status_;
}

}  // namespace ckpt::runtime

#include "runtime/manager/background_retention.h"

#include <utility>

namespace ckpt::runtime {

BackgroundRetention::BackgroundRetention(std::function<void()> pass)
    : pass_(std::move(pass)), thread_([this] { Run(); }) {}

BackgroundRetention::~BackgroundRetention() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void BackgroundRetention::Request() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    asked_ = true;
  }
  changed_.notify_all();
}

void BackgroundRetention::Drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !asked_ && !running_; });
}

void BackgroundRetention::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return asked_ || stopping_; });
    if (!asked_) return;  // stopping, with nothing asked for
    asked_ = false;
    running_ = true;
    lock.unlock();
    pass_();
    lock.lock();
    running_ = false;
    changed_.notify_all();
  }
}

}  // namespace ckpt::runtime

#include "tests/simgpu/sim_stream.h"

#include <utility>
#include <vector>

#include "tests/simgpu/sim_config.h"

namespace simgpu {

Stream::Stream(int device) : device_(device), thread_([this] { Run(); }) {}

Stream::~Stream() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    progressed_.wait(lock, [this] { return completed_ == queued_; });
    stopping_ = true;
  }
  work_available_.notify_all();
  thread_.join();
}

uint64_t Stream::Enqueue(StreamOperation operation) {
  uint64_t sequence;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(operation));
    sequence = ++queued_;
  }
  work_available_.notify_one();
  return sequence;
}

int Stream::Synchronize() {
  std::unique_lock<std::mutex> lock(mutex_);
  progressed_.wait(lock, [this] { return completed_ == queued_; });
  return std::exchange(error_, kCudaSuccess);
}

int Stream::Query() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (completed_ != queued_) return kCudaErrorNotReady;
  return std::exchange(error_, kCudaSuccess);
}

void Stream::WaitFor(uint64_t sequence) {
  std::unique_lock<std::mutex> lock(mutex_);
  progressed_.wait(lock, [&] { return completed_ >= sequence; });
}

void Stream::Drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t sequence = queued_;
  progressed_.wait(lock, [&] { return completed_ >= sequence; });
}

void Stream::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_available_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    StreamOperation operation = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    // The pause stands for the latency of a real device: a caller that reads a destination before synchronising
    // finds it not yet written.
    std::this_thread::sleep_for(OperationDelay());
    const int result = operation();
    lock.lock();
    if (error_ == kCudaSuccess) error_ = result;
    ++completed_;
    progressed_.notify_all();
  }
}

StreamRegistry& StreamRegistry::Get() {
  static StreamRegistry* registry = new StreamRegistry();
  return *registry;
}

void* StreamRegistry::Create(int device) {
  auto stream = std::make_shared<Stream>(device);
  void* handle = stream.get();
  std::lock_guard<std::mutex> lock(mutex_);
  streams_[handle] = std::move(stream);
  return handle;
}

std::shared_ptr<Stream> StreamRegistry::Find(void* handle, int current_device) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (handle == nullptr) {
    std::shared_ptr<Stream>& stream = default_streams_[current_device];
    if (!stream) stream = std::make_shared<Stream>(current_device);
    return stream;
  }
  auto it = streams_.find(handle);
  return it == streams_.end() ? nullptr : it->second;
}

int StreamRegistry::Destroy(void* handle) {
  std::shared_ptr<Stream> stream;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = streams_.find(handle);
    if (it == streams_.end()) return kCudaErrorInvalidResourceHandle;
    stream = std::move(it->second);
    streams_.erase(it);
  }
  // Draining happens outside the lock: the stream's last operations may themselves look streams up.
  stream.reset();
  return kCudaSuccess;
}

void StreamRegistry::DrainAll() {
  std::vector<std::shared_ptr<Stream>> all;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& entry : streams_) all.push_back(entry.second);
    for (const auto& entry : default_streams_) all.push_back(entry.second);
  }
  for (const auto& stream : all) stream->Drain();
}

}  // namespace simgpu

// Simulated CUDA streams: each is a worker thread draining a FIFO of operations, so work queued on a stream really
// runs later than the call that queued it, and in order.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "tests/simgpu/sim_cuda_internal.h"

namespace simgpu {

class Stream {
 public:
  explicit Stream(int device);
  // Drains the queue, then joins the thread.
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int device() const { return device_; }
  // Returns the operation's sequence number, for WaitFor.
  uint64_t Enqueue(StreamOperation operation);
  // Waits until the queue is drained; returns the first error since the last report, and clears it.
  int Synchronize();
  // kCudaErrorNotReady while operations are pending; once drained, as Synchronize.
  int Query();
  // Waits until operation `sequence` and all before it have run; does not consume the stream's error.
  void WaitFor(uint64_t sequence);
  // Waits until everything queued so far has run; does not consume the stream's error.
  void Drain();

 private:
  void Run();

  const int device_;
  std::mutex mutex_;
  std::condition_variable work_available_;
  std::condition_variable progressed_;
  std::deque<StreamOperation> queue_;
  uint64_t queued_ = 0;     // operations ever queued
  uint64_t completed_ = 0;  // operations ever completed
  int error_ = kCudaSuccess;
  bool stopping_ = false;
  std::thread thread_;
};

class StreamRegistry {
 public:
  // The process's registry, never destroyed (see MemoryRegistry::Get).
  static StreamRegistry& Get();

  void* Create(int device);
  // The stream behind `handle`, or null for an unknown handle; a null handle is the device's default stream.
  std::shared_ptr<Stream> Find(void* handle, int current_device);
  // kCudaErrorInvalidResourceHandle for an unknown (or the default) stream.
  int Destroy(void* handle);
  // Waits until every stream has drained (what cudaFree does to the device before it frees).
  void DrainAll();

 private:
  std::mutex mutex_;
  std::map<void*, std::shared_ptr<Stream>> streams_;
  std::map<int, std::shared_ptr<Stream>> default_streams_;
};

}  // namespace simgpu

// One rank's simulated NCCL communicator. Each rank listens on an abstract Unix socket named from the session and
// its rank; a pair connects the first time a group needs it, the lower rank dialling the higher, so a connection
// never depends on what the other rank is doing at that moment. Connections are non-blocking; a group's transfers
// (tests/simgpu/sim_nccl_group.h) run on them with poll.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace simgpu {

class Communicator {
 public:
  Communicator(std::string session, int rank, int nranks, int device, bool blocking);
  // Stops the background threads and closes every socket.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  int device() const { return device_; }
  bool blocking() const { return blocking_; }

  // Binds this rank's socket and starts accepting peers: now when blocking, else in the background (the
  // communicator reports ncclInProgress until then). The NCCL result of a blocking start.
  int Start();
  // Runs `job` on the communicator's background thread, after the jobs before it; the communicator reports
  // ncclInProgress until it has run. How a non-blocking communicator defers the queuing of a group.
  void Defer(std::function<void()> job);

  // ncclInProgress while starting, deferring or finalizing with work in flight; then the first error, if any.
  int AsyncError() const;
  // Records a failure: the first one becomes the asynchronous error; `message` becomes the last error.
  void Fail(int result, const std::string& message);
  std::string LastError() const;
  // ncclSuccess when groups may be issued; else why not.
  int Usable(std::string* why) const;

  // Marks work queued on a stream for this communicator, and its end.
  void BeginOperation();
  void EndOperation();
  // Stops taking groups; a blocking communicator waits until its queued work is done.
  int Finalize();
  // Waits until no work of this communicator is queued or deferred.
  void WaitIdle();
  // Stops any group in progress promptly, then closes everything.
  void Abort();
  // Stops the background threads and closes every socket; idempotent. For a communicator with no work left.
  void Close();
  bool aborted() const { return aborted_.load(); }

  // A connected socket to `peer`, made or awaited until `deadline`; -1 with *error set when it fails or the
  // communicator is aborted.
  int Connection(int peer, std::chrono::steady_clock::time_point deadline, std::string* error);

  // Held while a group runs on the sockets, so groups on one communicator do not interleave and Abort can wait for
  // the one in progress to notice it.
  std::mutex& group_mutex() { return group_mutex_; }

 private:
  int Bind();
  void AcceptLoop();
  void AcceptOne(int fd);
  int Dial(int peer, std::chrono::steady_clock::time_point deadline, std::string* error);
  void RunBackground();

  const std::string session_;
  const int rank_;
  const int nranks_;
  const int device_;
  const bool blocking_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<int> connections_;  // socket per peer, -1 where none yet
  int listener_ = -1;
  int device_claim_ = -1;  // bound to the device's name: a second rank on the device cannot bind it
  bool started_ = false;
  bool finalizing_ = false;
  int in_flight_ = 0;  // stream operations queued and not yet finished
  int deferred_ = 0;   // background jobs queued and not yet finished
  int error_ = 0;
  std::string last_error_;
  std::deque<std::function<void()>> background_jobs_;
  bool stopping_ = false;

  std::atomic<bool> aborted_{false};
  std::mutex group_mutex_;
  std::thread acceptor_;
  std::thread background_;
};

}  // namespace simgpu

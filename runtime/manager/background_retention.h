// Retention off the save's path: rank 0's commit asks for a pass and goes on, and one thread of the manager's own
// runs the passes, so that removing old steps (a large directory tree, or thousands of objects) never delays the
// save's request, the other ranks' outcome, nor the next save's commit, which runs on the same save thread.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace ckpt::runtime {

class BackgroundRetention {
 public:
  // Starts the thread that runs `pass` (which reports its own problems) once for each Request, or once for all the
  // requests made while a pass was running: a pass judges the whole root, so one after the newest commit suffices.
  explicit BackgroundRetention(std::function<void()> pass);
  // Runs the pass still asked for, then stops the thread.
  ~BackgroundRetention();
  BackgroundRetention(const BackgroundRetention&) = delete;
  BackgroundRetention& operator=(const BackgroundRetention&) = delete;

  // Asks for a pass and returns at once.
  void Request();
  // Returns once no pass is asked for or running.
  void Drain();

 private:
  void Run();

  std::function<void()> pass_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool asked_ = false;
  bool running_ = false;
  bool stopping_ = false;
  std::thread thread_;  // last: it starts once the members above exist
};

}  // namespace ckpt::runtime

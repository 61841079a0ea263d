// A flood of connections that never prove they belong to the job, held open against a listening server on
// 127.0.0.1 (the TCP store, a peer inbox) while a test's ranks use it. Each comes from a chosen loopback address
// (127.0.0.0/8 is all loopback), so that a test can flood from the ranks' own address or from another one, and is
// one of three kinds, in turn: idle (connects, says nothing), slow (trickles a never-ending frame, a byte at a time)
// and rude (sends garbage at once). Bounded in count and time: at most `count` connections, all closed on
// destruction.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ckpt::testing {

// A connection from `source` to 127.0.0.1:port; -1 if the server is not listening (yet) or the connect failed.
inline int ConnectFrom(const char* source, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in from = {};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  sockaddr_in to = {};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// How many connections a flood may hold in this process: its client ends and the server's ends both count, and
// the ranks need descriptors too. Raises the limit first: to 4096 at least where allowed (root), else to the hard one.
inline int FloodBudget(int wanted) {
  rlimit limit = {};
  getrlimit(RLIMIT_NOFILE, &limit);
  const rlim_t roomy = std::max<rlim_t>(limit.rlim_max, 4096);
  const rlimit raised = {roomy, roomy};
  if (setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  getrlimit(RLIMIT_NOFILE, &limit);
  const rlim_t spare = limit.rlim_cur > 1024 ? limit.rlim_cur - 1024 : 0;
  return static_cast<int>(std::min<rlim_t>(static_cast<rlim_t>(wanted), spare / 2));
}

class StrangerFlood {
 public:
  // Starts opening `count` connections from `source` to `port` (retrying while the server is not up yet, for at
  // most `patience`), and trickling bytes into the slow ones until destroyed.
  StrangerFlood(int port, const char* source, int count,
                std::chrono::milliseconds patience = std::chrono::milliseconds(10000))
      : opener_([=] { Open(port, source, count, patience); }), trickler_([this] { Trickle(); }) {}

  ~StrangerFlood() {
    stop_ = true;
    opener_.join();
    trickler_.join();
    for (const int fd : fds_) close(fd);
  }

  // Waits until the flood has opened all it will.
  void WaitOpened() const {
    while (!opened_) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const std::vector<int>& fds() const { return fds_; }  // valid once WaitOpened returned

  StrangerFlood(const StrangerFlood&) = delete;
  StrangerFlood& operator=(const StrangerFlood&) = delete;

 private:
  void Open(int port, const char* source, int count, std::chrono::milliseconds patience) {
    const auto give_up = std::chrono::steady_clock::now() + patience;
    std::vector<int> slow;
    while (static_cast<int>(fds_.size()) < count && !stop_ && std::chrono::steady_clock::now() < give_up) {
      const int fd = ConnectFrom(source, port);
      if (fd < 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        continue;
      }
      const int kind = static_cast<int>(fds_.size()) % 3;
      if (kind == 1) slow.push_back(fd);
      if (kind == 2) (void)!send(fd, kGarbage, sizeof kGarbage - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      fds_.push_back(fd);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      slow_ = std::move(slow);
    }
    opened_ = true;
  }

  // One byte per slow connection every few milliseconds: a frame header that announces a hello, then its payload,
  // far too slowly to ever finish within a test.
  void Trickle() {
    size_t sent = 0;
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::lock_guard<std::mutex> lock(mu_);
      const char byte = sent < sizeof kSlowHeader ? kSlowHeader[sent] : 'x';
      for (const int fd : slow_) (void)!send(fd, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      ++sent;
    }
  }

  // u32 type 1 (hello), u64 length 200: little-endian.
  static constexpr char kSlowHeader[] = {1, 0, 0, 0, static_cast<char>(200), 0, 0, 0, 0, 0, 0, 0};
  static constexpr char kGarbage[] = "GET / HTTP/1.1\r\nHost: ckpt\r\n\r\n";

  std::atomic<bool> stop_{false};
  std::atomic<bool> opened_{false};
  std::vector<int> fds_;  // the opener's until opened_
  std::mutex mu_;
  std::vector<int> slow_;
  std::thread opener_;
  std::thread trickler_;
};

}  // namespace ckpt::testing

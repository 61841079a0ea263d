#include "tests/simgpu/sim_nccl_comm.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "tests/simgpu/sim_nccl_api.h"

namespace simgpu {
namespace {

using Clock = std::chrono::steady_clock;

// The first bytes a dialling rank sends: a marker, then its rank.
constexpr uint32_t kHelloMarker = 0x53494d47;  // "SIMG"
constexpr auto kPollInterval = std::chrono::milliseconds(50);
constexpr auto kDialRetry = std::chrono::milliseconds(10);
constexpr auto kHelloTimeout = std::chrono::seconds(2);

// The abstract socket `name` of `session`: nothing on disk to clean up, gone when the process is.
socklen_t AddressOf(const std::string& session, const std::string& name, sockaddr_un* address) {
  const std::string path = "ckpt-simgpu-nccl/" + session + "/" + name;
  std::memset(address, 0, sizeof(*address));
  address->sun_family = AF_UNIX;
  const size_t length = std::min(path.size(), sizeof(address->sun_path) - 1);
  std::memcpy(address->sun_path + 1, path.data(), length);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + length);
}

// A listening socket bound to `name` of `session`, or -1 with *error set to the errno.
int Listen(const std::string& session, const std::string& name, int backlog, int* error) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_un address;
  const socklen_t length = AddressOf(session, name, &address);
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&address), length) == 0 && listen(fd, backlog) == 0) return fd;
  *error = errno;
  if (fd >= 0) close(fd);
  return -1;
}

std::string ErrnoText(int error) { return std::strerror(error); }

// Reads exactly `size` bytes from non-blocking `fd` before `deadline`.
bool ReadFully(int fd, char* data, size_t size, Clock::time_point deadline) {
  while (size > 0) {
    const ssize_t got = recv(fd, data, size, 0);
    if (got > 0) {
      data += got;
      size -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0 || (errno != EAGAIN && errno != EINTR) || Clock::now() >= deadline) return false;
    pollfd waiting{fd, POLLIN, 0};
    poll(&waiting, 1, static_cast<int>(kPollInterval.count()));
  }
  return true;
}

}  // namespace

Communicator::Communicator(std::string session, int rank, int nranks, int device, bool blocking)
    : session_(std::move(session)),
      rank_(rank),
      nranks_(nranks),
      device_(device),
      blocking_(blocking),
      connections_(static_cast<size_t>(nranks), -1),
      background_([this] { RunBackground(); }) {}

Communicator::~Communicator() { Close(); }

int Communicator::Start() {
  if (!blocking_) {
    Defer([this] { Bind(); });
    return kNcclInProgress;
  }
  return Bind();
}

int Communicator::Bind() {
  // Ranks on one host share its devices: as in NCCL, two ranks of a communicator on one device are refused, which
  // a second socket named after the device detects.
  int error = 0;
  const int claim = Listen(session_, "device-" + std::to_string(device_), 1, &error);
  if (claim < 0) {
    const int result = error == EADDRINUSE ? kNcclInvalidUsage : kNcclSystemError;
    Fail(result, error == EADDRINUSE
                     ? "Duplicate GPU detected: rank " + std::to_string(rank_) +
                           " and another rank of the communicator both use device " + std::to_string(device_)
                     : "rank " + std::to_string(rank_) + " cannot claim its device: " + ErrnoText(error));
    return result;
  }
  const int listener = Listen(session_, std::to_string(rank_), nranks_ + 8, &error);
  if (listener < 0) {
    close(claim);
    const int result = error == EADDRINUSE ? kNcclInvalidUsage : kNcclSystemError;
    Fail(result, error == EADDRINUSE ? "another communicator of this session already has rank " + std::to_string(rank_)
                                     : "rank " + std::to_string(rank_) + " cannot listen: " + ErrnoText(error));
    return result;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  device_claim_ = claim;
  listener_ = listener;
  started_ = true;
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return kNcclSuccess;
}

void Communicator::AcceptLoop() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
    }
    pollfd waiting{listener_, POLLIN, 0};
    if (poll(&waiting, 1, static_cast<int>(kPollInterval.count())) <= 0) continue;
    const int fd = accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) AcceptOne(fd);
  }
}

void Communicator::AcceptOne(int fd) {
  uint32_t hello[2];
  const bool greeted = ReadFully(fd, reinterpret_cast<char*>(hello), sizeof(hello), Clock::now() + kHelloTimeout);
  const int peer = static_cast<int>(hello[1]);
  std::lock_guard<std::mutex> lock(mutex_);
  // Only lower ranks dial, once each; anything else is not a peer of this communicator.
  if (!greeted || hello[0] != kHelloMarker || peer < 0 || peer >= rank_ || connections_[peer] >= 0) {
    close(fd);
    return;
  }
  connections_[peer] = fd;
  changed_.notify_all();
}

int Communicator::Dial(int peer, Clock::time_point deadline, std::string* error) {
  sockaddr_un address;
  const socklen_t length = AddressOf(session_, std::to_string(peer), &address);
  for (;;) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *error = "rank " + std::to_string(rank_) + " cannot open a socket: " + ErrnoText(errno);
      return -1;
    }
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), length) == 0) {
      const uint32_t hello[2] = {kHelloMarker, static_cast<uint32_t>(rank_)};
      // A fresh connection's buffer is empty: the greeting goes out whole.
      if (send(fd, hello, sizeof(hello), MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof(hello))) return fd;
    }
    const int failure = errno;
    close(fd);
    // The peer may not listen yet (refused) or have a full backlog (again): retry until the deadline.
    const bool retry = failure == ECONNREFUSED || failure == EAGAIN || failure == ENOENT || failure == EINTR;
    if (aborted_.load()) {
      *error = "communicator of rank " + std::to_string(rank_) + " was aborted";
      return -1;
    }
    if (!retry || Clock::now() >= deadline) {
      *error = "rank " + std::to_string(rank_) + " could not connect to peer rank " + std::to_string(peer) + ": " +
               ErrnoText(failure);
      return -1;
    }
    std::this_thread::sleep_for(kDialRetry);
  }
}

int Communicator::Connection(int peer, Clock::time_point deadline, std::string* error) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (connections_[peer] >= 0) return connections_[peer];
  if (peer > rank_) {
    lock.unlock();
    const int fd = Dial(peer, deadline, error);
    lock.lock();
    if (fd >= 0) connections_[peer] = fd;
    return fd;
  }
  while (connections_[peer] < 0) {
    if (aborted_.load()) {
      *error = "communicator of rank " + std::to_string(rank_) + " was aborted";
      return -1;
    }
    if (Clock::now() >= deadline) {
      *error =
          "rank " + std::to_string(rank_) + " waited in vain for peer rank " + std::to_string(peer) + " to connect";
      return -1;
    }
    changed_.wait_until(lock, std::min(deadline, Clock::now() + kPollInterval));
  }
  return connections_[peer];
}

void Communicator::Defer(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(mutex_);
  background_jobs_.push_back(std::move(job));
  ++deferred_;
  changed_.notify_all();
}

void Communicator::RunBackground() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || !background_jobs_.empty(); });
    if (background_jobs_.empty()) return;
    std::function<void()> job = std::move(background_jobs_.front());
    background_jobs_.pop_front();
    lock.unlock();
    job();
    lock.lock();
    --deferred_;
    changed_.notify_all();
  }
}

int Communicator::AsyncError() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_ != kNcclSuccess) return error_;
  if (!started_ || deferred_ > 0 || (finalizing_ && in_flight_ > 0)) return kNcclInProgress;
  return kNcclSuccess;
}

void Communicator::Fail(int result, const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_ == kNcclSuccess) error_ = result;
  last_error_ = message;
}

std::string Communicator::LastError() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_error_;
}

int Communicator::Usable(std::string* why) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string who = "communicator of rank " + std::to_string(rank_);
  if (error_ != kNcclSuccess) {
    *why = who + " has failed: " + last_error_;
    return error_;
  }
  if (aborted_.load() || finalizing_ || !started_) {
    *why = who + (aborted_.load() ? " was aborted" : finalizing_ ? " was finalized" : " is still initialising");
    return kNcclInvalidUsage;
  }
  return kNcclSuccess;
}

void Communicator::BeginOperation() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++in_flight_;
}

void Communicator::EndOperation() {
  std::lock_guard<std::mutex> lock(mutex_);
  --in_flight_;
  changed_.notify_all();
}

int Communicator::Finalize() {
  std::unique_lock<std::mutex> lock(mutex_);
  finalizing_ = true;
  if (!blocking_) return in_flight_ > 0 || deferred_ > 0 ? kNcclInProgress : kNcclSuccess;
  changed_.wait(lock, [this] { return in_flight_ == 0 && deferred_ == 0; });
  return kNcclSuccess;
}

void Communicator::WaitIdle() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return in_flight_ == 0 && deferred_ == 0; });
}

void Communicator::Abort() {
  aborted_.store(true);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    changed_.notify_all();
  }
  // A group in progress polls the abort flag; taking its mutex waits until it has noticed and let go.
  { std::lock_guard<std::mutex> group(group_mutex_); }
  Close();
}

void Communicator::Close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    changed_.notify_all();
  }
  if (background_.joinable()) background_.join();
  std::thread acceptor;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    acceptor = std::move(acceptor_);
  }
  if (acceptor.joinable()) acceptor.join();
  std::lock_guard<std::mutex> lock(mutex_);
  for (int* fd : {&listener_, &device_claim_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
  for (int& fd : connections_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

}  // namespace simgpu

#include "tests/simgpu/sim_config.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

namespace simgpu {
namespace {

// The variable as a non-negative number, or `fallback` when it is unset or does not parse.
unsigned long long NumberFromEnv(const char* name, unsigned long long fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  return *end == '\0' ? value : fallback;
}

}  // namespace

int DeviceCount() {
  static const int count = static_cast<int>(NumberFromEnv("CKPT_SIMGPU_DEVICES", 2) & 0xffff);
  return count;
}

size_t DeviceCapacityBytes() {
  static const size_t bytes = NumberFromEnv("CKPT_SIMGPU_DEVICE_BYTES", size_t{16} << 30);
  return bytes;
}

std::chrono::microseconds OperationDelay() {
  static const std::chrono::microseconds delay(NumberFromEnv("CKPT_SIMGPU_OP_DELAY_US", 200));
  return delay;
}

std::chrono::milliseconds ConnectTimeout() {
  static const std::chrono::milliseconds timeout(NumberFromEnv("CKPT_SIMGPU_NCCL_CONNECT_TIMEOUT_MS", 30000));
  return timeout;
}

void Trace(const std::string& line) {
  static const char* path = std::getenv("CKPT_SIMGPU_TRACE");
  if (path == nullptr || *path == '\0') return;
  const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const std::string text = line + "\n";
  // One write per line with O_APPEND keeps lines whole when several threads or processes trace.
  (void)!write(fd, text.data(), text.size());
  close(fd);
}

}  // namespace simgpu

// Every setting ckpt reads from the environment, with its default, in one place. (The launcher's own variables,
// RANK, MASTER_ADDR and the like, are read by collectives/bootstrap.cc.)
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

namespace ckpt::settings {

// CKPT_TIMEOUT_MS: how long any wait on a peer may last before it fails (default 300 s).
inline constexpr uint64_t kDefaultTimeoutMs = 300000;
inline constexpr char kTimeoutVar[] = "CKPT_TIMEOUT_MS";
// CKPT_NODE_NAME: overrides the host name as this rank's node identity (for balancing writes across nodes).
inline constexpr char kNodeNameVar[] = "CKPT_NODE_NAME";
// CKPT_LOG_LEVEL: 0 errors, 1 warnings (default), 2 info; for the default log sink on standard error.
inline constexpr char kLogLevelVar[] = "CKPT_LOG_LEVEL";
inline constexpr int kDefaultLogLevel = 1;

// The variable's value as a positive integer, or `fallback` when unset or not a positive integer.
inline uint64_t PositiveFromEnv(const char* name, uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  unsigned long long value = std::strtoull(text, &end, 10);
  return (*end == '\0' && value > 0) ? value : fallback;
}

}  // namespace ckpt::settings

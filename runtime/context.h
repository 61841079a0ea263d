// One rank's context: who it is, its control plane, its timeout, and where its log lines go.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "collectives/bootstrap.h"
#include "collectives/control_plane.h"
#include "common/status.h"

namespace ckpt::runtime {

enum class LogLevel : int32_t { kError = 0, kWarning = 1, kInfo = 2 };
using LogSink = std::function<void(LogLevel, const std::string&)>;

struct ContextConfig {
  coll::ProcessIdentityRequest identity;
  std::chrono::milliseconds timeout{0};  // 0: CKPT_TIMEOUT_MS, else 300 s
  coll::AllGatherCallback allgather;     // set: the control plane runs over it instead of the TCP store
  LogSink log;                           // empty: standard error, warnings and errors
};

class Context {
 public:
  static Result<std::unique_ptr<Context>> Create(ContextConfig config);

  int rank() const { return identity_.rank; }
  int world_size() const { return identity_.world_size; }
  int local_rank() const { return identity_.local_rank; }
  const std::string& node_name() const { return identity_.node_name; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  coll::ControlPlane& control() { return *control_; }

  void Log(LogLevel level, const std::string& message) const;

 private:
  Context() = default;
  coll::ProcessIdentity identity_;
  std::chrono::milliseconds timeout_{0};
  std::unique_ptr<coll::ControlPlane> control_;
  LogSink log_;
};

}  // namespace ckpt::runtime

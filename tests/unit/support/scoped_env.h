// An environment variable set for a scope: the unit tests that steer the library through its variables (fault
// hooks, UCX's transports) set one for a test and get the previous value, or its absence, back afterwards.
#pragma once

#include <stdlib.h>

#include <optional>
#include <string>

namespace ckpt::testing {

class ScopedEnv {
 public:
  // `value` null: the variable is unset for the scope.
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* saved = getenv(name)) saved_ = saved;
    if (value != nullptr) {
      setenv(name, value, /*overwrite=*/1);
    } else {
      unsetenv(name);
    }
  }
  ScopedEnv(const char* name, const std::string& value) : ScopedEnv(name, value.c_str()) {}
  ~ScopedEnv() {
    if (saved_) {
      setenv(name_.c_str(), saved_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

}  // namespace ckpt::testing

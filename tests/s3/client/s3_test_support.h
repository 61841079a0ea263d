// What the S3 client's tests share: the hostile server (tests/s3/hostile_server.py) run for one test, and the real
// server's settings read from the env file that CKPT_S3_TEST_ENV names (written by tools/s3_server.sh).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include "io/s3/s3_client.h"

extern char** environ;

namespace ckpt::s3::testing {

// hostile_server.py MODE [ARG], started on an ephemeral port and killed when this goes.
class HostileServer {
 public:
  explicit HostileServer(const std::string& mode, const std::string& arg = "") {
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    std::string script = CKPT_S3_HOSTILE_SERVER;
    std::vector<char*> argv{const_cast<char*>("python3"), script.data(), const_cast<char*>(mode.c_str())};
    if (!arg.empty()) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    int failed = posix_spawnp(&pid_, "python3", &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    if (failed != 0) {
      close(out[0]);
      throw std::runtime_error("cannot start python3 " + script);
    }
    FILE* stream = fdopen(out[0], "r");
    if (stream == nullptr || fscanf(stream, "%d", &port_) != 1) {
      if (stream != nullptr) fclose(stream);
      throw std::runtime_error("hostile_server.py printed no port");
    }
    fclose(stream);
  }
  ~HostileServer() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  HostileServer(const HostileServer&) = delete;
  HostileServer& operator=(const HostileServer&) = delete;

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Settings for this server: path-style, quick backoff limits and stall detection.
  Settings MakeSettings(uint32_t max_attempts = 3) const {
    Settings settings;
    settings.endpoint = endpoint();
    settings.access_key_id = "AKIAHOSTILE";
    settings.secret_access_key = "hostile-secret";
    settings.addressing = Addressing::kPath;
    settings.max_attempts = max_attempts;
    settings.connect_timeout = std::chrono::milliseconds(2000);
    settings.stall_timeout = std::chrono::milliseconds(1000);
    return settings;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

// The real server's env file (KEY=VALUE lines), or nullopt when CKPT_S3_TEST_ENV is unset or names no file (the
// fixture s3_server skipped: no Ceph on this machine).
inline std::optional<std::map<std::string, std::string>> RealServerEnv() {
  const char* path = getenv("CKPT_S3_TEST_ENV");
  if (path == nullptr || *path == '\0') return std::nullopt;
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::map<std::string, std::string> values;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("export ", 0) == 0) line = line.substr(7);
    size_t equals = line.find('=');
    if (equals == std::string::npos || line[0] == '#') continue;
    std::string value = line.substr(equals + 1);
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'')) value = value.substr(1, value.size() - 2);
    values[line.substr(0, equals)] = value;
  }
  return values;
}

}  // namespace ckpt::s3::testing

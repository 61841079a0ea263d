// A test's own temporary directory. TempDir makes one (mkdtemp) and removes it, with all it holds, when it goes;
// TempDirTest is the GoogleTest fixture that gives each test one, named after its suite, removed after the fixture's
// own members are gone. A directory that cannot be made fails the test before its body runs.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace ckpt::testing {

class TempDir {
 public:
  // Makes <parent>/ckpt-<name>-XXXXXX. /tmp is a disk; tests that need a tmpfs pass /dev/shm. Throws when mkdtemp
  // fails, which GoogleTest reports as the test's failure.
  explicit TempDir(const std::string& name, const std::string& parent = "/tmp") {
    std::string pattern = parent + "/ckpt-" + name + "-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("cannot make a temporary directory " + pattern + ": " + std::strerror(errno));
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;  // what cannot be removed is left behind rather than failing a finished test
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Path(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

class TempDirTest : public ::testing::Test {
 protected:
  explicit TempDirTest(const std::string& parent = "/tmp") : dir_(CurrentSuite(), parent) {}

  // The test's directory, and a path inside it.
  const std::string& dir() const { return dir_.path(); }
  std::string Path(const std::string& name) const { return dir_.Path(name); }

 private:
  // The running test's suite, as a file name: a parameterized suite's name holds its instantiation's, after a '/'.
  static std::string CurrentSuite() {
    std::string suite = ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name();
    std::replace(suite.begin(), suite.end(), '/', '-');
    return suite;
  }

  TempDir dir_;
};

}  // namespace ckpt::testing

// Spare work that waits for I/O (a read's checksums, checked as its requests complete): each backend calls it again
// only after a completion, never spins on it, stops calling it once nothing is left in flight, and lets it see a
// request as done only once the request's bytes are in memory.
// ctest-labels: threaded
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "io/file_jobs.h"
#include "io/io_backend.h"
#include "io/staging_arena.h"

namespace ckpt::io {
namespace {

constexpr uint64_t kRequestBytes = 256 << 10;
constexpr size_t kRequests = 32;

class SpareWorkTest : public ::testing::TestWithParam<IoBackendKind> {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<IoBackend>> backend =
        GetParam() == IoBackendKind::kIoUring ? CreateUringBackend(4) : CreatePwriteBackend(4);
    if (!backend.ok() && backend.status().code() == Code::kUnsupported) GTEST_SKIP() << backend.status().message();
    ASSERT_TRUE(backend.ok()) << backend.status().message();
    backend_ = std::move(backend).value();
    char name[] = "/tmp/ckpt-spare-XXXXXX";
    fd_ = mkstemp(name);
    ASSERT_GE(fd_, 0) << std::strerror(errno);
    unlink(name);
    path_ = name;
    file_.resize(kRequests * kRequestBytes);
    for (size_t i = 0; i < file_.size(); ++i) file_[i] = static_cast<char>(i * 131 + i / 4099);
    ASSERT_EQ(pwrite(fd_, file_.data(), file_.size(), 0), static_cast<ssize_t>(file_.size()));
    memory_.assign(file_.size(), '\0');
    for (size_t i = 0; i < kRequests; ++i) {
      requests_.push_back(IoRequest{memory_.data() + i * kRequestBytes, kRequestBytes, i * kRequestBytes});
    }
  }
  void TearDown() override {
    if (fd_ >= 0) close(fd_);
  }

  Status RunRead(const SpareWork& spare) {
    const IoTarget target{IoDirection::kRead, fd_, false, &path_};
    return backend_->Run(target, requests_, spare);
  }

  bool Done(size_t i) const { return requests_[i].transferred >= requests_[i].length; }
  bool Holds(size_t i) const {
    return std::memcmp(memory_.data() + i * kRequestBytes, file_.data() + i * kRequestBytes, kRequestBytes) == 0;
  }

  std::unique_ptr<IoBackend> backend_;
  int fd_ = -1;
  std::string path_;
  std::vector<char> file_;
  std::vector<char> memory_;
  std::vector<IoRequest> requests_;
};

TEST_P(SpareWorkTest, ReadSpareWorkSeesEachRequestDoneOnlyWithItsBytesAndIsCalledAgainOnlyAfterCompletions) {
  size_t checked = 0, calls = 0;
  bool bytes_missing = false;
  const Status status = RunRead([&] {
    ++calls;
    if (checked == kRequests) return SpareStep::kDone;
    if (!Done(checked)) return SpareStep::kWaitForIo;
    bytes_missing = bytes_missing || !Holds(checked);
    ++checked;
    return SpareStep::kMore;
  });
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(checked, kRequests);
  EXPECT_FALSE(bytes_missing);
  // A request checked per kMore call, a kDone call, and at most one kWaitForIo per completion.
  EXPECT_LE(calls, 2 * kRequests + 1);
}

TEST_P(SpareWorkTest, ReadSpareWorkThatAlwaysWaitsEndsWithTheIo) {
  size_t calls = 0;
  const Status status = RunRead([&] {
    ++calls;
    return SpareStep::kWaitForIo;
  });
  ASSERT_TRUE(status.ok()) << status.message();
  for (size_t i = 0; i < kRequests; ++i) EXPECT_TRUE(Done(i) && Holds(i)) << "request " << i;
  EXPECT_GE(calls, 1u);
  EXPECT_LE(calls, kRequests + 1);
}

std::string KindName(const ::testing::TestParamInfo<IoBackendKind>& info) {
  return info.param == IoBackendKind::kIoUring ? "IoUring" : "Pwrite";
}

INSTANTIATE_TEST_SUITE_P(Backends, SpareWorkTest, ::testing::Values(IoBackendKind::kIoUring, IoBackendKind::kPwrite),
                         KindName);

}  // namespace
}  // namespace ckpt::io

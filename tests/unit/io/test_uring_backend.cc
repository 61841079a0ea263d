// The io_uring backend's registered arena: requests inside one registered buffer use the fixed forms, a request
// that straddles two buffers the plain form, and either moves the right bytes to the right file offsets.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "io/io_backend.h"
#include "io/staging_arena.h"

namespace ckpt::io {
namespace {

constexpr uint64_t kBuffer = 1ull << 20;  // registered buffers of 1 MiB, so that a small arena holds several

class UringBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<StagingArena>> arena = StagingArena::Create(kMinArenaBytes);
    ASSERT_TRUE(arena.ok()) << arena.status().message();
    arena_ = std::move(arena).value();
    char name[] = "/tmp/ckpt-uring-XXXXXX";
    fd_ = mkstemp(name);
    ASSERT_GE(fd_, 0) << std::strerror(errno);
    unlink(name);
    path_ = name;
    Result<std::unique_ptr<IoBackend>> probe = CreateUringBackend(4);
    if (!probe.ok() && probe.status().code() == Code::kUnsupported) GTEST_SKIP() << probe.status().message();
  }
  void TearDown() override {
    if (fd_ >= 0) close(fd_);
  }

  // Runs `requests` of `direction` on the file through a backend with the arena registered.
  void Run(IoDirection direction, std::vector<IoRequest> requests) {
    Result<std::unique_ptr<IoBackend>> backend = CreateUringBackend(4, arena_->data(), 4 * kBuffer, kBuffer);
    ASSERT_TRUE(backend.ok()) << backend.status().message();
    if (geteuid() == 0) EXPECT_STREQ((*backend)->name(), "io_uring+fixed");  // root: no RLIMIT_MEMLOCK charge
    IoTarget target{direction, fd_, false, &path_};
    ASSERT_TRUE((*backend)->Run(target, requests, nullptr).ok());
  }

  std::unique_ptr<StagingArena> arena_;
  int fd_ = -1;
  std::string path_;
};

TEST_F(UringBackendTest, WritesAndReadsInsideAndAcrossRegisteredBuffers) {
  char* arena = arena_->data();
  std::mt19937 random(std::random_device{}());
  for (uint64_t i = 0; i < 4 * kBuffer; ++i) arena[i] = static_cast<char>(random());
  const std::string written(arena, 4 * kBuffer);
  // Inside buffer 0; straddling buffers 1 and 2; the last bytes of buffer 3.
  std::vector<IoRequest> writes = {{arena, 64 << 10, 0},
                                   {arena + kBuffer + kBuffer / 2, kBuffer, 1 << 20},
                                   {arena + 4 * kBuffer - 8192, 8192, 3 << 20}};
  Run(IoDirection::kWrite, writes);
  std::string file(4 * kBuffer, '\0');
  ASSERT_EQ(pread(fd_, file.data(), file.size(), 0), static_cast<ssize_t>((3 << 20) + 8192));
  EXPECT_EQ(file.compare(0, 64 << 10, written, 0, 64 << 10), 0);
  EXPECT_EQ(file.compare(1 << 20, kBuffer, written, kBuffer + kBuffer / 2, kBuffer), 0);
  EXPECT_EQ(file.compare(3 << 20, 8192, written, 4 * kBuffer - 8192, 8192), 0);

  std::memset(arena, 0, 4 * kBuffer);
  // Read back the straddling range into buffer 0 and the small one across the 2 MiB boundary.
  std::vector<IoRequest> reads = {{arena, kBuffer, 1 << 20}, {arena + 2 * kBuffer - 4096, 8192, 3 << 20}};
  Run(IoDirection::kRead, reads);
  EXPECT_EQ(std::memcmp(arena, written.data() + kBuffer + kBuffer / 2, kBuffer), 0);
  EXPECT_EQ(std::memcmp(arena + 2 * kBuffer - 4096, written.data() + 4 * kBuffer - 8192, 8192), 0);
}

TEST_F(UringBackendTest, ARequestOutsideTheArenaStillMovesItsBytes) {
  std::vector<char> outside(8192, 'x');
  Run(IoDirection::kWrite, {{outside.data(), outside.size(), 0}});
  std::string file(8192, '\0');
  ASSERT_EQ(pread(fd_, file.data(), file.size(), 0), 8192);
  EXPECT_EQ(file, std::string(8192, 'x'));
}

}  // namespace
}  // namespace ckpt::io

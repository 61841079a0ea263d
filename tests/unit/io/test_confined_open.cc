// OpenBeneath: only regular files beneath the root, reached without following links, opened without blocking; both
// through openat2 and through the component-by-component fallback of older kernels.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "io/confined_open.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::io {
namespace {

namespace fs = std::filesystem;

using OpenFn = Result<int> (*)(const std::string&, const std::string&, int);

class ConfinedOpenTest : public testing::TempDirTest, public ::testing::WithParamInterface<OpenFn> {
 protected:
  void SetUp() override {
    root_ = Path("checkpoint");
    fs::create_directories(root_ + "/data");
    fs::create_directories(Path("outside"));
    std::ofstream(root_ + "/data/0-0.bin") << "inside";
    std::ofstream(Path("outside/secret")) << "outside";
  }

  // The status of opening `name` beneath the root; the descriptor, if any, is closed.
  Status OpenStatus(const std::string& name) {
    Result<int> fd = GetParam()(root_, name, O_RDONLY);
    if (fd.ok()) close(*fd);
    return fd.status();
  }

  std::string root_;
};

TEST_P(ConfinedOpenTest, OpensARegularFileBeneathTheRoot) {
  Result<int> fd = GetParam()(root_, "data/0-0.bin", O_RDONLY);
  ASSERT_TRUE(fd.ok()) << fd.status().message();
  char text[7] = {};
  EXPECT_EQ(read(*fd, text, 6), 6);
  EXPECT_STREQ(text, "inside");
  EXPECT_EQ(fcntl(*fd, F_GETFL) & O_NONBLOCK, 0);
  EXPECT_NE(fcntl(*fd, F_GETFD) & FD_CLOEXEC, 0);
  close(*fd);
}

TEST_P(ConfinedOpenTest, ASymlinkAsTheFileIsRefused) {
  fs::create_symlink(Path("outside/secret"), root_ + "/data/link.bin");
  const Status status = OpenStatus("data/link.bin");
  EXPECT_EQ(status.code(), Code::kCorrupt);
  EXPECT_NE(status.message().find("symbolic link"), std::string::npos) << status.message();
}

TEST_P(ConfinedOpenTest, ASymlinkedDirectoryOnTheWayIsRefused) {
  fs::create_directory_symlink(Path("outside"), root_ + "/linked");
  EXPECT_EQ(OpenStatus("linked/secret").code(), Code::kCorrupt);
}

TEST_P(ConfinedOpenTest, ARelativeSymlinkInsideTheRootIsRefusedToo) {
  fs::create_symlink("0-0.bin", root_ + "/data/alias.bin");
  EXPECT_EQ(OpenStatus("data/alias.bin").code(), Code::kCorrupt);
}

TEST_P(ConfinedOpenTest, DotDotCannotLeaveTheRoot) {
  const Status status = OpenStatus("../outside/secret");
  EXPECT_EQ(status.code(), Code::kCorrupt) << status.message();
}

TEST_P(ConfinedOpenTest, AbsoluteNamesAreRefused) {
  EXPECT_EQ(OpenStatus(Path("outside/secret")).code(), Code::kCorrupt);
}

TEST_P(ConfinedOpenTest, AFifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(mkfifo((root_ + "/data/pipe.bin").c_str(), 0600), 0);
  const Status status = OpenStatus("data/pipe.bin");  // a blocking open would wait here for a writer forever
  EXPECT_EQ(status.code(), Code::kCorrupt);
  EXPECT_NE(status.message().find("not a regular file"), std::string::npos) << status.message();
}

TEST_P(ConfinedOpenTest, ADirectoryIsNotAFile) { EXPECT_EQ(OpenStatus("data").code(), Code::kCorrupt); }

TEST_P(ConfinedOpenTest, AMissingFileIsNotFound) { EXPECT_EQ(OpenStatus("data/none.bin").code(), Code::kNotFound); }

TEST_P(ConfinedOpenTest, TheRootItselfMayBeReachedThroughALink) {
  fs::create_directory_symlink(root_, Path("latest"));
  Result<int> fd = GetParam()(Path("latest"), "data/0-0.bin", O_RDONLY);
  ASSERT_TRUE(fd.ok()) << fd.status().message();
  close(*fd);
}

INSTANTIATE_TEST_SUITE_P(Strategies, ConfinedOpenTest, ::testing::Values(&OpenBeneath, &OpenBeneathByWalking),
                         [](const ::testing::TestParamInfo<OpenFn>& info) {
                           return info.param == &OpenBeneath ? std::string("Openat2") : std::string("Walking");
                         });

}  // namespace
}  // namespace ckpt::io

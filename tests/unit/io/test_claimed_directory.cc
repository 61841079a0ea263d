// A save's temporary directory is claimed while its save lives; leftovers of dead saves are removed by the next save
// to the same path and by the manager, and live ones are never touched.
// ctest-labels: threaded
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "io/claimed_directory.h"
#include "io/file_io.h"
#include "runtime/format/save_directory.h"
#include "runtime/manager/manager.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt {
namespace {

class ClaimedDirectoryTest : public testing::TempDirTest {
 protected:
  // A directory as a crashed save leaves it: some data, no claim.
  std::string Leftover(const std::string& name) {
    const std::string path = io::JoinPath(dir(), name);
    std::filesystem::create_directories(path + "/data");
    std::ofstream(path + "/data/0-0.bin") << "partial";
    return path;
  }
};

TEST_F(ClaimedDirectoryTest, AClaimHoldsUntilItsDescriptorIsClosed) {
  const std::string path = io::JoinPath(dir(), "a/b.tmp-1");
  Result<io::Claim> claim = io::ClaimDirectory(path);
  ASSERT_TRUE(claim.ok()) << claim.status().message();
  ASSERT_TRUE(claim->valid());
  EXPECT_TRUE(io::IsDirectory(path));
  EXPECT_TRUE(io::IsClaimed(path));
  EXPECT_EQ(io::ClaimDirectory(path).status().code(), Code::kAlreadyExists);
  claim->Reset();
  EXPECT_FALSE(io::IsClaimed(path));
  EXPECT_FALSE(io::IsClaimed(io::JoinPath(dir(), "missing")));
}

TEST_F(ClaimedDirectoryTest, AClaimDiesWithItsProcessHoweverItDies) {
  const std::string path = io::JoinPath(dir(), "ckpt.tmp-2");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    Result<io::Claim> claim = io::ClaimDirectory(path);
    const char byte = claim.ok() && claim->valid() ? 1 : 0;
    (void)!write(ready[1], &byte, 1);
    pause();  // until killed
    _exit(0);
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  ASSERT_EQ(byte, 1);
  EXPECT_TRUE(io::IsClaimed(path));
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_FALSE(io::IsClaimed(path));
  close(ready[0]);
  close(ready[1]);
}

TEST_F(ClaimedDirectoryTest, ASaveRemovesTheTemporariesOfDeadSavesToItsPathOnly) {
  const std::string path = io::JoinPath(dir(), "ckpt");
  const std::string dead = Leftover("ckpt.tmp-0123");
  const std::string other_path = Leftover("ckpt-other.tmp-4567");
  const std::string live = io::JoinPath(dir(), "ckpt.tmp-89ab");
  Result<io::Claim> live_claim = io::ClaimDirectory(live);
  ASSERT_TRUE(live_claim.ok());
  Result<io::Claim> claim = runtime::ClaimSaveDirectory(path, "cdef");
  ASSERT_TRUE(claim.ok()) << claim.status().message();
  EXPECT_FALSE(io::PathExists(dead));
  EXPECT_TRUE(io::PathExists(other_path));
  EXPECT_TRUE(io::PathExists(live));
  EXPECT_TRUE(io::IsClaimed(runtime::TemporaryDirectory(path, "cdef")));
}

TEST_F(ClaimedDirectoryTest, ASaveOntoACommittedPathIsRefusedBeforeAnythingIsCreated) {
  const std::string path = io::JoinPath(dir(), "ckpt");
  std::filesystem::create_directories(path);
  EXPECT_EQ(runtime::ClaimSaveDirectory(path, "cdef").status().code(), Code::kAlreadyExists);
  EXPECT_FALSE(io::PathExists(runtime::TemporaryDirectory(path, "cdef")));
}

TEST_F(ClaimedDirectoryTest, TheManagerRemovesDeadSavesTemporariesAndKeepsLiveOnes) {
  const std::string dead = Leftover("step-000000000007.tmp-0123");
  const std::string live = io::JoinPath(dir(), "step-000000000008.tmp-4567");
  Result<io::Claim> live_claim = io::ClaimDirectory(live);
  ASSERT_TRUE(live_claim.ok());
  Result<std::unique_ptr<runtime::CheckpointManager>> manager =
      runtime::CheckpointManager::Open(dir(), runtime::RetentionPolicy{});
  ASSERT_TRUE(manager.ok()) << manager.status().message();
  Result<std::vector<std::string>> removed = (*manager)->CleanupUncommitted();
  ASSERT_TRUE(removed.ok()) << removed.status().message();
  EXPECT_EQ(*removed, std::vector<std::string>{"step-000000000007.tmp-0123"});
  EXPECT_FALSE(io::PathExists(dead));
  EXPECT_TRUE(io::PathExists(live));
}

}  // namespace
}  // namespace ckpt

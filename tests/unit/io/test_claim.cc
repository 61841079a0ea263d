// A released claim is free at once, even while a process spawned when it was held still has a copy of its
// descriptor (a child between its clone and its exec, which another thread of a trainer may start at any time).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

#include "io/claimed_directory.h"
#include "io/claimed_file.h"
#include "io/file_io.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt {
namespace {

class ClaimTest : public testing::TempDirTest {
 protected:
  // Forks a child that keeps every descriptor of ours open until it is told to go, releases `claim` while the
  // child lives, and returns what `claim_again` answered then.
  Status ReleaseWhileAChildHoldsACopy(io::Claim& claim, const std::function<Status()>& claim_again) {
    int go[2];
    EXPECT_EQ(pipe(go), 0);
    const pid_t child = fork();
    if (child == 0) {
      char byte = 0;
      (void)!read(go[0], &byte, 1);
      _exit(0);
    }
    claim.Reset();
    const Status again = claim_again();
    (void)!write(go[1], "x", 1);
    int status = 0;
    waitpid(child, &status, 0);
    close(go[0]);
    close(go[1]);
    return again;
  }
};

TEST_F(ClaimTest, AReleasedFileClaimIsFreeWhileAChildStillHoldsItsDescriptor) {
  const std::string path = io::JoinPath(dir(), "manager.lock");
  Result<io::Claim> claim = io::ClaimFile(path, "the first holder");
  ASSERT_TRUE(claim.ok()) << claim.status().message();
  ASSERT_TRUE(claim->valid());
  const Status again = ReleaseWhileAChildHoldsACopy(*claim, [&] { return io::ClaimFile(path, "the next").status(); });
  EXPECT_TRUE(again.ok()) << again.message();
}

TEST_F(ClaimTest, AReleasedDirectoryClaimIsFreeWhileAChildStillHoldsItsDescriptor) {
  const std::string path = io::JoinPath(dir(), "step-1.tmp-ab");
  Result<io::Claim> claim = io::ClaimDirectory(path);
  ASSERT_TRUE(claim.ok()) << claim.status().message();
  ASSERT_TRUE(claim->valid());
  const Status again = ReleaseWhileAChildHoldsACopy(
      *claim, [&] { return io::IsClaimed(path) ? AlreadyExists("still claimed after the release") : Status::Ok(); });
  EXPECT_TRUE(again.ok()) << again.message();
}

TEST_F(ClaimTest, AMovedClaimIsHeldByItsNewOwnerAlone) {
  const std::string path = io::JoinPath(dir(), "held.tmp-1");
  Result<io::Claim> claim = io::ClaimDirectory(path);
  ASSERT_TRUE(claim.ok()) << claim.status().message();
  io::Claim owner = std::move(claim).value();
  EXPECT_TRUE(io::IsClaimed(path));
  io::Claim other;
  other = std::move(owner);
  EXPECT_TRUE(io::IsClaimed(path));
  other.Reset();
  EXPECT_FALSE(io::IsClaimed(path));
}

}  // namespace
}  // namespace ckpt

// The descriptor limit at context creation (common/descriptor_limit.h): a soft RLIMIT_NOFILE too low for the rank's
// connections is raised to the hard one; a hard limit too low is refused naming what is needed; HardLimitHolds says
// ahead whether a layout fits. Each case runs in a
// child process, whose limits it may lower and raise without touching the test's.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

#include "common/descriptor_limit.h"

namespace ckpt {
namespace {

// Runs `check` in a child whose soft and hard RLIMIT_NOFILE are set first; true when it returned true.
bool InChildWithLimits(rlim_t soft, rlim_t hard, const std::function<bool()>& check) {
  const pid_t pid = fork();
  if (pid == 0) {
    const struct rlimit limit = {soft, hard};
    _exit(setrlimit(RLIMIT_NOFILE, &limit) == 0 && check() ? 0 : 1);
  }
  int status = 0;
  return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

rlim_t SoftLimit() {
  struct rlimit limit;
  getrlimit(RLIMIT_NOFILE, &limit);
  return limit.rlim_cur;
}

bool Mentions(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

TEST(DescriptorLimitTest, ASoftLimitBelowWhatRankZeroNeedsIsRaisedToTheHardOne) {
  EXPECT_TRUE(InChildWithLimits(64, 4096, [] {
    return EnsureDescriptors(0, 48, {96, 47}).ok() && SoftLimit() == 4096;
  }));
}

TEST(DescriptorLimitTest, ASoftLimitThatSufficesIsLeftAlone) {
  EXPECT_TRUE(InChildWithLimits(2048, 4096, [] {
    return EnsureDescriptors(0, 48, {96, 47}).ok() && SoftLimit() == 2048;
  }));
}

TEST(DescriptorLimitTest, AHardLimitBelowTheConnectionsIsRefusedNamingWhatIsNeeded) {
  EXPECT_TRUE(InChildWithLimits(64, 64, [] {
    const Status status = EnsureDescriptors(0, 48, {96, 47});
    return status.code() == Code::kUnsupported &&
           Mentions(status, "rank 0 of 48 needs at least 206 file descriptors") &&
           Mentions(status, "hard limit RLIMIT_NOFILE is 64") && SoftLimit() == 64;
  }));
}

TEST(DescriptorLimitTest, OtherRanksNeedTwoPerPeerAndASmallJobFitsUnderASmallLimit) {
  EXPECT_TRUE(InChildWithLimits(64, 64, [] {
    const Status status = EnsureDescriptors(5, 100, {0, 99});
    return status.code() == Code::kUnsupported && Mentions(status, "needs at least 214");
  }));
  EXPECT_TRUE(InChildWithLimits(64, 64, [] {
    return EnsureDescriptors(0, 1, {}).ok() && EnsureDescriptors(3, 20, {0, 19}).ok();
  }));
}

TEST(DescriptorLimitTest, RaisingWithoutAKnownNeedGoesToTheHardLimitAndHardLimitHoldsComparesWithIt) {
  EXPECT_TRUE(InChildWithLimits(64, 4096, [] {
    RaiseDescriptorLimit();
    return SoftLimit() == 4096 && HardLimitHolds({96, 47}) && !HardLimitHolds({8000, 0});
  }));
  // Rank 0 of 48 linked directly needs 206; in a grid of 7 x 7 with relays for rows of 5, 2 + 10 store connections
  // and 12 peers: 52.
  EXPECT_TRUE(InChildWithLimits(64, 64, [] { return !HardLimitHolds({96, 47}) && HardLimitHolds({12, 12}); }));
}

}  // namespace
}  // namespace ckpt

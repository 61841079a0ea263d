// UsableCores (common/usable_cores.h) counts the cores the calling thread may run on, not those the machine has.
#include <gtest/gtest.h>
#include <sched.h>

#include <thread>

#include "common/usable_cores.h"

namespace ckpt {
namespace {

TEST(UsableCores, CountsTheCpusOfTheThreadsAffinity) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(UsableCores(), static_cast<unsigned>(CPU_COUNT(&set)));
}

TEST(UsableCores, FollowsAnAffinityNarrowedToOneCpu) {
  unsigned seen = 0;
  int narrowed = -1;
  // On a thread of its own, so that the test's own affinity stays as it was.
  std::thread([&] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return;
    int first = 0;
    while (!CPU_ISSET(first, &set)) ++first;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    narrowed = sched_setaffinity(0, sizeof(one), &one);
    seen = UsableCores();
  }).join();
  ASSERT_EQ(narrowed, 0);
  EXPECT_EQ(seen, 1u);
}

}  // namespace
}  // namespace ckpt

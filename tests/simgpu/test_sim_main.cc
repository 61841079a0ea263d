// The simulator's test binary. Started with SIMGPU_SELF_TEST_NCCL_RANK set, it is one rank of a multi-process NCCL
// test instead (a fresh process: a child forked after CUDA was used could not use it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "tests/simgpu/test_sim_support.h"

int main(int argc, char** argv) {
  if (std::getenv(simgpu::kRankRoleVar) != nullptr) return simgpu::RunNcclRankRole();
  // Set before the simulator first reads it, for the test that counts traced copies; children inherit it.
  std::string owned_trace;
  if (std::getenv("CKPT_SIMGPU_TRACE") == nullptr) {
    char trace[] = "/tmp/simgpu-trace-XXXXXX";
    const int fd = mkstemp(trace);
    if (fd >= 0) {
      close(fd);
      owned_trace = trace;
      setenv("CKPT_SIMGPU_TRACE", trace, 1);
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  // Stream threads exist by the time a death test runs: its child re-executes the binary rather than forking.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int result = RUN_ALL_TESTS();
  if (!owned_trace.empty()) unlink(owned_trace.c_str());
  return result;
}

// The simulated NCCL: point-to-point groups within one process (several communicators, as one process drives
// several GPUs) and across processes, and how failures surface: argument errors at the call, a size mismatch or a
// dead peer as the communicator's asynchronous error and a failed stream, an abort that stops a waiting group.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/simgpu/sim_cuda_api.h"
#include "tests/simgpu/sim_nccl_api.h"
#include "tests/simgpu/test_sim_support.h"

extern char** environ;

namespace simgpu {
namespace {

using Clock = std::chrono::steady_clock;

// A communicator of rank `rank` on device `rank`, as NCCL wants one device per rank.
void* InitRank(const NcclUniqueId& id, int rank, int nranks, bool blocking = true) {
  OnDevice on_device(rank);
  NcclConfig config{sizeof(NcclConfig), kNcclConfigMagic, 21400, blocking ? 1 : 0};
  void* comm = nullptr;
  const int result = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  EXPECT_EQ(result, blocking ? kNcclSuccess : kNcclInProgress) << ncclGetLastError(comm);
  return comm;
}

NcclUniqueId NewId() {
  NcclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), kNcclSuccess);
  return id;
}

// Polls the communicator until it leaves ncclInProgress; its state then, or ncclInProgress after `patience`.
int SettledState(void* comm, std::chrono::milliseconds patience = std::chrono::seconds(5)) {
  const auto deadline = Clock::now() + patience;
  int state = kNcclInProgress;
  while (ncclCommGetAsyncError(comm, &state) == kNcclSuccess && state == kNcclInProgress && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return state;
}

TEST(SimNcclTest, UniqueIdsDiffer) {
  NcclUniqueId first = NewId();
  NcclUniqueId second = NewId();
  EXPECT_NE(std::memcmp(first.internal, second.internal, sizeof(first.internal)), 0);
}

TEST(SimNcclTest, InitWithRankOutsideTheCommunicatorIsInvalidArgument) {
  void* comm = nullptr;
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 2, NewId(), 2, nullptr), kNcclInvalidArgument);
  NcclUniqueId foreign{};
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 2, foreign, 0, nullptr), kNcclInvalidArgument);
  EXPECT_EQ(comm, nullptr);
}

TEST(SimNcclTest, NonBlockingInitIsInProgressThenReady) {
  void* comm = InitRank(NewId(), 0, 1, /*blocking=*/false);
  EXPECT_EQ(SettledState(comm), kNcclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), kNcclSuccess);
}

TEST(SimNcclTest, SingleRankReceivesItsOwnSendsInIssueOrder) {
  void* comm = InitRank(NewId(), 0, 1);
  DeviceBuffer first(1000), second(3000), into_first(1000), into_second(3000);
  first.Write(std::string(1000, 'x'));
  second.Write(std::string(3000, 'y'));
  Stream stream;
  ASSERT_EQ(ncclGroupStart(), kNcclSuccess);
  ASSERT_EQ(ncclSend(first.get(), 1000, kNcclChar, 0, comm, stream.get()), kNcclSuccess);
  ASSERT_EQ(ncclSend(second.get(), 3000, kNcclChar, 0, comm, stream.get()), kNcclSuccess);
  ASSERT_EQ(ncclRecv(into_first.get(), 1000, kNcclChar, 0, comm, stream.get()), kNcclSuccess);
  ASSERT_EQ(ncclRecv(into_second.get(), 3000, kNcclChar, 0, comm, stream.get()), kNcclSuccess);
  ASSERT_EQ(ncclGroupEnd(), kNcclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream.get()), kCudaSuccess);
  EXPECT_EQ(into_first.Read(), std::string(1000, 'x'));
  EXPECT_EQ(into_second.Read(), std::string(3000, 'y'));
  EXPECT_EQ(ncclCommDestroy(comm), kNcclSuccess);
}

TEST(SimNcclTest, TwoRanksSendEachOtherLargeMessagesInOneGroup) {
  const NcclUniqueId id = NewId();
  void* comms[2] = {InitRank(id, 0, 2), InitRank(id, 1, 2)};
  const size_t size = 8 << 20;
  DeviceBuffer out0(size, 0), in0(size, 0), out1(size, 1), in1(size, 1);
  out0.Write(std::string(size, '0'));
  out1.Write(std::string(size, '1'));
  Stream stream0(0), stream1(1);
  ASSERT_EQ(ncclGroupStart(), kNcclSuccess);
  ASSERT_EQ(ncclSend(out0.get(), size, kNcclChar, 1, comms[0], stream0.get()), kNcclSuccess);
  ASSERT_EQ(ncclRecv(in0.get(), size, kNcclChar, 1, comms[0], stream0.get()), kNcclSuccess);
  ASSERT_EQ(ncclSend(out1.get(), size, kNcclChar, 0, comms[1], stream1.get()), kNcclSuccess);
  ASSERT_EQ(ncclRecv(in1.get(), size, kNcclChar, 0, comms[1], stream1.get()), kNcclSuccess);
  ASSERT_EQ(ncclGroupEnd(), kNcclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream0.get()), kCudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream1.get()), kCudaSuccess);
  EXPECT_EQ(in0.Read(), std::string(size, '1'));
  EXPECT_EQ(in1.Read(), std::string(size, '0'));
  for (void* comm : comms) EXPECT_EQ(ncclCommDestroy(comm), kNcclSuccess);
}

TEST(SimNcclTest, NonBlockingGroupEndIsInProgressUntilQueued) {
  void* comm = InitRank(NewId(), 0, 1, /*blocking=*/false);
  ASSERT_EQ(SettledState(comm), kNcclSuccess);
  DeviceBuffer out(64), in(64);
  out.Write(std::string(64, 'n'));
  Stream stream;
  ASSERT_EQ(ncclGroupStart(), kNcclSuccess);
  ASSERT_EQ(ncclSend(out.get(), 64, kNcclChar, 0, comm, stream.get()), kNcclSuccess);
  ASSERT_EQ(ncclRecv(in.get(), 64, kNcclChar, 0, comm, stream.get()), kNcclSuccess);
  EXPECT_EQ(ncclGroupEnd(), kNcclInProgress);
  ASSERT_EQ(SettledState(comm), kNcclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream.get()), kCudaSuccess);
  EXPECT_EQ(in.Read(), std::string(64, 'n'));
  EXPECT_EQ(ncclCommFinalize(comm), kNcclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), kNcclSuccess);
}

TEST(SimNcclTest, ReceiveOfAnotherSizeThanTheMessageFailsTheReceiver) {
  const NcclUniqueId id = NewId();
  void* comms[2] = {InitRank(id, 0, 2), InitRank(id, 1, 2)};
  DeviceBuffer out(100, 0), in(200, 1);
  Stream stream0(0), stream1(1);
  ASSERT_EQ(ncclGroupStart(), kNcclSuccess);
  ASSERT_EQ(ncclSend(out.get(), 100, kNcclChar, 1, comms[0], stream0.get()), kNcclSuccess);
  ASSERT_EQ(ncclRecv(in.get(), 200, kNcclChar, 0, comms[1], stream1.get()), kNcclSuccess);
  ASSERT_EQ(ncclGroupEnd(), kNcclSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream1.get()), kCudaErrorLaunchFailure);
  int state = kNcclSuccess;
  ASSERT_EQ(ncclCommGetAsyncError(comms[1], &state), kNcclSuccess);
  EXPECT_EQ(state, kNcclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(comms[1])).find("which sent 100 bytes"), std::string::npos)
      << ncclGetLastError(comms[1]);
  EXPECT_EQ(cudaStreamSynchronize(stream0.get()), kCudaSuccess);
  for (void* comm : comms) EXPECT_EQ(ncclCommAbort(comm), kNcclSuccess);
  cudaGetLastError();
}

TEST(SimNcclTest, AbortStopsAGroupWaitingForItsPeerPromptly) {
  const NcclUniqueId id = NewId();
  void* comms[2] = {InitRank(id, 0, 2), InitRank(id, 1, 2)};
  DeviceBuffer in(4096);
  Stream stream;
  ASSERT_EQ(ncclRecv(in.get(), 4096, kNcclChar, 1, comms[0], stream.get()), kNcclSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(cudaStreamQuery(stream.get()), kCudaErrorNotReady);
  const auto start = Clock::now();
  EXPECT_EQ(ncclCommAbort(comms[0]), kNcclSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream.get()), kCudaSuccess);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(ncclCommDestroy(comms[1]), kNcclSuccess);
  cudaGetLastError();
}

TEST(SimNcclTest, TwoRanksOnOneDeviceAreRefusedAsDuplicateGpu) {
  const NcclUniqueId id = NewId();
  void* first = nullptr;
  void* second = nullptr;
  ASSERT_EQ(ncclCommInitRankConfig(&first, 2, id, 0, nullptr), kNcclSuccess);
  EXPECT_EQ(ncclCommInitRankConfig(&second, 2, id, 1, nullptr), kNcclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(second)).find("Duplicate GPU detected"), std::string::npos)
      << ncclGetLastError(second);
  EXPECT_EQ(ncclCommAbort(second), kNcclSuccess);
  EXPECT_EQ(ncclCommDestroy(first), kNcclSuccess);
}

TEST(SimNcclTest, StreamOfAnotherDeviceIsInvalidArgument) {
  void* comm = InitRank(NewId(), 0, 1);
  DeviceBuffer buffer(64, 0);
  Stream elsewhere(1);
  EXPECT_EQ(ncclSend(buffer.get(), 64, kNcclChar, 0, comm, elsewhere.get()), kNcclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("stream is on device 1"), std::string::npos);
  EXPECT_EQ(ncclCommDestroy(comm), kNcclSuccess);
}

TEST(SimNcclTest, HostBufferIsInvalidArgument) {
  void* comm = InitRank(NewId(), 0, 1);
  std::vector<char> host(64);
  Stream stream;
  EXPECT_EQ(ncclSend(host.data(), 64, kNcclChar, 0, comm, stream.get()), kNcclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("not device memory"), std::string::npos);
  EXPECT_EQ(ncclCommDestroy(comm), kNcclSuccess);
}

TEST(SimNcclTest, DatatypeOtherThanCharIsInvalidArgument) {
  void* comm = InitRank(NewId(), 0, 1);
  DeviceBuffer buffer(64);
  Stream stream;
  EXPECT_EQ(ncclSend(buffer.get(), 16, /*ncclFloat32=*/7, 0, comm, stream.get()), kNcclInvalidArgument);
  EXPECT_EQ(ncclCommDestroy(comm), kNcclSuccess);
}

TEST(SimNcclTest, FailedCallInsideAGroupFailsItsEnd) {
  void* comm = InitRank(NewId(), 0, 1);
  DeviceBuffer buffer(64);
  Stream stream;
  ASSERT_EQ(ncclGroupStart(), kNcclSuccess);
  EXPECT_EQ(ncclSend(buffer.get(), 64, kNcclChar, 5, comm, stream.get()), kNcclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), kNcclInvalidArgument);
  EXPECT_EQ(ncclCommDestroy(comm), kNcclSuccess);
}

TEST(SimNcclTest, GroupEndWithoutStartIsInvalidUsage) { EXPECT_EQ(ncclGroupEnd(), kNcclInvalidUsage); }

TEST(SimNcclTest, DestroyedCommunicatorIsInvalidArgument) {
  void* comm = InitRank(NewId(), 0, 1);
  ASSERT_EQ(ncclCommDestroy(comm), kNcclSuccess);
  DeviceBuffer buffer(64);
  Stream stream;
  EXPECT_EQ(ncclSend(buffer.get(), 64, kNcclChar, 0, comm, stream.get()), kNcclInvalidArgument);
  int state = 0;
  EXPECT_EQ(ncclCommGetAsyncError(comm, &state), kNcclInvalidArgument);
}

TEST(SimNcclTest, ErrorStringsAreNcclsOwn) {
  EXPECT_STREQ(ncclGetErrorString(kNcclRemoteError), "remote process exited or there was a network error");
  EXPECT_STREQ(ncclGetErrorString(kNcclInProgress), "NCCL operation in progress");
}

std::string Hex(const void* data, size_t size) {
  std::string text;
  char digits[3];
  for (size_t i = 0; i < size; ++i) {
    std::snprintf(digits, sizeof(digits), "%02x", static_cast<const unsigned char*>(data)[i]);
    text += digits;
  }
  return text;
}

// Starts `nranks` copies of this binary as the ranks of `scenario`; returns their exit codes (-signal if killed),
// killing any still running after `patience`.
std::vector<int> RunRanks(const std::string& scenario, int nranks, std::chrono::seconds patience) {
  NcclUniqueId id = NewId();
  std::vector<pid_t> children;
  for (int rank = 0; rank < nranks; ++rank) {
    std::vector<std::string> settings;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      if (std::strncmp(*entry, "CKPT_SIMGPU_DEVICES=", 20) != 0) settings.push_back(*entry);
    }
    settings.push_back("CKPT_SIMGPU_DEVICES=" + std::to_string(nranks));
    settings.push_back(std::string(kRankRoleVar) + "=" + std::to_string(rank));
    settings.push_back(std::string(kRanksVar) + "=" + std::to_string(nranks));
    settings.push_back(std::string(kIdVar) + "=" + Hex(&id, sizeof(id)));
    settings.push_back(std::string(kScenarioVar) + "=" + scenario);
    std::vector<char*> env;
    for (std::string& setting : settings) env.push_back(setting.data());
    env.push_back(nullptr);
    char program[] = "/proc/self/exe";
    char* argv[] = {program, nullptr};
    pid_t child = -1;
    EXPECT_EQ(posix_spawn(&child, program, nullptr, nullptr, argv, env.data()), 0);
    children.push_back(child);
  }
  std::vector<int> codes;
  const auto deadline = Clock::now() + patience;
  for (pid_t child : children) {
    int status = 0;
    while (child > 0 && waitpid(child, &status, WNOHANG) == 0) {
      if (Clock::now() >= deadline) kill(child, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
  }
  return codes;
}

TEST(SimNcclMultiProcessTest, ThreeRanksSendEveryOtherMessagesOfDifferentSizesInOneGroup) {
  EXPECT_EQ(RunRanks("all-to-all", 3, std::chrono::seconds(60)), (std::vector<int>{0, 0, 0}));
}

TEST(SimNcclMultiProcessTest, PeerDyingMidExchangeIsARemoteErrorOnTheOthers) {
  // The last rank exits in the second exchange; the survivors exit 0 only if they saw ncclRemoteError promptly.
  EXPECT_EQ(RunRanks("victim", 3, std::chrono::seconds(60)), (std::vector<int>{0, 0, 0}));
}

}  // namespace
}  // namespace simgpu

// One rank of the simulator's multi-process NCCL tests (test_sim_nccl.cc starts them), in a process of its own.
// Scenarios: "all-to-all": every rank sends every other a message of its own size, in one group, and checks what
// it received. "victim": the same, then in a second exchange the last rank posts its sends, never receives, and
// exits while the others are still sending to it; they must see ncclRemoteError promptly.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/simgpu/sim_cuda_api.h"
#include "tests/simgpu/sim_nccl_api.h"
#include "tests/simgpu/test_sim_support.h"

namespace simgpu {
namespace {

int Failed(int rank, const std::string& why) {
  std::fprintf(stderr, "simgpu nccl rank %d: %s\n", rank, why.c_str());
  return 1;
}

bool ParseId(const char* hex, NcclUniqueId* id) {
  if (hex == nullptr || std::strlen(hex) != 2 * sizeof(id->internal)) return false;
  for (size_t i = 0; i < sizeof(id->internal); ++i) {
    unsigned value = 0;
    if (std::sscanf(hex + 2 * i, "%2x", &value) != 1) return false;
    id->internal[i] = static_cast<char>(value);
  }
  return true;
}

// One exchange with every other rank in one group. Returns the stream's result, or -1 when a received message
// differs from what its sender sent.
int ExchangeWithAll(void* comm, void* stream, int rank, int nranks, bool receive) {
  std::vector<void*> buffers;
  std::vector<std::pair<int, void*>> received;
  ncclGroupStart();
  for (int peer = 0; peer < nranks; ++peer) {
    if (peer == rank) continue;
    const std::string out = ExchangeMessage(rank, peer);
    void* send_buffer = nullptr;
    cudaMalloc(&send_buffer, out.size());
    cudaMemcpy(send_buffer, out.data(), out.size(), kCudaMemcpyHostToDevice);
    ncclSend(send_buffer, out.size(), kNcclChar, peer, comm, stream);
    buffers.push_back(send_buffer);
    if (!receive) continue;
    void* receive_buffer = nullptr;
    cudaMalloc(&receive_buffer, ExchangeMessage(peer, rank).size());
    ncclRecv(receive_buffer, ExchangeMessage(peer, rank).size(), kNcclChar, peer, comm, stream);
    buffers.push_back(receive_buffer);
    received.emplace_back(peer, receive_buffer);
  }
  int result = ncclGroupEnd() == kNcclSuccess ? cudaStreamSynchronize(stream) : kCudaErrorLaunchFailure;
  for (const auto& [peer, buffer] : received) {
    if (result != kCudaSuccess) break;
    const std::string expected = ExchangeMessage(peer, rank);
    std::string got(expected.size(), '\0');
    cudaMemcpy(got.data(), buffer, got.size(), kCudaMemcpyDeviceToHost);
    if (got != expected) result = -1;
  }
  for (void* buffer : buffers) cudaFree(buffer);
  return result;
}

}  // namespace

int RunNcclRankRole() {
  const int rank = std::atoi(std::getenv(kRankRoleVar));
  const char* ranks = std::getenv(kRanksVar);
  const char* scenario = std::getenv(kScenarioVar);
  NcclUniqueId id;
  if (ranks == nullptr || scenario == nullptr || !ParseId(std::getenv(kIdVar), &id)) {
    return Failed(rank, "incomplete environment");
  }
  const int nranks = std::atoi(ranks);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != kCudaSuccess || cudaSetDevice(rank % devices) != kCudaSuccess) {
    return Failed(rank, "no simulated device");
  }
  void* comm = nullptr;
  void* stream = nullptr;
  if (ncclCommInitRankConfig(&comm, nranks, id, rank, nullptr) != kNcclSuccess ||
      cudaStreamCreateWithFlags(&stream, kCudaStreamNonBlocking) != kCudaSuccess) {
    return Failed(rank, std::string("setup: ") + ncclGetLastError(comm));
  }
  const int first = ExchangeWithAll(comm, stream, rank, nranks, /*receive=*/true);
  if (first != kCudaSuccess) return Failed(rank, "first exchange: " + std::to_string(first) + ncclGetLastError(comm));
  if (std::string(scenario) == "all-to-all") return ncclCommDestroy(comm) == kNcclSuccess ? 0 : 1;

  if (rank == nranks - 1) {
    ncclGroupStart();
    for (int peer = 0; peer < rank; ++peer) {
      const std::string out = ExchangeMessage(rank, peer);
      void* buffer = nullptr;
      cudaMalloc(&buffer, out.size());
      ncclSend(buffer, out.size(), kNcclChar, peer, comm, stream);
    }
    ncclGroupEnd();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    _exit(0);
  }
  const auto start = std::chrono::steady_clock::now();
  const int second = ExchangeWithAll(comm, stream, rank, nranks, /*receive=*/true);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  int state = kNcclSuccess;
  ncclCommGetAsyncError(comm, &state);
  const std::string last = ncclGetLastError(comm);
  ncclCommAbort(comm);
  if (second != kCudaErrorLaunchFailure) return Failed(rank, "the stream reported " + std::to_string(second));
  if (state != kNcclRemoteError) return Failed(rank, "async error " + std::to_string(state) + ": " + last);
  if (elapsed > std::chrono::seconds(10)) return Failed(rank, "the failure took too long to surface");
  std::fprintf(stderr, "simgpu nccl rank %d saw the victim die: %s\n", rank, last.c_str());
  return 0;
}

}  // namespace simgpu

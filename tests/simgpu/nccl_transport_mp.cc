// ckpt's NCCL transport (collectives/transport/nccl_transport.h) across real rank processes, over the simulated NCCL
// and CUDA runtime, with the control plane of a ckpt context. Started by ckpt-launch
// (tests/simgpu/nccl_transport_mp.sh):
//   exchange             every rank sends every rank (itself included) two device buffers of sizes and tags of
//                        their own, posted out of tag order, for two rounds; each checks every byte it received
//   peer-exits           the last rank exits after the transport is set up; the others' exchange must fail with
//                        kPeerFailed (the control plane's peer check) within seconds
//   peer-exits-no-check  the same without the peer check: NCCL alone, so kPeerFailed or kTimeout at the deadline
// Every rank prints "OK" and exits 0 when its part holds, else names what failed and exits 1.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "collectives/transport/nccl_transport.h"
#include "gpu/cuda_runtime.h"
#include "runtime/core/context.h"

namespace {

using ckpt::Code;
using ckpt::Status;
using std::chrono::milliseconds;

constexpr int kTransfersPerPair = 2;

[[noreturn]] void Die(int rank, const std::string& why) {
  std::fprintf(stderr, "nccl_transport_mp rank %d FAILED: %s\n", rank, why.c_str());
  std::exit(1);
}

uint64_t SizeOf(int from, int to, int index) {
  return 1000 + 70001 * static_cast<uint64_t>(from) + 3001 * static_cast<uint64_t>(to) +
         (static_cast<uint64_t>(index) << 16);
}
uint64_t TagOf(int from, int to, int index) { return 100 * static_cast<uint64_t>(from) + 10 * to + index; }

std::string Contents(int from, int to, int index) {
  std::string bytes(SizeOf(from, to, index), '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 13 + from * 7 + to * 3 + index);
  return bytes;
}

// One rank's device buffers for an exchange with every rank, freed when it goes away.
class Plan {
 public:
  Plan(const ckpt::gpu::CudaRuntime& cuda, int device, int rank, int world) : cuda_(cuda), rank_(rank) {
    // Posted in descending tag order: the transport must match by tag, not by position.
    for (int peer = world - 1; peer >= 0; --peer) {
      for (int index = kTransfersPerPair - 1; index >= 0; --index) {
        const std::string out = Contents(rank, peer, index);
        void* send = Allocate(device, out.size());
        if (!cuda.Copy(send, out.data(), out.size()).ok()) Die(rank, "filling a send buffer");
        sends.push_back({peer, send, out.size(), TagOf(rank, peer, index)});
        recvs.push_back(
            {peer, Allocate(device, SizeOf(peer, rank, index)), SizeOf(peer, rank, index), TagOf(peer, rank, index)});
      }
    }
  }
  ~Plan() {
    for (void* buffer : owned_) (void)cuda_.Free(buffer);
  }

  void CheckReceived() const {
    for (const ckpt::coll::TransferRecv& recv : recvs) {
      const int index = static_cast<int>(recv.tag % 10);
      std::string got(recv.size, '\0');
      if (!cuda_.Copy(got.data(), recv.data, recv.size).ok()) Die(rank_, "reading a receive buffer");
      if (got != Contents(recv.peer, rank_, index)) {
        Die(rank_, "wrong bytes from rank " + std::to_string(recv.peer) + " tag " + std::to_string(recv.tag));
      }
    }
  }

  std::vector<ckpt::coll::TransferSend> sends;
  std::vector<ckpt::coll::TransferRecv> recvs;

 private:
  void* Allocate(int device, uint64_t size) {
    ckpt::Result<void*> buffer = cuda_.Malloc(device, size);
    if (!buffer.ok()) Die(rank_, buffer.status().message());
    owned_.push_back(*buffer);
    return *buffer;
  }

  const ckpt::gpu::CudaRuntime& cuda_;
  int rank_;
  std::vector<void*> owned_;
};

int RunExchange(ckpt::coll::Transport& transport, const ckpt::gpu::CudaRuntime& cuda, int device, int rank, int world) {
  for (int round = 0; round < 2; ++round) {
    Plan plan(cuda, device, rank, world);
    const Status status = transport.Exchange(plan.sends, plan.recvs, milliseconds(30000));
    if (!status.ok()) Die(rank, "round " + std::to_string(round) + ": " + status.message());
    plan.CheckReceived();
  }
  std::printf("rank %d: OK, %d ranks exchanged device buffers of distinct sizes and tags\n", rank, world);
  return 0;
}

int RunPeerExits(ckpt::coll::Transport& transport, const ckpt::gpu::CudaRuntime& cuda, int device, int rank, int world,
                 milliseconds timeout) {
  Plan plan(cuda, device, rank, world);
  if (rank == world - 1) {
    std::printf("rank %d: exiting before the exchange\n", rank);
    std::fflush(stdout);
    _exit(0);
  }
  const auto start = std::chrono::steady_clock::now();
  const Status status = transport.Exchange(plan.sends, plan.recvs, timeout);
  const auto took = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
  if (status.ok()) Die(rank, "the exchange succeeded without rank " + std::to_string(world - 1));
  if (status.code() != Code::kPeerFailed && status.code() != Code::kTimeout) {
    Die(rank, "unexpected failure: " + status.message());
  }
  if (took > timeout + milliseconds(5000)) Die(rank, "the failure took " + std::to_string(took.count()) + " ms");
  const Status again = transport.Exchange(plan.sends, plan.recvs, timeout);
  if (again.code() != Code::kPeerFailed) Die(rank, "a failed transport was usable again: " + again.message());
  std::printf("rank %d: OK, failed in %lld ms: %s\n", rank, static_cast<long long>(took.count()),
              status.message().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode != "exchange" && mode != "peer-exits" && mode != "peer-exits-no-check") {
    std::fprintf(stderr, "usage: %s exchange|peer-exits|peer-exits-no-check\n", argv[0]);
    return 2;
  }
  ckpt::runtime::ContextConfig config;
  config.io_workers = 0;
  config.transport = ckpt::runtime::TransportKind::kNone;
  config.timeout = milliseconds(60000);
  ckpt::Result<std::unique_ptr<ckpt::runtime::Context>> context = ckpt::runtime::Context::Create(config);
  if (!context.ok()) Die(-1, context.status().message());
  ckpt::runtime::Context& ctx = **context;
  const int rank = ctx.rank();
  ckpt::Result<ckpt::gpu::CudaRuntime*> cuda = ckpt::gpu::CudaRuntime::Get();
  if (!cuda.ok()) Die(rank, "no CUDA runtime (is the simulator on LD_LIBRARY_PATH?): " + cuda.status().message());
  const int device = rank % (*cuda)->DeviceCount().value();
  // Without the peer check, only NCCL can notice the dead rank: a short timeout keeps the test quick.
  const milliseconds timeout(mode == "peer-exits-no-check" ? 3000 : 20000);
  auto transport = ckpt::coll::MakeNcclTransport(ctx.control(), device, timeout);
  if (!transport.ok()) Die(rank, transport.status().message());
  if (mode != "peer-exits-no-check") (*transport)->SetPeerCheck([&ctx] { return ctx.control().CheckPeers(); });
  if (mode == "exchange") return RunExchange(**transport, **cuda, device, rank, ctx.world_size());
  return RunPeerExits(**transport, **cuda, device, rank, ctx.world_size(), timeout);
}

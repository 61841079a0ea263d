#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/control/solo_control_plane.h"
#include "collectives/transport/nccl_transport.h"
#include "gpu/cuda_runtime.h"

namespace ckpt::coll {
namespace {

using nccl_protocol::TransferShape;
using std::chrono::milliseconds;

constexpr milliseconds kTimeout(30000);

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(NcclProtocolTest, IssueOrderSortsByPeerThenTagAndKeepsPostingOrderOfEqualKeys) {
  const std::vector<TransferSend> sends = {
      {2, nullptr, 0, 5}, {1, nullptr, 0, 9}, {2, nullptr, 0, 1}, {1, nullptr, 0, 9}, {1, nullptr, 0, 3}};
  EXPECT_EQ(nccl_protocol::IssueOrder(sends), (std::vector<size_t>{4, 1, 3, 2, 0}));
}

TEST(NcclProtocolTest, IssueOrderIsTheSameForReceives) {
  const std::vector<TransferRecv> recvs = {{0, nullptr, 0, 7}, {0, nullptr, 0, 2}, {3, nullptr, 0, 0}};
  EXPECT_EQ(nccl_protocol::IssueOrder(recvs), (std::vector<size_t>{1, 0, 2}));
}

TEST(NcclProtocolTest, MatchingDeclarationsAgree) {
  const std::vector<TransferShape> out = {{1, 100}, {2, 200}};
  const std::vector<TransferShape> in = {{4, 8}};
  EXPECT_TRUE(nccl_protocol::CheckPairAgrees(3, out, out, in, in).ok());
}

TEST(NcclProtocolTest, SizeMismatchNamesPeerAndTag) {
  Status status = nccl_protocol::CheckPairAgrees(3, {{1, 100}, {2, 200}}, {{1, 100}, {2, 256}}, {}, {});
  ASSERT_EQ(status.code(), Code::kMismatch);
  EXPECT_EQ(status.message(),
            "NCCL exchange with peer 3: this rank sends tag 2 of 200 bytes where the peer receives tag 2 of 256 bytes");
}

TEST(NcclProtocolTest, MissingCounterpartNamesTheUnmatchedTag) {
  Status status = nccl_protocol::CheckPairAgrees(5, {}, {}, {{7, 64}, {8, 64}}, {{7, 64}});
  ASSERT_EQ(status.code(), Code::kMismatch);
  EXPECT_TRUE(Contains(status.message(), "peer 5: this rank receives 2 transfers where the peer sends 1; tag 8"))
      << status.message();
}

TEST(NcclTransportTest, UnavailableWithoutCudaDeviceIsUnsupportedWithTheReason) {
  Result<gpu::CudaRuntime*> cuda = gpu::CudaRuntime::Get();
  if (cuda.ok()) GTEST_SKIP() << "needs a machine without a usable CUDA device";
  std::unique_ptr<ControlPlane> control = MakeSoloControlPlane();
  Result<std::unique_ptr<Transport>> transport = MakeNcclTransport(*control, 0, kTimeout);
  ASSERT_FALSE(transport.ok());
  EXPECT_EQ(transport.status().code(), Code::kUnsupported);
  const std::string& message = transport.status().message();
  EXPECT_TRUE(Contains(message, "NCCL transport unavailable (rank 0: ")) << message;
  EXPECT_TRUE(Contains(message, "NCCL not found") || Contains(message, cuda.status().message())) << message;
}

// World size 1: NCCL refuses two ranks on one GPU, so one rank exchanges with itself.
class NcclSelfExchangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<gpu::CudaRuntime*> cuda = gpu::CudaRuntime::Get();
    if (!cuda.ok()) GTEST_SKIP() << cuda.status().message();
    cuda_ = *cuda;
    control_ = MakeSoloControlPlane();
    Result<std::unique_ptr<Transport>> transport = MakeNcclTransport(*control_, 0, kTimeout);
    if (!transport.ok() && transport.status().code() == Code::kUnsupported) {
      GTEST_SKIP() << transport.status().message();
    }
    ASSERT_TRUE(transport.ok()) << transport.status().message();
    transport_ = std::move(transport).value();
  }
  void TearDown() override {
    transport_.reset();
    for (void* buffer : buffers_) EXPECT_TRUE(cuda_->Free(buffer).ok());
  }

  // Device memory holding `size` bytes of `fill`.
  void* DeviceBytes(uint64_t size, char fill) {
    Result<void*> buffer = cuda_->Malloc(0, size);
    EXPECT_TRUE(buffer.ok()) << buffer.status().message();
    if (!buffer.ok()) return nullptr;
    buffers_.push_back(*buffer);
    const std::string host(size, fill);
    EXPECT_TRUE(cuda_->Copy(*buffer, host.data(), size).ok());
    return *buffer;
  }
  std::string HostCopy(const void* device, uint64_t size) {
    std::string host(size, '\0');
    EXPECT_TRUE(cuda_->Copy(host.data(), device, size).ok());
    return host;
  }

  gpu::CudaRuntime* cuda_ = nullptr;
  std::unique_ptr<ControlPlane> control_;
  std::unique_ptr<Transport> transport_;
  std::vector<void*> buffers_;
};

TEST_F(NcclSelfExchangeTest, ReceivesMatchSendsByTagWhateverThePostingOrder) {
  const uint64_t size = 1 << 20;
  void* first = DeviceBytes(size, 'a');
  void* second = DeviceBytes(size, 'b');
  void* into_second = DeviceBytes(size, 0);
  void* into_first = DeviceBytes(size, 0);
  ASSERT_TRUE(first && second && into_first && into_second);
  Status status = transport_->Exchange({{0, second, size, 20}, {0, first, size, 10}},
                                       {{0, into_first, size, 10}, {0, into_second, size, 20}}, kTimeout);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(HostCopy(into_first, size), std::string(size, 'a'));
  EXPECT_EQ(HostCopy(into_second, size), std::string(size, 'b'));
}

TEST_F(NcclSelfExchangeTest, SizeMismatchIsRefusedWithoutMovingBytes) {
  void* source = DeviceBytes(4096, 'x');
  void* target = DeviceBytes(8192, 0);
  ASSERT_TRUE(source && target);
  Status status = transport_->Exchange({{0, source, 4096, 1}}, {{0, target, 8192, 1}}, kTimeout);
  ASSERT_EQ(status.code(), Code::kMismatch) << status.message();
  EXPECT_TRUE(Contains(status.message(), "peer 0")) << status.message();
  EXPECT_EQ(HostCopy(target, 8192), std::string(8192, '\0'));
}

TEST_F(NcclSelfExchangeTest, HostBufferIsRefusedAsInvalidArgument) {
  std::string host(4096, 'h');
  void* target = DeviceBytes(4096, 0);
  ASSERT_NE(target, nullptr);
  Status status = transport_->Exchange({{0, host.data(), 4096, 1}}, {{0, target, 4096, 1}}, kTimeout);
  ASSERT_EQ(status.code(), Code::kInvalidArgument);
  EXPECT_TRUE(Contains(status.message(), "not CUDA device memory")) << status.message();
}

// NCCL moves contiguous device memory only: the load never gives it runs (Scatters), and runs given are refused.
TEST_F(NcclSelfExchangeTest, ScatteredTransfersAreRefusedAsInvalidArgument) {
  EXPECT_FALSE(transport_->Scatters());
  void* source = DeviceBytes(8192, 's');
  void* target = DeviceBytes(8192, 0);
  ASSERT_TRUE(source && target);
  char* into = static_cast<char*>(target);
  const std::vector<MemoryRun> runs = {{into, 4096}, {into + 4096, 4096}};
  Status status = transport_->Exchange({{0, source, 8192, 1}}, {{0, target, 8192, 1, runs}}, kTimeout);
  ASSERT_EQ(status.code(), Code::kInvalidArgument) << status.message();
  EXPECT_TRUE(Contains(status.message(), "receive 0 is scattered")) << status.message();
  status = transport_->Exchange({{0, source, 8192, 1, runs}}, {{0, target, 8192, 1}}, kTimeout);
  ASSERT_EQ(status.code(), Code::kInvalidArgument) << status.message();
  EXPECT_TRUE(Contains(status.message(), "send 0 is scattered")) << status.message();
  EXPECT_EQ(HostCopy(target, 8192), std::string(8192, '\0'));
}

TEST_F(NcclSelfExchangeTest, PeerOutOfRangeIsInvalidArgument) {
  void* buffer = DeviceBytes(64, 0);
  ASSERT_NE(buffer, nullptr);
  Status status = transport_->Exchange({{1, buffer, 64, 0}}, {}, kTimeout);
  ASSERT_EQ(status.code(), Code::kInvalidArgument);
  EXPECT_TRUE(Contains(status.message(), "out of range for world size 1")) << status.message();
}

TEST_F(NcclSelfExchangeTest, ReceiveWithoutSendIsAMismatchNamingTheTag) {
  void* buffer = DeviceBytes(64, 0);
  ASSERT_NE(buffer, nullptr);
  Status status = transport_->Exchange({}, {{0, buffer, 64, 3}}, kTimeout);
  ASSERT_EQ(status.code(), Code::kMismatch) << status.message();
  EXPECT_TRUE(Contains(status.message(), "tag 3")) << status.message();
}

TEST_F(NcclSelfExchangeTest, MismatchLeavesTheTransportUsable) {
  void* source = DeviceBytes(256, 'm');
  void* target = DeviceBytes(256, 0);
  ASSERT_TRUE(source && target);
  ASSERT_EQ(transport_->Exchange({{0, source, 128, 1}}, {{0, target, 256, 1}}, kTimeout).code(), Code::kMismatch);
  Status status = transport_->Exchange({{0, source, 256, 1}}, {{0, target, 256, 1}}, kTimeout);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(HostCopy(target, 256), std::string(256, 'm'));
}

}  // namespace
}  // namespace ckpt::coll

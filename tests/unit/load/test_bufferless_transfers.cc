// Which transfers take no round memory (runtime/load/exchange_load.h: BufferlessTransfers), as a round of the exchange
// lays them out: large ones received whole into one destination piece of the plane's memory, contiguously or, where
// the transport scatters receives, over a bounded number of long enough runs, and large ones sent from where the
// reader's own copy of the region lies; a small (packed) transfer only where its reader sends the same region to
// another consumer and shares it (host memory, a transport that scatters); never two pieces, or a piece on another
// device.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/load/exchange_load.h"
#include "tests/unit/load/load_plan_testing.h"

namespace ckpt::runtime {
namespace {

constexpr uint64_t kRows = 8, kCols = 1024;  // F32: 4 KiB a row

// Tensor "w" of kRows x kCols stored whole, read by rank 0 in one read; transfers of it go to rank 1.
struct Plan {
  Manifest manifest = WithTensors({Stored("w", {kRows, kCols}, {Box{{0, 0}, {kRows, kCols}}}, 1 << 20)});
  LoadPlan view;

  Plan() {
    view.reads.push_back(ChunkRead{0, 0, 0, 0, 1, kRows * kCols * 4});
    view.read_bytes_per_rank = {kRows * kCols * 4, 0};
    view.separate_bytes = 8 << 10;  // two rows
  }
  void Send(int consumer, const Box& region) {
    view.transfers.push_back(Transfer{0, consumer, region, region.volume() * 4});
  }
  void Keep(const Box& region) { view.local_copies.push_back(Transfer{0, 0, region, region.volume() * 4}); }
};

LocalPiece Piece(const Box& box, int device = -1) { return LocalPiece{0, box, box, nullptr, device}; }

TEST(BufferlessTransfersTest, ALargeRegionThatLandsContiguouslyInOnePieceIsReceivedInPlace) {
  Plan plan;
  plan.Send(1, Box{{0, 0}, {4, kCols}});      // four whole rows of the piece below: one run
  plan.Send(1, Box{{4, 0}, {4, kCols / 2}});  // half rows: four runs
  plan.Send(1, Box{{0, 0}, {1, kCols}});      // one row: under separate_bytes, packed with the pair's others
  const std::vector<LocalPiece> pieces{Piece(Box{{0, 0}, {kRows, kCols}})};
  EXPECT_EQ(BufferlessTransfers(plan.view, 1, plan.manifest, pieces, -1, false), (Bufferless{true, false, false}));
  // The reader's side of the same transfers: it holds no copy of them, so each is sent from a buffer.
  EXPECT_EQ(BufferlessTransfers(plan.view, 0, plan.manifest, pieces, -1, false), (Bufferless{false, false, false}));
}

// Where the plane's transport scatters transfers (UCX), a region that spans rows of a wider piece lands there in place
// too, and is sent from the reader's own copy there, when its runs are long enough (1 KiB) and not too many; a
// transport that cannot (NCCL) buffers it.
TEST(BufferlessTransfersTest, ARegionOfAWiderPieceIsReceivedOrSentScatteredWhereTheTransportCan) {
  Plan plan;
  plan.view.separate_bytes = 1 << 10;         // so that each below travels alone
  plan.Send(1, Box{{4, 0}, {4, kCols / 8}});  // eighths of rows, 512 bytes: too short
  plan.Send(1, Box{{4, 0}, {4, kCols / 4}});  // quarters, 1 KiB: long enough
  plan.Send(1, Box{{0, 0}, {4, kCols}});      // whole rows: one run
  const std::vector<LocalPiece> narrow{Piece(Box{{0, 0}, {kRows, kCols}})};
  EXPECT_EQ(BufferlessTransfers(plan.view, 1, plan.manifest, narrow, -1, true), (Bufferless{false, true, true}));
  // The same tensor twice as wide, the transfers' rows now half of the piece's: runs of 4 KiB.
  Plan wide;
  wide.manifest = WithTensors({Stored("w", {kRows, 2 * kCols}, {Box{{0, 0}, {kRows, 2 * kCols}}}, 1 << 20)});
  wide.Send(1, Box{{0, 0}, {4, kCols}});
  wide.Send(1, Box{{4, kCols}, {4, kCols}});
  const std::vector<LocalPiece> whole{Piece(Box{{0, 0}, {kRows, 2 * kCols}})};
  EXPECT_EQ(BufferlessTransfers(wide.view, 1, wide.manifest, whole, -1, true), (Bufferless{true, true}));
  EXPECT_EQ(BufferlessTransfers(wide.view, 1, wide.manifest, whole, -1, false), (Bufferless{false, false}));
  // The reader's side: where it keeps the whole piece, it sends both from there, scattered too.
  wide.Keep(Box{{0, 0}, {kRows, 2 * kCols}});
  EXPECT_EQ(BufferlessTransfers(wide.view, 0, wide.manifest, whole, -1, true), (Bufferless{true, true}));
  EXPECT_EQ(BufferlessTransfers(wide.view, 0, wide.manifest, whole, -1, false), (Bufferless{false, false}));
  // Across two pieces it is buffered, scattering or not.
  const std::vector<LocalPiece> thirds{Piece(Box{{0, 0}, {2, 2 * kCols}}), Piece(Box{{2, 0}, {4, 2 * kCols}}),
                                       Piece(Box{{6, 0}, {2, 2 * kCols}})};
  EXPECT_EQ(BufferlessTransfers(wide.view, 1, wide.manifest, thirds, -1, true), (Bufferless{false, false}));
}

TEST(BufferlessTransfersTest, ARegionAcrossTwoPiecesOrInAnotherDevicesMemoryIsBuffered) {
  Plan plan;
  plan.Send(1, Box{{0, 0}, {4, kCols}});
  const std::vector<LocalPiece> split{Piece(Box{{0, 0}, {2, kCols}}), Piece(Box{{2, 0}, {6, kCols}})};
  EXPECT_EQ(BufferlessTransfers(plan.view, 1, plan.manifest, split, -1, false), (Bufferless{false}));
  const std::vector<LocalPiece> on_device{Piece(Box{{0, 0}, {kRows, kCols}}, 0)};
  EXPECT_EQ(BufferlessTransfers(plan.view, 1, plan.manifest, on_device, -1, false), (Bufferless{false}));
  EXPECT_EQ(BufferlessTransfers(plan.view, 1, plan.manifest, on_device, 0, false), (Bufferless{true}));
}

TEST(BufferlessTransfersTest, ARegionTheReaderKeepsWholeInOneRunIsSentFromItsOwnCopy) {
  Plan plan;
  plan.Keep(Box{{0, 0}, {kRows, kCols}});
  plan.Send(1, Box{{0, 0}, {4, kCols}});
  plan.Send(1, Box{{4, 0}, {4, kCols / 2}});
  const std::vector<LocalPiece> whole{Piece(Box{{0, 0}, {kRows, kCols}})};
  EXPECT_EQ(BufferlessTransfers(plan.view, 0, plan.manifest, whole, -1, false), (Bufferless{true, false}));
  // Without the local copy the reader holds nothing to send from, whatever its pieces.
  plan.view.local_copies.clear();
  EXPECT_EQ(BufferlessTransfers(plan.view, 0, plan.manifest, whole, -1, false), (Bufferless{false, false}));
}

// Where the plane's transport scatters host memory, a reader holds a small region once whatever the consumers it goes
// to, and gathers each pair's packed message from it: only the region's first transfer costs it send buffers.
TEST(BufferlessTransfersTest, ASmallRegionSentToSeveralConsumersCostsItsReaderOnceWhereItIsShared) {
  Plan plan;
  plan.view.read_bytes_per_rank = {kRows * kCols * 4, 0, 0, 0};
  const Box row{{0, 0}, {1, kCols}}, other_row{{1, 0}, {1, kCols}};  // 4 KiB each: packed
  plan.Send(1, row);
  plan.Send(2, row);
  plan.Send(3, row);
  plan.Send(2, other_row);
  plan.Send(3, Box{{2, 0}, {4, kCols}});  // large: sent alone, from a buffer (the reader keeps none of it)
  const std::vector<LocalPiece> none;
  EXPECT_EQ(BufferlessTransfers(plan.view, 0, plan.manifest, none, -1, true),
            (Bufferless{false, true, true, false, false}));
  // Copied into each pair's packed buffer where the transport cannot gather them, or the plane moves device memory.
  EXPECT_EQ(BufferlessTransfers(plan.view, 0, plan.manifest, none, -1, false), (Bufferless(5, false)));
  EXPECT_EQ(BufferlessTransfers(plan.view, 0, plan.manifest, none, 0, true), (Bufferless(5, false)));
  // The consumers' side is unchanged: each receives its packed message into a buffer.
  const std::vector<LocalPiece> rows{Piece(Box{{0, 0}, {kRows, kCols}})};
  EXPECT_EQ(BufferlessTransfers(plan.view, 2, plan.manifest, rows, -1, true)[1], false);
}

}  // namespace
}  // namespace ckpt::runtime

// StageSave on a unit that is a column slab of the tensor a rank holds, as the save plan cuts from a replicated box
// whose leading dimensions are shorter than its number of holders: the slab's bytes come in one run per row, each
// checksummed as it is copied, and the checksums recorded must be BlockChecksums of the slab's row-major bytes,
// whether one thread or two copy the window.
// ctest-labels: threaded
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ckpt.h"
#include "io/checksum.h"
#include "io/staging_arena.h"
#include "io/worker_pool.h"
#include "runtime/save/save_stager.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::runtime {
namespace {

constexpr uint64_t kRows = 3;
constexpr uint64_t kCols = 1000000;
constexpr uint64_t kBlockBytes = 256 << 10;

class StageSaveTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    for (uint64_t i = 0; i < data_.size(); ++i) data_[i] = static_cast<float>(i % 100003) * 0.5f;
    TensorShard shard;
    shard.key = "w";
    shard.dtype = CKPT_DTYPE_F32;
    shard.global_shape = {kRows, kCols};
    shard.box = Box{{0, 0}, {kRows, kCols}};
    shard.data = data_.data();
    shard.data_size = data_.size() * sizeof(float);
    ASSERT_TRUE(state_.AddTensor(shard).ok());
  }
  // The slab's bytes, row after row.
  std::string SlabBytes(const Box& slab) const {
    std::string bytes;
    for (uint64_t row = 0; row < kRows; ++row) {
      const float* start = data_.data() + row * kCols + slab.offset[1];
      bytes.append(reinterpret_cast<const char*>(start), slab.shape[1] * sizeof(float));
    }
    return bytes;
  }

  std::vector<float> data_ = std::vector<float>(kRows * kCols);
  State state_;
};

TEST_F(StageSaveTest, AColumnSlabIsStoredRowByRowWithTheChecksumsOfItsBytes) {
  // 3.6 MB: one copy thread; 9.6 MB: two, the cut inside a row. Rows of 1.2 and 3.2 MB end inside a block.
  for (const uint64_t cols : {300000u, 800000u}) {
    SCOPED_TRACE(std::to_string(cols) + " columns");
    const Box slab{{0, 100001}, {kRows, cols}};
    const std::string expected = SlabBytes(slab);
    SavePlan plan;
    plan.items.push_back(WriteItem{false, "w", slab, {}, expected.size(), 0});
    plan.bytes_per_rank = {expected.size()};
    StagingSettings settings;
    settings.block_size = kBlockBytes;
    Result<std::unique_ptr<io::StagingArena>> arena = io::StagingArena::Create(64 << 20);
    ASSERT_TRUE(arena.ok()) << arena.status().message();
    io::WorkerPoolOptions pool_options;
    pool_options.workers = 0;
    Result<std::unique_ptr<io::WorkerPool>> pool = io::WorkerPool::Start(**arena, pool_options);
    ASSERT_TRUE(pool.ok()) << pool.status().message();
    SaveTicket ticket;
    ticket.commit.tmp_dir = Path(std::to_string(cols));

    const Status staged = StageSave(state_, plan, settings, **arena, **pool, ticket);
    ASSERT_TRUE(staged.ok()) << staged.message();
    while (!ticket.pending.empty()) AbsorbOldest(**arena, ticket);
    ASSERT_TRUE(ticket.failure.ok()) << ticket.failure.message();

    ASSERT_EQ(ticket.report.items.size(), 1u);
    const StoredBytes& stored = ticket.report.items[0].bytes;
    EXPECT_EQ(stored.block_checksums, io::BlockChecksums(expected.data(), expected.size(), kBlockBytes));
    std::ifstream file(ticket.commit.tmp_dir + "/" + ticket.report.files[stored.file_index].name, std::ios::binary);
    const std::string stored_file((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    ASSERT_GE(stored_file.size(), stored.file_offset + expected.size());
    EXPECT_TRUE(stored_file.compare(stored.file_offset, expected.size(), expected) == 0) << "other bytes stored";
  }
}

}  // namespace
}  // namespace ckpt::runtime

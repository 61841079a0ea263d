// FetchChunksInProcess (runtime/load/chunk_fetcher.h): a fetch without staging arena and I/O workers, as the export
// runs it. Whole checksum blocks that land in a page-aligned run of the destination are read straight into it; the
// rest (unaligned destinations, blocks cut by a region's edge, a chunk's ragged end) through a buffer of the reading
// thread's. Every byte arrives either way, and every block is verified where it was read. Both fetches take a
// destination aligned only as direct I/O on the file needs (statx's dio_mem_align) as aligned enough.
// ctest-labels: threaded
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "ckpt.h"
#include "io/file_io.h"
#include "io/staging_arena.h"
#include "io/worker_pool.h"
#include "runtime/format/manifest.h"
#include "runtime/load/chunk_fetcher.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::runtime {
namespace {

constexpr uint64_t kPage = 4096;
// "x": one row is one page of F64, a checksum block (1 MiB) 256 rows; the last of its 600 rows' three blocks is
// shorter. "y": 1001 F32, one block of 4004 bytes, which no direct read can end on.
constexpr uint64_t kCols = kPage / sizeof(double), kRows = 600, kRowsPerBlock = 256, kShort = 1001;

double ValueAt(uint64_t flat_index) { return 0.25 * static_cast<double>(flat_index) + 3.0; }
float ShortValueAt(uint64_t i) { return static_cast<float>(i) * 0.5f - 7.0f; }

// Page-aligned memory filled with 0xee, with a spare page after `bytes`.
class PageAligned {
 public:
  explicit PageAligned(uint64_t bytes) : size_((bytes + 2 * kPage - 1) / kPage * kPage) {
    data_ = static_cast<char*>(std::aligned_alloc(kPage, size_));
    std::memset(data_, 0xee, size_);
  }
  ~PageAligned() { std::free(data_); }
  PageAligned(const PageAligned&) = delete;
  PageAligned& operator=(const PageAligned&) = delete;
  char* data() const { return data_; }

 private:
  uint64_t size_;
  char* data_;
};

// I/O workers that fail every job, and say whether they were asked: a fetch that needs them fails.
class RefusingPool final : public io::WorkerPool {
 public:
  std::future<Result<io::WriteResult>> SubmitWrite(int, io::WriteJob job) override {
    std::promise<Result<io::WriteResult>> refused;
    refused.set_value(Internal("the I/O workers were asked to write " + job.path));
    return refused.get_future();
  }
  std::future<Status> SubmitRead(int, io::ReadJob job, io::ReadFailure*) override {
    asked_ = true;
    std::promise<Status> refused;
    refused.set_value(Internal("the I/O workers were asked to read " + job.path));
    return refused.get_future();
  }
  Status AbandonFiles(const std::string&) override { return Status::Ok(); }
  int size() const override { return 1; }
  std::vector<pid_t> pids() const override { return {}; }
  std::string backend_name() const override { return "none"; }
  bool asked() const { return asked_; }

 private:
  bool asked_ = false;
};

// Its directory is under /tmp, a disk: a tmpfs would be read without direct I/O.
class FetchInProcessTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    Save();
    Result<Manifest> manifest = ReadManifest(path());
    ASSERT_TRUE(manifest.ok()) << manifest.status().message();
    manifest_ = std::move(manifest).value();
    ASSERT_EQ(manifest_.tensors.size(), 2u);
    ASSERT_EQ(manifest_.tensors[0].key, "x");
    ASSERT_EQ(manifest_.tensors[0].chunks[0].bytes.block_size, kRowsPerBlock * kPage);
  }

  std::string path() const { return Path("ck"); }

  void Save() {
    ckpt_error_t* err = nullptr;
    ASSERT_EQ(ckpt_error_create(&err), CKPT_OK);
    ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
    opts.rank = 0;
    opts.world_size = 1;
    opts.io_workers = 0;
    opts.arena_bytes = 64ull << 20;  // the smallest: the default (an eighth of the memory) takes seconds to set up
    ckpt_context_t* ctx = nullptr;
    ASSERT_EQ(ckpt_context_create(&opts, &ctx, err), CKPT_OK) << ckpt_error_message(err);
    std::vector<double> rows(kRows * kCols);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = ValueAt(i);
    std::vector<float> short_values(kShort);
    for (size_t i = 0; i < short_values.size(); ++i) short_values[i] = ShortValueAt(i);
    const uint64_t shape[2] = {kRows, kCols}, offset[2] = {0, 0}, short_shape[1] = {kShort}, short_offset[1] = {0};
    ckpt_state_t* state = nullptr;
    ASSERT_EQ(ckpt_state_create(&state, err), CKPT_OK);
    ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
    shard.key = "x";
    shard.dtype = CKPT_DTYPE_F64;
    shard.ndim = 2;
    shard.global_shape = shape;
    shard.local_shape = shape;
    shard.global_offset = offset;
    shard.data = rows.data();
    shard.data_size = sizeof(double) * rows.size();
    ASSERT_EQ(ckpt_state_add_tensor(state, &shard, err), CKPT_OK) << ckpt_error_message(err);
    shard.key = "y";
    shard.dtype = CKPT_DTYPE_F32;
    shard.ndim = 1;
    shard.global_shape = short_shape;
    shard.local_shape = short_shape;
    shard.global_offset = short_offset;
    shard.data = short_values.data();
    shard.data_size = sizeof(float) * short_values.size();
    ASSERT_EQ(ckpt_state_add_tensor(state, &shard, err), CKPT_OK) << ckpt_error_message(err);
    ckpt_request_t* request = nullptr;
    ASSERT_EQ(ckpt_save(ctx, state, path().c_str(), nullptr, &request, err), CKPT_OK) << ckpt_error_message(err);
    ASSERT_EQ(ckpt_request_wait(request, 0, err), CKPT_OK) << ckpt_error_message(err);
    ckpt_request_free(request);
    ckpt_state_free(state);
    ckpt_context_free(ctx);
    ckpt_error_free(err);
  }

  // Rows [row0, row1) of "x" into `dst`; returns the bytes read from storage.
  Result<uint64_t> FetchRows(uint64_t row0, uint64_t row1, char* dst) {
    const Box rows{{row0, 0}, {row1 - row0, kCols}};
    return FetchChunksInProcess(tuning_, path(), manifest_,
                                {ChunkFetch{&manifest_.tensors[0], 0, {ChunkConsumer{rows, dst, rows}}}});
  }

  // The first element of rows [row0, row1) in `dst` that does not hold its saved value; -1 when all do.
  static int64_t FirstWrong(const char* dst, uint64_t row0, uint64_t row1) {
    for (uint64_t i = 0; i < (row1 - row0) * kCols; ++i) {
      double got;
      std::memcpy(&got, dst + i * sizeof(double), sizeof got);
      if (got != ValueAt(row0 * kCols + i)) return static_cast<int64_t>(i);
    }
    return -1;
  }

  // Writes one byte at `at` of tensor `t`'s chunk in its data file.
  void Flip(size_t t, uint64_t at) {
    const StoredBytes& stored = manifest_.tensors[t].chunks[0].bytes;
    std::fstream file(path() + "/" + manifest_.files[stored.file_index].name,
                      std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(file.good());
    file.seekp(static_cast<std::streamoff>(stored.file_offset + at));
    file.put('\x5a');
  }

  // What a corrupt fetch of "x" must say: the checksum, the tensor, its chunk and the file.
  void ExpectCorruptNamingX(const Result<uint64_t>& read) const {
    ASSERT_FALSE(read.ok());
    EXPECT_EQ(read.status().code(), Code::kCorrupt) << read.status().message();
    const std::string message = read.status().message();
    EXPECT_NE(message.find("checksum mismatch"), std::string::npos) << message;
    EXPECT_NE(message.find("tensor 'x' chunk [0:600, 0:512]"), std::string::npos) << message;
    EXPECT_NE(message.find(manifest_.files[manifest_.tensors[0].chunks[0].bytes.file_index].name), std::string::npos)
        << message;
  }

  Manifest manifest_;
  io::IoTuning tuning_;
};

TEST_F(FetchInProcessTest, AWholeTensorArrivesInPageAlignedMemoryAndNotOneByteMore) {
  PageAligned dst(kRows * kPage);
  Result<uint64_t> read = FetchRows(0, kRows, dst.data());
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(*read, kRows * kPage);
  EXPECT_EQ(FirstWrong(dst.data(), 0, kRows), -1);
  EXPECT_EQ(static_cast<unsigned char>(dst.data()[kRows * kPage]), 0xee) << "a byte past the tensor was written";
}

// Without an arena, what cannot go straight in goes through the reading thread's buffer: a destination 8 bytes off
// a page, and rows [100, 590), whose first and last blocks are needed only in part and are read whole, to verify them.
TEST_F(FetchInProcessTest, UnalignedDestinationsAndBlocksCutByTheRegionArriveThroughTheThreadsBuffers) {
  PageAligned memory(kRows * kPage + sizeof(double));
  char* shifted = memory.data() + sizeof(double);
  Result<uint64_t> read = FetchRows(0, kRows, shifted);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(FirstWrong(shifted, 0, kRows), -1);
  EXPECT_EQ(static_cast<unsigned char>(memory.data()[0]), 0xee) << "a byte before the destination was written";

  PageAligned part((590 - 100) * kPage);
  read = FetchRows(100, 590, part.data());
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(*read, kRows * kPage);
  EXPECT_EQ(FirstWrong(part.data(), 100, 590), -1);
  EXPECT_EQ(static_cast<unsigned char>(part.data()[(590 - 100) * kPage]), 0xee);
}

// "y" ends 4004 bytes into its block: a direct read of whole pages would overrun its destination, so it goes through
// the thread's buffer, which has room for the last page, and only its own bytes are copied out.
TEST_F(FetchInProcessTest, AChunkEndingOffAPageArrivesWholeAndAloneInPageAlignedMemory) {
  PageAligned dst(kShort * sizeof(float));
  const Box all{{0}, {kShort}};
  Result<uint64_t> read = FetchChunksInProcess(
      tuning_, path(), manifest_, {ChunkFetch{&manifest_.tensors[1], 0, {ChunkConsumer{all, dst.data(), all}}}});
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(*read, kShort * sizeof(float));
  for (uint64_t i = 0; i < kShort; ++i) {
    float got;
    std::memcpy(&got, dst.data() + i * sizeof(float), sizeof got);
    ASSERT_EQ(got, ShortValueAt(i)) << "element " << i;
  }
  EXPECT_EQ(static_cast<unsigned char>(dst.data()[kShort * sizeof(float)]), 0xee) << "a byte past the tensor";
}

// A destination dio_mem_align bytes past a page (512 on virtio and loop disks) is as good as a page-aligned one: a
// load with an arena and workers reads it straight in and never asks the workers, and verifies it there.
TEST_F(FetchInProcessTest, ADestinationAlignedOnlyAsDirectIoNeedsIsReadStraightInAndVerifiedThere) {
  Result<io::File> file = io::File::OpenBeneath(path(), manifest_.files[0].name);
  ASSERT_TRUE(file.ok()) << file.status().message();
  const uint64_t alignment = io::DirectMemoryAlignment(file->fd());
  if (alignment >= kPage)
    GTEST_SKIP() << "direct I/O here needs page-aligned memory (statx reports " << alignment << ")";
  Result<std::unique_ptr<io::StagingArena>> arena = io::StagingArena::Create(io::kMinArenaBytes);
  ASSERT_TRUE(arena.ok()) << arena.status().message();
  PageAligned memory(kRows * kPage + alignment);
  char* dst = memory.data() + alignment;
  const Box rows{{0, 0}, {kRows, kCols}};
  const std::vector<ChunkFetch> fetches = {ChunkFetch{&manifest_.tensors[0], 0, {ChunkConsumer{rows, dst, rows}}}};
  RefusingPool refusing;
  const FetchEngine engine{**arena, refusing, std::chrono::milliseconds(30000), {}, &tuning_};
  Result<uint64_t> read = FetchChunks(engine, path(), manifest_, fetches);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_FALSE(refusing.asked());
  EXPECT_EQ(FirstWrong(dst, 0, kRows), -1);
  EXPECT_EQ(static_cast<unsigned char>(memory.data()[0]), 0xee) << "a byte before the destination was written";

  Flip(0, 2 * kRowsPerBlock * kPage + 99);  // inside block 2, the chunk's last, shorter one
  ExpectCorruptNamingX(FetchChunks(engine, path(), manifest_, fetches));
  EXPECT_FALSE(refusing.asked());
}

TEST_F(FetchInProcessTest, AFlippedByteInABlockReadStraightInIsCorruptNamingTheTensorTheChunkAndTheFile) {
  Flip(0, kRowsPerBlock * kPage + 12345);  // inside block 1
  PageAligned dst(kRows * kPage);
  ExpectCorruptNamingX(FetchRows(0, kRows, dst.data()));
}

TEST_F(FetchInProcessTest, AFlippedByteInABlockReadThroughTheThreadsBufferIsCorruptNamingTheTensorTheChunkAndTheFile) {
  Flip(0, 2 * kRowsPerBlock * kPage + 777);  // inside block 2, only part of which rows [100, 590) need
  PageAligned dst((590 - 100) * kPage);
  ExpectCorruptNamingX(FetchRows(100, 590, dst.data()));
}

}  // namespace
}  // namespace ckpt::runtime

// A load reads the whole checksum blocks that land in one page-aligned run of a host destination straight into it
// (runtime/load/chunk_fetcher.cc), in this process, and verifies them there; everything else (the blocks at a run's
// edges, unaligned or device destinations) goes through the I/O workers and the arena as before. These tests watch
// which bytes the workers are asked for, and that every byte arrives, verified, either way.
// ctest-labels: threaded
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ckpt.h"
#include "common/usable_cores.h"
#include "io/file_io.h"
#include "io/file_jobs.h"
#include "io/staging_arena.h"
#include "io/worker_pool.h"
#include "runtime/core/context.h"
#include "runtime/format/manifest.h"
#include "runtime/load/chunk_fetcher.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::runtime {
namespace {

constexpr uint64_t kPage = 4096;
// One row is one page of F64; a checksum block (1 MiB, the default) is 256 rows, and the last of the 600 rows'
// three blocks is shorter (88 rows).
constexpr uint64_t kCols = kPage / sizeof(double), kRows = 600, kRowsPerBlock = 256;

// Page-aligned memory, as a trainer's large tensors are, with at least one spare page after `bytes`.
class PageAligned {
 public:
  explicit PageAligned(uint64_t bytes) : size_((bytes + 2 * kPage - 1) / kPage * kPage) {
    data_ = static_cast<char*>(std::aligned_alloc(kPage, size_));  // a size that is a multiple of the alignment
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

// Forwards every job to a real pool (in-process threads), counting the bytes it is asked to read; or, with no pool
// behind it, fails every job: a load that needs the workers then fails.
class WatchedPool final : public io::WorkerPool {
 public:
  explicit WatchedPool(std::unique_ptr<io::WorkerPool> pool) : pool_(std::move(pool)) {}

  std::future<Result<io::WriteResult>> SubmitWrite(int worker, io::WriteJob job) override {
    return pool_->SubmitWrite(worker, std::move(job));
  }
  std::future<Status> SubmitRead(int worker, io::ReadJob job, io::ReadFailure* failure) override {
    for (const io::FileSegment& segment : job.segments) bytes_asked_ += segment.length;
    if (pool_ != nullptr) return pool_->SubmitRead(worker, std::move(job), failure);
    std::promise<Status> refused;
    refused.set_value(Internal("the I/O workers were asked to read " + job.path));
    return refused.get_future();
  }
  Status AbandonFiles(const std::string& directory) override {
    return pool_ != nullptr ? pool_->AbandonFiles(directory) : Status::Ok();
  }
  int size() const override { return pool_ != nullptr ? pool_->size() : 1; }
  std::vector<pid_t> pids() const override { return {}; }
  std::string backend_name() const override { return pool_ != nullptr ? pool_->backend_name() : "none"; }

  uint64_t bytes_asked() const { return bytes_asked_; }

 private:
  std::unique_ptr<io::WorkerPool> pool_;
  uint64_t bytes_asked_ = 0;
};

double ValueAt(uint64_t flat_index) { return 0.5 * static_cast<double>(flat_index) + 1.0; }

// Its directory is under /tmp, a disk, not a tmpfs (those are mapped instead).
class DirectLoadTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    SaveTensor();
    Result<Manifest> manifest = ReadManifest(path());
    ASSERT_TRUE(manifest.ok()) << manifest.status().message();
    manifest_ = std::move(manifest).value();
    ASSERT_EQ(manifest_.tensors.size(), 1u);
    ASSERT_EQ(manifest_.tensors[0].chunks.size(), 1u);
    ASSERT_EQ(manifest_.tensors[0].chunks[0].bytes.block_size, kRowsPerBlock * kPage);
    ASSERT_EQ(manifest_.tensors[0].chunks[0].bytes.byte_length, rows_ * kPage);
    Result<std::unique_ptr<io::StagingArena>> arena = io::StagingArena::Create(io::kMinArenaBytes);
    ASSERT_TRUE(arena.ok()) << arena.status().message();
    arena_ = std::move(arena).value();
  }

  std::string path() const { return Path("ck"); }

  void SaveTensor() {
    ckpt_error_t* err = nullptr;
    ASSERT_EQ(ckpt_error_create(&err), CKPT_OK);
    ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
    opts.rank = 0;
    opts.world_size = 1;
    opts.io_workers = 0;
    ckpt_context_t* ctx = nullptr;
    ASSERT_EQ(ckpt_context_create(&opts, &ctx, err), CKPT_OK) << ckpt_error_message(err);
    std::vector<double> values(rows_ * kCols);
    for (size_t i = 0; i < values.size(); ++i) values[i] = ValueAt(i);
    const uint64_t shape[2] = {rows_, kCols}, offset[2] = {0, 0};
    ckpt_state_t* state = nullptr;
    ASSERT_EQ(ckpt_state_create(&state, err), CKPT_OK);
    ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
    shard.key = "x";
    shard.dtype = CKPT_DTYPE_F64;
    shard.ndim = 2;
    shard.global_shape = shape;
    shard.local_shape = shape;
    shard.global_offset = offset;
    shard.data = values.data();
    shard.data_size = sizeof(double) * values.size();
    ASSERT_EQ(ckpt_state_add_tensor(state, &shard, err), CKPT_OK) << ckpt_error_message(err);
    ckpt_request_t* request = nullptr;
    ASSERT_EQ(ckpt_save(ctx, state, path().c_str(), nullptr, &request, err), CKPT_OK) << ckpt_error_message(err);
    ASSERT_EQ(ckpt_request_wait(request, 0, err), CKPT_OK) << ckpt_error_message(err);
    ckpt_request_free(request);
    ckpt_state_free(state);
    ckpt_context_free(ctx);
    ckpt_error_free(err);
  }

  // A pool of in-process threads behind the watch; `real` false: a pool that fails every job.
  std::unique_ptr<WatchedPool> Pool(bool real) {
    if (!real) return std::make_unique<WatchedPool>(nullptr);
    io::WorkerPoolOptions options;
    options.workers = 0;
    Result<std::unique_ptr<io::WorkerPool>> pool = io::WorkerPool::Start(*arena_, options);
    EXPECT_TRUE(pool.ok()) << pool.status().message();
    return std::make_unique<WatchedPool>(pool.ok() ? std::move(pool).value() : nullptr);
  }

  // Fetches rows [row0, row1) of "x" into `dst` through `pool`, telling `delivered` (when set) the bytes of each
  // report of progress; returns the bytes read from storage.
  Result<uint64_t> FetchRows(io::WorkerPool& pool, uint64_t row0, uint64_t row1, char* dst,
                             std::function<void(uint64_t)> delivered = {}) {
    const Box rows{{row0, 0}, {row1 - row0, kCols}};
    const std::vector<ChunkFetch> fetches = {ChunkFetch{&manifest_.tensors[0], 0, {ChunkConsumer{rows, dst, rows}}}};
    const FetchEngine engine{*arena_, pool, std::chrono::milliseconds(30000), std::move(delivered), &tuning_};
    return FetchChunks(engine, path(), manifest_, fetches);
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

  uint64_t rows_ = kRows;  // of the tensor saved
  Manifest manifest_;
  std::unique_ptr<io::StagingArena> arena_;
  io::IoTuning tuning_;
};

TEST_F(DirectLoadTest, AWholeTensorInPageAlignedMemoryIsReadStraightIntoItAndNeverByTheWorkers) {
  PageAligned dst(kRows * kPage);
  std::unique_ptr<WatchedPool> refusing = Pool(false);
  Result<uint64_t> read = FetchRows(*refusing, 0, kRows, dst.data());
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(*read, kRows * kPage);
  EXPECT_EQ(refusing->bytes_asked(), 0u);
  EXPECT_EQ(FirstWrong(dst.data(), 0, kRows), -1);
  EXPECT_EQ(static_cast<unsigned char>(dst.data()[kRows * kPage]), 0xee) << "a byte past the tensor was written";
}

// Rows [100, 590): block 1 (rows 256-511) lies whole in the destination and goes straight in; blocks 0 and 2 are
// needed only in part, so the workers read them whole, to verify them, and the rows wanted are copied out.
TEST_F(DirectLoadTest, BlocksOnlyPartlyInTheDestinationGoThroughTheWorkersAndTheWholeOnesStraightIn) {
  PageAligned dst((590 - 100) * kPage);
  std::unique_ptr<WatchedPool> pool = Pool(true);
  Result<uint64_t> read = FetchRows(*pool, 100, 590, dst.data());
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(*read, kRows * kPage);
  EXPECT_EQ(pool->bytes_asked(), kRows * kPage - kRowsPerBlock * kPage);
  EXPECT_EQ(FirstWrong(dst.data(), 100, 590), -1);
}

TEST_F(DirectLoadTest, ADestinationThatIsNotPageAlignedIsFilledThroughTheWorkers) {
  PageAligned memory(kRows * kPage + sizeof(double));
  char* dst = memory.data() + sizeof(double);
  std::unique_ptr<WatchedPool> pool = Pool(true);
  Result<uint64_t> read = FetchRows(*pool, 0, kRows, dst);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(pool->bytes_asked(), kRows * kPage);
  EXPECT_EQ(FirstWrong(dst, 0, kRows), -1);
}

TEST_F(DirectLoadTest, AFlippedByteInABlockReadStraightInIsCorruptNamingTheTensorAndTheFile) {
  const std::string data_file = path() + "/data/0-0.bin";
  {
    std::fstream file(data_file, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(file.good()) << data_file;
    file.seekp(static_cast<std::streamoff>(manifest_.tensors[0].chunks[0].bytes.file_offset + kRowsPerBlock * kPage +
                                           12345));  // inside block 1
    file.put('\x5a');
  }
  PageAligned dst(kRows * kPage);
  std::unique_ptr<WatchedPool> refusing = Pool(false);
  Result<uint64_t> read = FetchRows(*refusing, 0, kRows, dst.data());
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), Code::kCorrupt) << read.status().message();
  const std::string message = read.status().message();
  EXPECT_NE(message.find("checksum mismatch"), std::string::npos) << message;
  EXPECT_NE(message.find("0-0.bin"), std::string::npos) << message;
  EXPECT_NE(message.find("tensor 'x'"), std::string::npos) << message;
  EXPECT_EQ(refusing->bytes_asked(), 0u);
}

// 64 MiB: with the test's 64 MiB arena and one worker, four windows of 16 MiB, all read straight in.
class DirectLoadProgressTest : public DirectLoadTest {
 protected:
  void SetUp() override {
    rows_ = 16384;
    DirectLoadTest::SetUp();
  }
};

// The progress callback runs on the calling thread only, and the calling thread reads nothing itself here: it still
// reports the windows as the direct threads deliver them (each waits for the report of its window before its next,
// and two threads deliver at most two windows between reports), not the whole load once at its end.
TEST_F(DirectLoadProgressTest, ALoadReadWhollyStraightInReportsItsProgressAsItGoesOnTheCallingThread) {
  PageAligned dst(rows_ * kPage);
  std::unique_ptr<WatchedPool> refusing = Pool(false);
  std::vector<uint64_t> reports;
  bool every_report_on_the_calling_thread = true;
  const std::thread::id caller = std::this_thread::get_id();
  Result<uint64_t> read = FetchRows(*refusing, 0, rows_, dst.data(), [&](uint64_t bytes) {
    reports.push_back(bytes);
    every_report_on_the_calling_thread = every_report_on_the_calling_thread && std::this_thread::get_id() == caller;
  });
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(refusing->bytes_asked(), 0u) << "the test expects every window read straight in";
  EXPECT_EQ(FirstWrong(dst.data(), 0, rows_), -1);
  EXPECT_TRUE(every_report_on_the_calling_thread);
  EXPECT_GE(reports.size(), 2u);
  uint64_t total = 0;
  for (uint64_t bytes : reports) total += bytes;
  EXPECT_EQ(total, rows_ * kPage);
}

// On one direct thread (the tuning's caller_memory_threads on a machine of fewer than 4 cores), that thread reads
// every window in turn, and the calling thread still reports each as it arrives.
TEST_F(DirectLoadProgressTest, ALoadReadStraightInOnOneThreadFillsEveryWindowAndReportsAsItGoes) {
  tuning_.caller_memory_threads = 1;
  PageAligned dst(rows_ * kPage);
  std::unique_ptr<WatchedPool> refusing = Pool(false);
  std::vector<uint64_t> reports;
  Result<uint64_t> read = FetchRows(*refusing, 0, rows_, dst.data(), [&](uint64_t bytes) { reports.push_back(bytes); });
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(*read, rows_ * kPage);
  EXPECT_EQ(refusing->bytes_asked(), 0u) << "the test expects every window read straight in";
  EXPECT_EQ(FirstWrong(dst.data(), 0, rows_), -1);
  EXPECT_EQ(reports.size(), 4u) << "one report per window of 16 MiB";
}

// A direct thread waiting for the report of its window must not outlive a failure: a flipped byte in the third
// window fails the load, naming the file, and the load ends.
TEST_F(DirectLoadProgressTest, AFlippedByteInALoadReportingItsProgressFailsItAndTheLoadEnds) {
  const std::string data_file = path() + "/data/0-0.bin";
  {
    std::fstream file(data_file, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(file.good()) << data_file;
    file.seekp(static_cast<std::streamoff>(manifest_.tensors[0].chunks[0].bytes.file_offset + (40ull << 20)));
    file.put('\x5a');
  }
  PageAligned dst(rows_ * kPage);
  std::unique_ptr<WatchedPool> refusing = Pool(false);
  uint64_t reported = 0;
  Result<uint64_t> read = FetchRows(*refusing, 0, rows_, dst.data(), [&](uint64_t bytes) { reported += bytes; });
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), Code::kCorrupt) << read.status().message();
  EXPECT_NE(read.status().message().find("0-0.bin"), std::string::npos) << read.status().message();
  EXPECT_LT(reported, rows_ * kPage);
}

// Without a progress callback (a load's exchange rounds fetch without one), the calling thread still waits for the
// direct threads, and every window arrives.
TEST_F(DirectLoadProgressTest, ALoadReadWhollyStraightInWithoutAProgressCallbackEnds) {
  PageAligned dst(rows_ * kPage);
  std::unique_ptr<WatchedPool> refusing = Pool(false);
  Result<uint64_t> read = FetchRows(*refusing, 0, rows_, dst.data());
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(*read, rows_ * kPage);
  EXPECT_EQ(FirstWrong(dst.data(), 0, rows_), -1);
}

// Without a tuning for this process's own reads (the engine's direct_tuning null), every window goes through the
// workers, as before.
TEST_F(DirectLoadTest, AnEngineWithoutDirectTuningReadsEverythingThroughTheWorkers) {
  PageAligned dst(kRows * kPage);
  std::unique_ptr<WatchedPool> pool = Pool(true);
  const Box rows{{0, 0}, {kRows, kCols}};
  const std::vector<ChunkFetch> fetches = {
      ChunkFetch{&manifest_.tensors[0], 0, {ChunkConsumer{rows, dst.data(), rows}}}};
  const FetchEngine engine{*arena_, *pool, std::chrono::milliseconds(30000)};
  Result<uint64_t> read = FetchChunks(engine, path(), manifest_, fetches);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(pool->bytes_asked(), kRows * kPage);
  EXPECT_EQ(FirstWrong(dst.data(), 0, kRows), -1);
}

// CKPT_LOAD_DIRECT=0 is the way back to the workers-only path (a storage that prefers it): the context then hands
// loads no tuning for direct reads; by default it hands its own I/O tuning.
TEST(DirectLoadSettingTest, LoadDirectZeroLeavesLoadsWithoutDirectReadsAndTheDefaultKeepsThem) {
  ContextConfig config;
  config.identity.rank = 0;
  config.identity.world_size = 1;
  config.io_workers = 0;
  config.arena_bytes = io::kMinArenaBytes;
  {
    Result<std::unique_ptr<Context>> ctx = Context::Create(config);
    ASSERT_TRUE(ctx.ok()) << ctx.status().message();
    ASSERT_NE((*ctx)->direct_load_tuning(), nullptr);
    EXPECT_TRUE((*ctx)->direct_load_tuning()->direct);
    EXPECT_EQ((*ctx)->direct_load_tuning()->caller_memory_threads, io::CallerMemoryThreadsFor(UsableCores()))
        << "as many direct threads as the cores this process may use call for";
  }
  setenv("CKPT_LOAD_DIRECT", "0", 1);
  Result<std::unique_ptr<Context>> ctx = Context::Create(config);
  unsetenv("CKPT_LOAD_DIRECT");
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  EXPECT_EQ((*ctx)->direct_load_tuning(), nullptr);
}

}  // namespace
}  // namespace ckpt::runtime

// ctest-labels: threaded
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "io/checksum.h"
#include "io/staging_arena.h"
#include "io/worker_pool.h"
#include "io/worker_protocol.h"
#include "runtime/save/commit_channel.h"
#include "runtime/save/save_executor.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::io {
namespace {

using std::chrono::milliseconds;

constexpr uint64_t kBlock = 64 << 10;
constexpr uint64_t kFileBytes = 4 * kBlock;

// The unit tests are built in <build>/tests and the worker in <build>/runtime.
std::string BuiltWorkerPath() {
  char exe[PATH_MAX] = {0};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "";
  return std::filesystem::path(exe).parent_path().parent_path() / "runtime" / "ckpt-io-worker";
}

bool IsReaped(pid_t pid) {
  int status = 0;
  return waitpid(pid, &status, WNOHANG) == -1 && errno == ECHILD &&
         !std::filesystem::exists("/proc/" + std::to_string(pid));
}

// Descriptors of process `pid` (0: this one) open on files inside `dir`, deleted ones included.
int DescriptorsInside(pid_t pid, const std::string& dir) {
  const std::string prefix = std::filesystem::weakly_canonical(dir).string() + "/";
  const std::string fds = "/proc/" + (pid == 0 ? std::string("self") : std::to_string(pid)) + "/fd";
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(fds)) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(entry.path(), error).string();
    if (!error && target.rfind(prefix, 0) == 0) ++count;
  }
  return count;
}

// Over the pool's worker processes, or this process when the workers are threads.
int DescriptorsInside(const WorkerPool& pool, const std::string& dir) {
  const std::vector<pid_t> pids = pool.pids();
  if (pids.empty()) return DescriptorsInside(0, dir);
  int count = 0;
  for (pid_t pid : pids) count += pid == 0 ? 0 : DescriptorsInside(pid, dir);
  return count;
}

template <typename T>
bool ReadyWithin(const std::future<T>& future, milliseconds limit) {
  return future.wait_for(limit) == std::future_status::ready;
}

// ---- protocol ------------------------------------------------------------------------------------------------

std::string BodyOf(const std::string& frame) { return frame.substr(sizeof(uint64_t)); }

WriteJob SampleWrite() {
  WriteJob job;
  job.path = "/ckpt/data/0-1.bin";
  job.create = true;
  job.overwrite_existing = true;
  job.finish = true;
  job.final_size = 12345;
  job.block_size = 4096;
  job.segments = {{0, 8192, 4096}, {4096, 0, 8249}};
  job.compute_checksums = false;
  return job;
}

TEST(WorkerProtocolTest, WorkerArgsRoundTrip) {
  WorkerArgs args;
  args.worker_index = 3;
  args.parent_pid = 4242;
  args.arena_bytes = 1ull << 33;
  args.tuning.backend = IoBackendKind::kPwrite;
  args.tuning.direct = false;
  args.tuning.request_bytes = 1 << 20;
  args.tuning.queue_depth = 7;
  args.tuning.pwrite_threads = 9;
  Result<WorkerArgs> parsed = ParseWorkerArgs(FormatWorkerArgs(args));
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->worker_index, 3);
  EXPECT_EQ(parsed->parent_pid, 4242);
  EXPECT_EQ(parsed->arena_bytes, 1ull << 33);
  EXPECT_EQ(parsed->tuning.backend, IoBackendKind::kPwrite);
  EXPECT_FALSE(parsed->tuning.direct);
  EXPECT_EQ(parsed->tuning.request_bytes, 1u << 20);
  EXPECT_EQ(parsed->tuning.queue_depth, 7u);
  EXPECT_EQ(parsed->tuning.pwrite_threads, 9u);
}

TEST(WorkerProtocolTest, WorkerArgsRejectUnknownMissingAndMalformedFlags) {
  std::vector<std::string> args = FormatWorkerArgs(WorkerArgs{});
  std::vector<std::string> unknown = args;
  unknown.push_back("--colour=blue");
  EXPECT_NE(ParseWorkerArgs(unknown).status().message().find("--colour"), std::string::npos);
  std::vector<std::string> missing(args.begin() + 1, args.end());
  EXPECT_NE(ParseWorkerArgs(missing).status().message().find("--protocol is missing"), std::string::npos);
  std::vector<std::string> malformed = args;
  malformed[3] = "--arena-bytes=-5";
  EXPECT_EQ(ParseWorkerArgs(malformed).status().code(), Code::kInvalidArgument);
  std::vector<std::string> other_version = args;
  other_version[0] = "--protocol=999";
  EXPECT_NE(ParseWorkerArgs(other_version).status().message().find("different builds"), std::string::npos);
}

TEST(WorkerProtocolTest, WriteRequestRoundTrips) {
  const WriteJob job = SampleWrite();
  Result<WorkerRequest> decoded = DecodeRequest(BodyOf(EncodeWriteRequest(77, job)));
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(decoded->type, MessageType::kWrite);
  EXPECT_EQ(decoded->job_id, 77u);
  EXPECT_EQ(decoded->write.path, job.path);
  EXPECT_TRUE(decoded->write.create);
  EXPECT_TRUE(decoded->write.overwrite_existing);
  EXPECT_TRUE(decoded->write.finish);
  EXPECT_EQ(decoded->write.final_size, 12345u);
  EXPECT_FALSE(decoded->write.compute_checksums);
  ASSERT_EQ(decoded->write.segments.size(), 2u);
  EXPECT_EQ(decoded->write.segments[1].arena_offset, 0u);
  EXPECT_EQ(decoded->write.segments[1].length, 8249u);
}

TEST(WorkerProtocolTest, ReadRequestRoundTripsWithExpectedChecksums) {
  ReadJob job;
  job.root = "/ckpt";
  job.path = "/ckpt/f";
  job.block_size = 4096;
  job.segments = {{4096, 0, 100}};
  job.expected_checksums = {{1, 2, 3}};
  Result<WorkerRequest> decoded = DecodeRequest(BodyOf(EncodeReadRequest(5, job)));
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(decoded->type, MessageType::kRead);
  EXPECT_EQ(decoded->read.root, "/ckpt");
  EXPECT_EQ(decoded->read.path, "/ckpt/f");
  EXPECT_EQ(decoded->read.segments[0].file_offset, 4096u);
  EXPECT_EQ(decoded->read.expected_checksums, job.expected_checksums);
}

TEST(WorkerProtocolTest, RepliesCarryStatusChecksumsAndReadFailure) {
  WriteResult result;
  result.checksums = {{10, 11}, {12}};
  Result<WorkerReply> write = DecodeReply(BodyOf(EncodeWriteReply(9, result, "io_uring+O_DIRECT")));
  ASSERT_TRUE(write.ok()) << write.status().message();
  EXPECT_EQ(write->write_result.checksums, result.checksums);
  EXPECT_EQ(write->backend, "io_uring+O_DIRECT");

  Result<WorkerReply> read =
      DecodeReply(BodyOf(EncodeReadReply(10, Corrupt("bad block"), ReadFailure{2, 7}, "pwrite")));
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->status.code(), Code::kCorrupt);
  EXPECT_EQ(read->status.message(), "bad block");
  EXPECT_EQ(read->read_failure.segment, 2u);
  EXPECT_EQ(read->read_failure.block, 7u);
}

TEST(WorkerProtocolTest, CompressedWriteRequestRoundTripsWithItsCodecAndGroupings) {
  WriteJob job = SampleWrite();
  job.codec = Codec::kZstd;
  job.byte_groups = {4, 0};
  Result<WorkerRequest> decoded = DecodeRequest(BodyOf(EncodeWriteRequest(78, job)));
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(decoded->write.codec, Codec::kZstd);
  EXPECT_EQ(decoded->write.byte_groups, (std::vector<uint32_t>{4, 0}));
  EXPECT_EQ(decoded->write.segments.size(), 2u);
}

TEST(WorkerProtocolTest, CompressedReadRequestRoundTripsWithItsCodecGroupingAndStoredSizes) {
  ReadJob job;
  job.root = "/ckpt";
  job.path = "/ckpt/f";
  job.block_size = 4096;
  job.segments = {{5000, 0, 9000}, {20000, 12288, 4096}};
  job.expected_checksums = {{1, 2, 3}, {4}};
  job.codec = Codec::kZstd;
  job.byte_groups = 2;
  job.stored_sizes = {{1000, 4096, 700}, {4096}};
  Result<WorkerRequest> decoded = DecodeRequest(BodyOf(EncodeReadRequest(6, job)));
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(decoded->read.codec, Codec::kZstd);
  EXPECT_EQ(decoded->read.byte_groups, 2u);
  EXPECT_EQ(decoded->read.stored_sizes, job.stored_sizes);
  EXPECT_EQ(decoded->read.expected_checksums, job.expected_checksums);
  EXPECT_EQ(decoded->read.segments[1].file_offset, 20000u);
}

TEST(WorkerProtocolTest, WriteReplyCarriesTheStoredLayout) {
  WriteResult result;
  result.checksums = {{10, 11}, {12}};
  result.stored_offsets = {0, 8192};
  result.stored_sizes = {{3000, 65536}, {4000}};
  result.file_end = 12192;
  Result<WorkerReply> reply = DecodeReply(BodyOf(EncodeWriteReply(9, result, "pwrite")));
  ASSERT_TRUE(reply.ok()) << reply.status().message();
  EXPECT_EQ(reply->write_result.checksums, result.checksums);
  EXPECT_EQ(reply->write_result.stored_offsets, result.stored_offsets);
  EXPECT_EQ(reply->write_result.stored_sizes, result.stored_sizes);
  EXPECT_EQ(reply->write_result.file_end, 12192u);
}

TEST(WorkerProtocolTest, AnUnknownCodecIsCorrupt) {
  WriteJob write = SampleWrite();
  write.codec = Codec::kZstd;
  write.byte_groups = {4, 4};
  std::string body = BodyOf(EncodeWriteRequest(1, write));
  const size_t codec_at = body.size() - sizeof(uint32_t) * 3 - 1;  // before the count and two groupings
  ASSERT_EQ(body[codec_at], static_cast<char>(Codec::kZstd));
  body[codec_at] = 2;
  Status status = DecodeRequest(body).status();
  EXPECT_EQ(status.code(), Code::kCorrupt);
  EXPECT_NE(status.message().find("unknown codec 2"), std::string::npos) << status.message();

  ReadJob read;
  read.path = "/ckpt/f";
  read.codec = Codec::kZstd;
  body = BodyOf(EncodeReadRequest(2, read));
  const size_t read_codec_at = body.size() - sizeof(uint32_t) * 2 - 1;  // before the grouping and no stored sizes
  ASSERT_EQ(body[read_codec_at], static_cast<char>(Codec::kZstd));
  body[read_codec_at] = '\xff';
  status = DecodeRequest(body).status();
  EXPECT_EQ(status.code(), Code::kCorrupt);
  EXPECT_NE(status.message().find("unknown codec 255"), std::string::npos) << status.message();
}

TEST(WorkerProtocolTest, AbandonRequestAndReplyRoundTrip) {
  Result<WorkerRequest> request = DecodeRequest(BodyOf(EncodeAbandonRequest(12, "/ckpt/step-3.tmp-ab")));
  ASSERT_TRUE(request.ok()) << request.status().message();
  EXPECT_EQ(request->type, MessageType::kAbandonFiles);
  EXPECT_EQ(request->job_id, 12u);
  EXPECT_EQ(request->directory, "/ckpt/step-3.tmp-ab");
  Result<WorkerReply> reply = DecodeReply(BodyOf(EncodeAbandonReply(12, Status::Ok(), "pwrite")));
  ASSERT_TRUE(reply.ok()) << reply.status().message();
  EXPECT_EQ(reply->type, MessageType::kFilesAbandoned);
  EXPECT_TRUE(reply->status.ok());
}

TEST(WorkerProtocolTest, EveryTruncationOfAMessageIsCorrupt) {
  const std::string body = BodyOf(EncodeWriteRequest(1, SampleWrite()));
  for (size_t size = 0; size < body.size(); ++size) {
    EXPECT_EQ(DecodeRequest(body.substr(0, size)).status().code(), Code::kCorrupt) << "prefix of " << size;
  }
  EXPECT_EQ(DecodeRequest(body + "x").status().code(), Code::kCorrupt);
}

TEST(WorkerProtocolTest, HugeCountIsRefusedBeforeAllocating) {
  std::string body = BodyOf(EncodeWriteRequest(1, SampleWrite()));
  // The segment count: before the two segments, the codec byte and the empty list of byte groupings.
  const size_t count_at = body.size() - 1 - sizeof(uint32_t) - 2 * 3 * sizeof(uint64_t) - sizeof(uint32_t);
  const uint32_t huge = 0xffffffffu;
  std::memcpy(&body[count_at], &huge, sizeof huge);
  const Status status = DecodeRequest(body).status();
  EXPECT_EQ(status.code(), Code::kCorrupt);
  EXPECT_NE(status.message().find("exceeds the message"), std::string::npos) << status.message();
}

TEST(WorkerProtocolTest, FrameReaderReassemblesFramesFedByteByByte) {
  const std::string stream = EncodeReadReply(1, Status::Ok(), {}, "a") + EncodeReadReply(2, Status::Ok(), {}, "b");
  FrameReader reader("test stream");
  std::vector<uint64_t> ids;
  std::string body;
  for (char c : stream) {
    reader.Append(&c, 1);
    Result<bool> next = reader.Next(&body);
    ASSERT_TRUE(next.ok());
    if (next.value()) ids.push_back(DecodeReply(body)->job_id);
  }
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 2}));
  EXPECT_FALSE(reader.partial());
}

TEST(WorkerProtocolTest, FrameReaderRejectsAnOversizedFrame) {
  const uint64_t length = kMaxFrameBytes + 1;
  FrameReader reader("test stream");
  reader.Append(reinterpret_cast<const char*>(&length), sizeof length);
  std::string body;
  EXPECT_EQ(reader.Next(&body).status().code(), Code::kCorrupt);
}

TEST(WorkerProtocolTest, SegmentsOutsideTheArenaAreRefused) {
  EXPECT_TRUE(CheckSegmentsInArena("f", {{0, 4096, 4096}}, 8192).ok());
  EXPECT_EQ(CheckSegmentsInArena("f", {{0, 4096, 4097}}, 8192).code(), Code::kInvalidArgument);
  const Status overflow = CheckSegmentsInArena("f", {{0, 4096, UINT64_MAX}}, 8192);
  EXPECT_EQ(overflow.code(), Code::kInvalidArgument);
  EXPECT_NE(overflow.message().find("segment 0"), std::string::npos);
}

// ---- the pool ------------------------------------------------------------------------------------------------

class WorkerPoolTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<StagingArena>> arena = StagingArena::Create(kMinArenaBytes);
    ASSERT_TRUE(arena.ok()) << arena.status().message();
    arena_ = std::move(arena.value());
    worker_path_ = BuiltWorkerPath();
    ASSERT_EQ(access(worker_path_.c_str(), X_OK), 0)
        << "build the ckpt-io-worker target first: " << worker_path_ << " is missing";
  }

  std::unique_ptr<WorkerPool> StartPool(int workers, milliseconds timeout = milliseconds(20000)) {
    WorkerPoolOptions options;
    options.workers = workers;
    options.worker_path = worker_path_;
    options.timeout = timeout;
    Result<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(*arena_, options);
    EXPECT_TRUE(pool.ok()) << pool.status().message();
    return pool.ok() ? std::move(pool.value()) : nullptr;
  }

  // Fills kFileBytes of the arena at `arena_offset` with a pattern particular to `seed`.
  void FillArena(uint64_t arena_offset, int seed) {
    for (uint64_t i = 0; i < kFileBytes; ++i) arena_->data()[arena_offset + i] = static_cast<char>(i * 31 + seed);
  }

  WriteJob WholeFileWrite(const std::string& name, uint64_t arena_offset) const {
    WriteJob job;
    job.path = Path(name);
    job.create = true;
    job.finish = true;
    job.final_size = kFileBytes;
    job.block_size = kBlock;
    job.segments = {{0, arena_offset, kFileBytes}};
    return job;
  }

  ReadJob WholeFileRead(const std::string& name, uint64_t arena_offset, std::vector<uint64_t> checksums) const {
    ReadJob job;
    job.root = dir();
    job.path = Path(name);
    job.block_size = kBlock;
    job.segments = {{0, arena_offset, kFileBytes}};
    job.expected_checksums = {std::move(checksums)};
    return job;
  }

  std::vector<uint64_t> ExpectedChecksums(uint64_t arena_offset) const {
    return BlockChecksums(arena_->data() + arena_offset, kFileBytes, kBlock);
  }

  // Writes a file through `worker` from arena offset 0 and reads it back at offset 1 MiB, comparing bytes.
  void ExpectRoundTrip(WorkerPool& pool, int worker, const std::string& name) {
    FillArena(0, worker + 1);
    Result<WriteResult> written = pool.SubmitWrite(worker, WholeFileWrite(name, 0)).get();
    ASSERT_TRUE(written.ok()) << written.status().message();
    ASSERT_EQ(written->checksums.size(), 1u);
    EXPECT_EQ(written->checksums[0], ExpectedChecksums(0));
    constexpr uint64_t kReadAt = 1 << 20;
    ReadFailure failure;
    const Status read = pool.SubmitRead(worker, WholeFileRead(name, kReadAt, written->checksums[0]), &failure).get();
    ASSERT_TRUE(read.ok()) << read.message();
    EXPECT_EQ(std::memcmp(arena_->data(), arena_->data() + kReadAt, kFileBytes), 0);
  }

  // Writes a file without the pool (so no deadline applies) and returns its block checksums.
  std::vector<uint64_t> WriteFileDirectly(const std::string& name, int seed) {
    FillArena(0, seed);
    std::ofstream(Path(name), std::ios::binary).write(arena_->data(), kFileBytes);
    return ExpectedChecksums(0);
  }

  // Sends a job to a worker that is stopped, so it stays pending.
  std::future<Result<WriteResult>> SubmitToStoppedWorker(WorkerPool& pool, pid_t pid, const std::string& name) {
    EXPECT_EQ(kill(pid, SIGSTOP), 0);
    FillArena(0, 7);
    return pool.SubmitWrite(0, WholeFileWrite(name, 0));
  }

  std::unique_ptr<StagingArena> arena_;
  std::string worker_path_;
};

TEST_F(WorkerPoolTest, ProcessWorkersWriteAndReadBack) {
  std::unique_ptr<WorkerPool> pool = StartPool(2);
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->size(), 2);
  EXPECT_EQ(pool->pids().size(), 2u);
  EXPECT_FALSE(pool->backend_name().empty());
  ExpectRoundTrip(*pool, 0, "a.bin");
  ExpectRoundTrip(*pool, 1, "b.bin");
}

TEST_F(WorkerPoolTest, InProcessThreadsWriteAndReadBack) {
  std::unique_ptr<WorkerPool> pool = StartPool(0);
  ASSERT_NE(pool, nullptr);
  EXPECT_TRUE(pool->pids().empty());
  EXPECT_GT(pool->size(), 0);
  ExpectRoundTrip(*pool, 0, "a.bin");
  ExpectRoundTrip(*pool, 1, "b.bin");
}

TEST_F(WorkerPoolTest, WorkerIndexIsTakenModuloTheSize) {
  std::unique_ptr<WorkerPool> pool = StartPool(2);
  ASSERT_NE(pool, nullptr);
  ExpectRoundTrip(*pool, 5, "five.bin");
  ExpectRoundTrip(*pool, -1, "minus-one.bin");
}

TEST_F(WorkerPoolTest, ReadChecksumMismatchReportsWhereInTheReply) {
  std::unique_ptr<WorkerPool> pool = StartPool(2);
  ASSERT_NE(pool, nullptr);
  FillArena(0, 3);
  Result<WriteResult> written = pool->SubmitWrite(1, WholeFileWrite("c.bin", 0)).get();
  ASSERT_TRUE(written.ok()) << written.status().message();
  std::vector<uint64_t> wrong = written->checksums[0];
  wrong[2] ^= 1;
  ReadFailure failure;
  const Status read = pool->SubmitRead(1, WholeFileRead("c.bin", 1 << 20, wrong), &failure).get();
  EXPECT_EQ(read.code(), Code::kCorrupt) << read.message();
  EXPECT_EQ(failure.segment, 0u);
  EXPECT_EQ(failure.block, 2u);
}

TEST_F(WorkerPoolTest, ManyConcurrentJobsFromSeveralThreads) {
  std::unique_ptr<WorkerPool> pool = StartPool(2);
  ASSERT_NE(pool, nullptr);
  constexpr int kThreads = 4;
  constexpr int kJobsPerThread = 12;
  for (int t = 0; t < kThreads; ++t) FillArena(t * kFileBytes, t);
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::future<Result<WriteResult>>> done;
      for (int j = 0; j < kJobsPerThread; ++j) {
        const std::string name = std::to_string(t) + "-" + std::to_string(j);
        done.push_back(pool->SubmitWrite(t + j, WholeFileWrite(name, t * kFileBytes)));
      }
      for (auto& d : done) {
        Result<WriteResult> r = d.get();
        if (!r.ok() || r->checksums[0] != ExpectedChecksums(t * kFileBytes)) ++failures[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures, std::vector<int>(kThreads, 0));
}

TEST_F(WorkerPoolTest, KilledWorkerFailsItsPendingJobAndIsRestarted) {
  std::unique_ptr<WorkerPool> pool = StartPool(2);
  ASSERT_NE(pool, nullptr);
  const pid_t victim = pool->pids()[0];
  auto pending = SubmitToStoppedWorker(*pool, victim, "killed.bin");
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_TRUE(ReadyWithin(pending, milliseconds(1000)));
  const Status status = pending.get().status();
  EXPECT_EQ(status.code(), Code::kIo);
  const std::string expected = "I/O worker 0 (pid " + std::to_string(victim) + ") died: killed by signal 9";
  EXPECT_NE(status.message().find(expected), std::string::npos) << status.message();
  EXPECT_TRUE(IsReaped(victim));

  ExpectRoundTrip(*pool, 0, "after-restart.bin");
  EXPECT_NE(pool->pids()[0], victim);
}

TEST_F(WorkerPoolTest, IdleWorkerThatDiesIsReapedAndRestartedByTheNextJob) {
  std::unique_ptr<WorkerPool> pool = StartPool(1);
  ASSERT_NE(pool, nullptr);
  const pid_t victim = pool->pids()[0];
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const auto give_up = std::chrono::steady_clock::now() + milliseconds(2000);
  while (!IsReaped(victim) && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_TRUE(IsReaped(victim));
  ExpectRoundTrip(*pool, 0, "after-idle-death.bin");
}

TEST_F(WorkerPoolTest, HungWorkerTimesOutIsKilledAndRestarted) {
  const std::vector<uint64_t> checksums = WriteFileDirectly("existing.bin", 5);
  std::unique_ptr<WorkerPool> pool = StartPool(2, milliseconds(200));
  ASSERT_NE(pool, nullptr);
  const pid_t victim = pool->pids()[0];
  auto pending = SubmitToStoppedWorker(*pool, victim, "hung.bin");
  ASSERT_TRUE(ReadyWithin(pending, milliseconds(2000)));
  const Status status = pending.get().status();
  EXPECT_EQ(status.code(), Code::kTimeout) << status.message();
  EXPECT_NE(status.message().find("I/O worker 0 (pid " + std::to_string(victim) + ")"), std::string::npos)
      << status.message();
  EXPECT_TRUE(IsReaped(victim));

  // A read from the page cache: quick enough for the tiny deadline even on a loaded machine, unlike a synced write.
  const Status read = pool->SubmitRead(0, WholeFileRead("existing.bin", 0, checksums), nullptr).get();
  EXPECT_TRUE(read.ok()) << read.message();
  EXPECT_NE(pool->pids()[0], victim);
}

TEST_F(WorkerPoolTest, JobReachingPastTheArenaIsRefused) {
  std::unique_ptr<WorkerPool> pool = StartPool(1);
  ASSERT_NE(pool, nullptr);
  WriteJob job = WholeFileWrite("past.bin", arena_->capacity() - 4096);
  const Status status = pool->SubmitWrite(0, job).get().status();
  EXPECT_EQ(status.code(), Code::kInvalidArgument) << status.message();
  EXPECT_FALSE(std::filesystem::exists(job.path));
}

TEST_F(WorkerPoolTest, MissingExecutableIsNotFoundNamingItAndTheVariable) {
  WorkerPoolOptions options;
  options.worker_path = dir() + "/no-such-worker";
  Result<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(*arena_, options);
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), Code::kNotFound);
  EXPECT_NE(pool.status().message().find(options.worker_path), std::string::npos) << pool.status().message();
  EXPECT_NE(pool.status().message().find("CKPT_WORKER_PATH"), std::string::npos) << pool.status().message();
}

TEST_F(WorkerPoolTest, WorkerThatExitsAtOnceFailsStartWithItsExitStatus) {
  WorkerPoolOptions options;
  options.worker_path = "/bin/false";
  Result<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(*arena_, options);
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), Code::kIo);
  EXPECT_NE(pool.status().message().find("exited with status 1"), std::string::npos) << pool.status().message();
}

TEST_F(WorkerPoolTest, DestructorLeavesNoChildProcesses) {
  std::unique_ptr<WorkerPool> pool = StartPool(2);
  ASSERT_NE(pool, nullptr);
  ExpectRoundTrip(*pool, 0, "d.bin");
  const std::vector<pid_t> pids = pool->pids();
  pool.reset();
  for (pid_t pid : pids) EXPECT_TRUE(IsReaped(pid)) << "worker " << pid << " was left behind";
}

TEST_F(WorkerPoolTest, AbandonFilesNeitherWaitsForNorStartsAWorkerThatIsDown) {
  std::unique_ptr<WorkerPool> pool = StartPool(2);
  ASSERT_NE(pool, nullptr);
  const pid_t victim = pool->pids()[0];
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const auto give_up = std::chrono::steady_clock::now() + milliseconds(2000);
  while (pool->pids()[0] != 0 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(milliseconds(5));
  ASSERT_EQ(pool->pids()[0], 0) << "the killed worker was not noticed";
  const Status abandoned = pool->AbandonFiles(dir());
  EXPECT_TRUE(abandoned.ok()) << abandoned.message();
  EXPECT_EQ(pool->pids()[0], 0);
}

TEST_F(WorkerPoolTest, AbandonFilesBehindAHungWorkerEndsWithinTheTimeoutAndTheWorkerKilled) {
  std::unique_ptr<WorkerPool> pool = StartPool(2, milliseconds(200));
  ASSERT_NE(pool, nullptr);
  const pid_t victim = pool->pids()[0];
  auto pending = SubmitToStoppedWorker(*pool, victim, "hung.bin");
  const auto start = std::chrono::steady_clock::now();
  const Status abandoned = pool->AbandonFiles(dir());
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(2000));
  EXPECT_TRUE(abandoned.ok() || abandoned.code() == Code::kTimeout) << abandoned.message();
  ASSERT_TRUE(ReadyWithin(pending, milliseconds(2000)));
  EXPECT_EQ(pending.get().status().code(), Code::kTimeout);
  EXPECT_TRUE(IsReaped(victim));
}

TEST_F(WorkerPoolTest, AbandonFilesNeedsADirectory) {
  std::unique_ptr<WorkerPool> pool = StartPool(0);
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->AbandonFiles("").code(), Code::kInvalidArgument);
}

// Runs for process workers (2) and in-process threads (0).
class AbandonFilesTest : public WorkerPoolTest, public ::testing::WithParamInterface<int> {
 protected:
  // A create job without the finish, as a save's first window: the worker keeps the file open for the next one.
  void WriteFirstWindow(WorkerPool& pool, int worker, const std::string& name) {
    FillArena(0, worker);
    WriteJob job = WholeFileWrite(name, 0);
    job.finish = false;
    const Result<WriteResult> written = pool.SubmitWrite(worker, std::move(job)).get();
    ASSERT_TRUE(written.ok()) << written.status().message();
  }
};

TEST_P(AbandonFilesTest, PartlyWrittenFilesOfTheSaveAreClosedAndOthersKept) {
  std::unique_ptr<WorkerPool> pool = StartPool(GetParam());
  ASSERT_NE(pool, nullptr);
  for (const char* save : {"/step-1.tmp-a", "/step-2.tmp-b"}) ASSERT_EQ(mkdir((dir() + save).c_str(), 0700), 0);
  for (int worker = 0; worker < pool->size(); ++worker) {
    WriteFirstWindow(*pool, worker, "step-1.tmp-a/0-" + std::to_string(worker) + ".bin");
  }
  WriteFirstWindow(*pool, 0, "step-2.tmp-b/0-0.bin");
  ASSERT_EQ(DescriptorsInside(*pool, dir() + "/step-1.tmp-a"), pool->size());

  const Status abandoned = pool->AbandonFiles(dir() + "/step-1.tmp-a");
  ASSERT_TRUE(abandoned.ok()) << abandoned.message();
  EXPECT_EQ(DescriptorsInside(*pool, dir() + "/step-1.tmp-a"), 0);
  EXPECT_EQ(DescriptorsInside(*pool, dir() + "/step-2.tmp-b"), 1);
  ExpectRoundTrip(*pool, 0, "step-2.tmp-b/after.bin");
}

// The save's first windows went out, then staging stopped, so the files' last jobs never came; the executor learns
// that the save failed and has the workers close them before the request reports the failure.
TEST_P(AbandonFilesTest, FailedSaveLeavesNoDescriptorOnItsFilesAndTheNextSaveWorks) {
  std::unique_ptr<WorkerPool> pool = StartPool(GetParam());
  ASSERT_NE(pool, nullptr);
  runtime::SaveExecutor saves(*arena_, *pool, runtime::MakeLocalCommitChannel(), 0, nullptr);
  auto ticket = std::make_shared<runtime::SaveTicket>();
  runtime::CommitInputs& commit = ticket->commit;
  commit.path = dir() + "/step-1";
  commit.save_id = "00000000000000a1";
  commit.tmp_dir = commit.path + ".tmp-" + commit.save_id;
  ASSERT_TRUE(std::filesystem::create_directories(commit.tmp_dir + "/data"));
  for (int worker = 0; worker < pool->size(); ++worker) {
    Result<ArenaRegion> region = arena_->Allocate(kFileBytes, milliseconds(1000));
    ASSERT_TRUE(region.ok()) << region.status().message();
    FillArena(region->offset, worker);
    WriteJob job =
        WholeFileWrite("step-1.tmp-" + commit.save_id + "/data/0-" + std::to_string(worker) + ".bin", region->offset);
    job.finish = false;
    ticket->pending.push_back(runtime::PendingWrite{pool->SubmitWrite(worker, std::move(job)), *region, {}});
  }
  ticket->failure = Internal("staging stopped after the first windows");

  saves.Enqueue(ticket);
  const Status saved = ticket->Wait(milliseconds(20000));
  EXPECT_EQ(saved.code(), Code::kInternal) << saved.message();
  EXPECT_EQ(DescriptorsInside(*pool, commit.tmp_dir), 0);
  EXPECT_FALSE(std::filesystem::exists(commit.tmp_dir));
  for (int worker = 0; worker < pool->size(); ++worker) {
    ExpectRoundTrip(*pool, worker, "step-2-" + std::to_string(worker) + ".bin");
  }
}

INSTANTIATE_TEST_SUITE_P(Pools, AbandonFilesTest, ::testing::Values(2, 0),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 0 ? std::string("InProcessThreads") : std::string("ProcessWorkers");
                         });

class WorkerPathVariableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv("CKPT_WORKER_PATH");
    if (old != nullptr) saved_ = old;
  }
  void TearDown() override {
    if (saved_.empty()) {
      unsetenv("CKPT_WORKER_PATH");
    } else {
      setenv("CKPT_WORKER_PATH", saved_.c_str(), 1);
    }
  }
  std::string saved_;
};

TEST_F(WorkerPathVariableTest, VariableNamingAnExecutableIsUsed) {
  setenv("CKPT_WORKER_PATH", BuiltWorkerPath().c_str(), 1);
  Result<std::string> path = FindWorkerExecutable();
  ASSERT_TRUE(path.ok()) << path.status().message();
  EXPECT_EQ(path.value(), BuiltWorkerPath());
}

TEST_F(WorkerPathVariableTest, VariableNamingAMissingFileIsNotFound) {
  setenv("CKPT_WORKER_PATH", "/nonexistent/ckpt-io-worker", 1);
  const Status status = FindWorkerExecutable().status();
  EXPECT_EQ(status.code(), Code::kNotFound);
  EXPECT_NE(status.message().find("CKPT_WORKER_PATH"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("/nonexistent/ckpt-io-worker"), std::string::npos) << status.message();
}

TEST_F(WorkerPathVariableTest, WithoutTheVariableTheDirectoryOfTheLoadedCodeIsSearched) {
  unsetenv("CKPT_WORKER_PATH");
  // Unit tests link libckpt statically, so the loaded code is this test binary, and no worker lies beside it.
  const std::string test_dir = std::filesystem::path(BuiltWorkerPath()).parent_path().parent_path() / "tests";
  const Status status = FindWorkerExecutable().status();
  EXPECT_EQ(status.code(), Code::kNotFound);
  EXPECT_NE(status.message().find(test_dir + "/ckpt-io-worker"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find(test_dir + "/ckpt/ckpt-io-worker"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace ckpt::io

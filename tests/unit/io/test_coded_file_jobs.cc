// ctest-labels: threaded
// Compressed file jobs (io/coded_file_jobs.h), as every executor from FileJobExecutor::Create runs them: a file's
// compressed write jobs store its blocks back to back and report where, reads of that layout give back the bytes
// staged, damage is refused naming the file's stored bytes, and jobs that cannot continue a file are refused.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "io/block_codec.h"
#include "io/checksum.h"
#include "io/file_jobs.h"
#include "io/io_backend.h"
#include "io/staging_arena.h"
#include "tests/unit/support/temp_dir.h"
#include "tests/unit/support/test_pattern.h"
#include "tests/unit/support/test_weights.h"

namespace ckpt::io {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kBlockBytes = 64 * 1024;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kArenaBytes = kMinArenaBytes;
constexpr uint64_t kReadArea = 32 * kMiB;  // reads land here, away from the staged bytes

uint64_t RoundUp(uint64_t value) { return (value + kPage - 1) / kPage * kPage; }

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

uint64_t Sum(const std::vector<uint32_t>& sizes) { return std::accumulate(sizes.begin(), sizes.end(), uint64_t{0}); }

// One segment to stage: its bytes and the byte grouping it is written with (0: stored as it is).
struct Piece {
  std::string bytes;
  uint32_t byte_groups = 0;
};

// The pieces of one file, spread over three jobs: F32 and raw random bytes, then BF16, then F64 and I8.
std::vector<std::vector<Piece>> SampleJobs() {
  return {{{testing::Weights(3 * kBlockBytes + 12, 4, 1), 4}, {testing::Pattern(10000, 2), 0}},
          {{testing::Weights(100000, 2, 3), 2}},
          {{testing::Weights(70000, 8, 4), 8}, {testing::Weights(5000, 1, 5), 1}}};
}

const char* KindName(IoBackendKind kind) { return kind == IoBackendKind::kIoUring ? "io_uring" : "pwrite"; }

class CodedFileJobsTest : public testing::TempDirTest, public ::testing::WithParamInterface<IoBackendKind> {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<StagingArena>> arena = StagingArena::Create(kArenaBytes);
    ASSERT_TRUE(arena.ok()) << arena.status().message();
    arena_ = std::move(arena).value();
    Result<std::unique_ptr<FileJobExecutor>> executor =
        FileJobExecutor::Create(arena_->data(), arena_->capacity(), Tuning());
    if (!executor.ok() && executor.status().code() == Code::kUnsupported) {
      GTEST_SKIP() << "the kernel refuses io_uring: " << executor.status().message();
    }
    ASSERT_TRUE(executor.ok()) << executor.status().message();
    executor_ = std::move(executor).value();
  }

  IoTuning Tuning() const {
    IoTuning tuning;
    tuning.backend = GetParam();
    tuning.request_bytes = 64 * 1024;
    tuning.queue_depth = 4;
    tuning.pwrite_threads = 3;
    return tuning;
  }

  // A compressed job of `pieces`, staged back to back from the arena's start; its segments' file offsets are an
  // uncompressed layout from `file_offset`, which the executor ignores.
  WriteJob Stage(const std::string& name, const std::vector<Piece>& pieces, bool create, bool finish,
                 uint64_t file_offset = 0) {
    WriteJob job;
    job.path = Path(name);
    job.create = create;
    job.finish = finish;
    job.block_size = kBlockBytes;
    job.codec = Codec::kZstd;
    uint64_t arena_offset = 0;
    for (const Piece& p : pieces) {
      std::memcpy(arena_->data() + arena_offset, p.bytes.data(), p.bytes.size());
      std::memset(arena_->data() + arena_offset + p.bytes.size(), 0, RoundUp(p.bytes.size()) - p.bytes.size());
      job.segments.push_back(FileSegment{file_offset, arena_offset, p.bytes.size()});
      job.byte_groups.push_back(p.byte_groups);
      arena_offset += RoundUp(p.bytes.size());
      file_offset += RoundUp(p.bytes.size());
    }
    job.final_size = file_offset;
    return job;
  }

  // Writes `jobs` as one file's create ... finish jobs; the results, in order.
  std::vector<WriteResult> WriteFile(const std::string& name, const std::vector<std::vector<Piece>>& jobs) {
    std::vector<WriteResult> results;
    uint64_t file_offset = 0;
    for (size_t j = 0; j < jobs.size(); ++j) {
      const WriteJob job = Stage(name, jobs[j], j == 0, j + 1 == jobs.size(), file_offset);
      file_offset = job.final_size;
      Result<WriteResult> written = executor_->Write(job);
      EXPECT_TRUE(written.ok()) << "job " << j << ": " << written.status().message();
      if (!written.ok()) return {};
      results.push_back(written.value());
    }
    return results;
  }

  // A read of segment `segment` of a write's result, whose bytes were written with `byte_groups`, into `arena_offset`.
  ReadJob MakeRead(const std::string& name, const WriteResult& written, size_t segment, uint64_t length,
                   uint32_t byte_groups, uint64_t arena_offset) const {
    ReadJob job;
    job.root = dir();
    job.path = Path(name);
    job.block_size = kBlockBytes;
    job.codec = Codec::kZstd;
    job.byte_groups = byte_groups == 0 ? 1 : byte_groups;
    job.segments = {FileSegment{written.stored_offsets[segment], arena_offset, length}};
    job.stored_sizes = {written.stored_sizes[segment]};
    job.expected_checksums = {written.checksums[segment]};
    return job;
  }

  std::unique_ptr<StagingArena> arena_;
  std::unique_ptr<FileJobExecutor> executor_;
};

TEST_P(CodedFileJobsTest, BackendNameSaysWhichBackendRunsBehindTheCodec) {
  EXPECT_EQ(executor_->backend_name().rfind(KindName(GetParam()), 0), 0u) << executor_->backend_name();
}

// Each job's segments follow where the job before ended, each block's stored form after the one before; the file
// is as long as the last job's file_end says.
TEST_P(CodedFileJobsTest, AFilesJobsStoreTheirBlocksBackToBackAndTheFileEndsAtFileEnd) {
  const std::vector<std::vector<Piece>> jobs = SampleJobs();
  const std::vector<WriteResult> results = WriteFile("f", jobs);
  ASSERT_EQ(results.size(), jobs.size());
  uint64_t end = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const WriteResult& r = results[j];
    ASSERT_EQ(r.stored_offsets.size(), jobs[j].size()) << "job " << j;
    ASSERT_EQ(r.stored_sizes.size(), jobs[j].size()) << "job " << j;
    ASSERT_EQ(r.checksums.size(), jobs[j].size()) << "job " << j;
    for (size_t i = 0; i < jobs[j].size(); ++i) {
      const Piece& p = jobs[j][i];
      const uint64_t start = p.byte_groups == 0 ? RoundUp(end) : end;
      EXPECT_EQ(r.stored_offsets[i], start) << "job " << j << ", segment " << i;
      EXPECT_EQ(r.stored_sizes[i].size(), BlockCount(p.bytes.size(), kBlockBytes)) << "job " << j << ", segment " << i;
      EXPECT_EQ(r.checksums[i], BlockChecksums(p.bytes.data(), p.bytes.size(), kBlockBytes))
          << "job " << j << ", segment " << i;
      end = start + Sum(r.stored_sizes[i]);
    }
    EXPECT_EQ(r.file_end, end) << "job " << j;
  }
  EXPECT_EQ(std::filesystem::file_size(Path("f")), end);
}

TEST_P(CodedFileJobsTest, CompressibleSegmentsTakeFewerBytesThanTheyHold) {
  const std::vector<std::vector<Piece>> jobs = SampleJobs();
  const std::vector<WriteResult> results = WriteFile("f", jobs);
  ASSERT_EQ(results.size(), jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    for (size_t i = 0; i < jobs[j].size(); ++i) {
      if (jobs[j][i].byte_groups == 0) continue;
      EXPECT_LT(Sum(results[j].stored_sizes[i]), jobs[j][i].bytes.size()) << "job " << j << ", segment " << i;
    }
  }
}

// A segment of byte grouping 0 is its bytes as they are, from a page boundary, each block's stored size its length.
TEST_P(CodedFileJobsTest, ASegmentOfGroupingZeroIsStoredRawFromAPageBoundary) {
  const std::vector<std::vector<Piece>> jobs = SampleJobs();
  const std::vector<WriteResult> results = WriteFile("f", jobs);
  ASSERT_EQ(results.size(), jobs.size());
  const Piece& raw = jobs[0][1];
  ASSERT_EQ(raw.byte_groups, 0u);
  const uint64_t offset = results[0].stored_offsets[1];
  EXPECT_EQ(offset % kPage, 0u);
  EXPECT_EQ(results[0].stored_sizes[1], (std::vector<uint32_t>{10000}));
  EXPECT_EQ(ReadWhole(Path("f")).substr(offset, raw.bytes.size()), raw.bytes);
}

TEST_P(CodedFileJobsTest, ReadsIntoTheArenaGiveBackEverySegment) {
  const std::vector<std::vector<Piece>> jobs = SampleJobs();
  const std::vector<WriteResult> results = WriteFile("f", jobs);
  ASSERT_EQ(results.size(), jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    for (size_t i = 0; i < jobs[j].size(); ++i) {
      const Piece& p = jobs[j][i];
      std::memset(arena_->data() + kReadArea, 0xee, p.bytes.size());
      ReadFailure failure;
      const Status status =
          executor_->Read(MakeRead("f", results[j], i, p.bytes.size(), p.byte_groups, kReadArea), &failure);
      ASSERT_TRUE(status.ok()) << "job " << j << ", segment " << i << ": " << status.message();
      EXPECT_EQ(std::string(arena_->data() + kReadArea, p.bytes.size()), p.bytes) << "job " << j << ", segment " << i;
    }
  }
}

// Decompressed bytes land in the caller's memory as they are: no alignment, no room past the segment.
TEST_P(CodedFileJobsTest, ReadsIntoUnalignedCallerMemoryOfExactLengthGiveBackEverySegment) {
  const std::vector<std::vector<Piece>> jobs = SampleJobs();
  const std::vector<WriteResult> results = WriteFile("f", jobs);
  ASSERT_EQ(results.size(), jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    for (size_t i = 0; i < jobs[j].size(); ++i) {
      const Piece& p = jobs[j][i];
      std::vector<char> memory(p.bytes.size() + 1, '\xee');
      char* unaligned = memory.data() + 1;
      const Status status = executor_->ReadInto(MakeRead("f", results[j], i, p.bytes.size(), p.byte_groups, 0),
                                                unaligned, p.bytes.size(), nullptr);
      ASSERT_TRUE(status.ok()) << "job " << j << ", segment " << i << ": " << status.message();
      EXPECT_EQ(std::string(unaligned, p.bytes.size()), p.bytes) << "job " << j << ", segment " << i;
    }
  }
}

// What a load reading straight into its destinations uses.
TEST_P(CodedFileJobsTest, AnExecutorForCallerMemoryReadsCompressedSegments) {
  const std::vector<std::vector<Piece>> jobs = SampleJobs();
  const std::vector<WriteResult> results = WriteFile("f", jobs);
  ASSERT_EQ(results.size(), jobs.size());
  Result<std::unique_ptr<FileJobExecutor>> reader = FileJobExecutor::CreateForCallerMemory(Tuning());
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  const Piece& p = jobs[1][0];
  std::string memory(p.bytes.size(), '\xee');
  const Status status = reader.value()->ReadInto(MakeRead("f", results[1], 0, p.bytes.size(), p.byte_groups, 0),
                                                 memory.data(), memory.size(), nullptr);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(memory, p.bytes);
}

// The least significant bytes of small floats do not compress: the last stored byte of a grouped block is one of
// them, stored as it is, so flipping it decodes to other bytes, which the block's checksum catches.
TEST_P(CodedFileJobsTest, AFlippedStoredByteIsAChecksumMismatchNamingTheCompressedFileBytes) {
  const std::vector<std::vector<Piece>> jobs = SampleJobs();
  const std::vector<WriteResult> results = WriteFile("f", jobs);
  ASSERT_EQ(results.size(), jobs.size());
  const WriteResult& r = results[0];
  const uint64_t block_start = r.stored_offsets[0] + r.stored_sizes[0][0];  // block 1 of segment 0
  const uint64_t block_end = block_start + r.stored_sizes[0][1];
  ASSERT_LT(r.stored_sizes[0][1], kBlockBytes);
  {
    std::fstream file(Path("f"), std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(static_cast<std::streamoff>(block_end - 1));
    const char byte = static_cast<char>(file.get() ^ 0x01);
    file.seekp(static_cast<std::streamoff>(block_end - 1));
    file.put(byte);
  }
  ReadFailure failure{99, 99};
  const Status status = executor_->Read(MakeRead("f", r, 0, jobs[0][0].bytes.size(), 4, kReadArea), &failure);
  EXPECT_EQ(status.code(), Code::kCorrupt) << status.message();
  EXPECT_NE(status.message().find(Path("f")), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("block 1 (file bytes [" + std::to_string(block_start) + ", " +
                                  std::to_string(block_end) + "), compressed)"),
            std::string::npos)
      << status.message();
  EXPECT_EQ(failure.segment, 0u);
  EXPECT_EQ(failure.block, 1u);
}

// A block whose stored form no longer decodes (its frame's magic number broken) is refused naming the file and the
// block, and the failure says where.
TEST_P(CodedFileJobsTest, AStoredFormThatDoesNotDecodeIsCorruptNamingTheBlock) {
  const std::vector<std::vector<Piece>> jobs = SampleJobs();
  const std::vector<WriteResult> results = WriteFile("f", jobs);
  ASSERT_EQ(results.size(), jobs.size());
  const WriteResult& r = results[1];
  ASSERT_LT(r.stored_sizes[0][0], kBlockBytes);
  {
    std::fstream file(Path("f"), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(r.stored_offsets[0]));
    file.put('\0');
  }
  ReadFailure failure{99, 99};
  const Status status = executor_->Read(MakeRead("f", r, 0, jobs[1][0].bytes.size(), 2, kReadArea), &failure);
  EXPECT_EQ(status.code(), Code::kCorrupt) << status.message();
  EXPECT_NE(status.message().find(Path("f")), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("segment 0, block 0"), std::string::npos) << status.message();
  EXPECT_EQ(failure.segment, 0u);
  EXPECT_EQ(failure.block, 0u);
}

TEST_P(CodedFileJobsTest, AContinuingJobForAFileWithNoEarlierJobIsRefused) {
  const Result<WriteResult> written = executor_->Write(Stage("f", SampleJobs()[1], false, true));
  EXPECT_EQ(written.status().code(), Code::kInvalidArgument) << written.status().message();
  EXPECT_NE(written.status().message().find("no earlier job"), std::string::npos) << written.status().message();
}

TEST_P(CodedFileJobsTest, AContinuingJobAfterAFailedOneIsRefused) {
  ASSERT_TRUE(executor_->Write(Stage("f", SampleJobs()[0], true, false)).ok());
  WriteJob bad = Stage("f", SampleJobs()[1], false, false);
  bad.byte_groups = {3};
  const Result<WriteResult> failed = executor_->Write(bad);
  ASSERT_EQ(failed.status().code(), Code::kInvalidArgument) << failed.status().message();
  const Result<WriteResult> next = executor_->Write(Stage("f", SampleJobs()[2], false, true));
  EXPECT_EQ(next.status().code(), Code::kInvalidArgument) << next.status().message();
  EXPECT_NE(next.status().message().find("earlier job failed"), std::string::npos) << next.status().message();
}

TEST_P(CodedFileJobsTest, AContinuingJobAfterTheFinishingOneIsRefused) {
  ASSERT_TRUE(executor_->Write(Stage("f", SampleJobs()[0], true, true)).ok());
  const Result<WriteResult> next = executor_->Write(Stage("f", SampleJobs()[1], false, true));
  EXPECT_EQ(next.status().code(), Code::kInvalidArgument) << next.status().message();
}

// A full file system fails the compressed job with kNoSpace naming the file, and the file's next job is refused
// rather than written where the failed one would have ended.
TEST_P(CodedFileJobsTest, AFullFileSystemIsNoSpaceAndTheFilesNextJobIsRefused) {
  const std::string mount_point = Path("small");
  ASSERT_EQ(mkdir(mount_point.c_str(), 0700), 0);
  if (mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a 1 MiB tmpfs: " << std::strerror(errno);
  }
  // Random bytes do not shrink: 2 MiB stored in 2 MiB, on 1 MiB.
  WriteJob job = Stage("unused", {Piece{testing::Pattern(2ull << 20, 7), 1}}, true, false);
  job.path = mount_point + "/f";
  const Result<WriteResult> written = executor_->Write(job);
  WriteJob next = Stage("unused", {Piece{testing::Pattern(kBlockBytes, 8), 1}}, false, true);
  next.path = job.path;
  const Result<WriteResult> refused = executor_->Write(next);
  umount2(mount_point.c_str(), MNT_DETACH);

  ASSERT_FALSE(written.ok());
  EXPECT_EQ(written.status().code(), Code::kNoSpace) << written.status().message();
  EXPECT_NE(written.status().message().find(job.path), std::string::npos) << written.status().message();
  EXPECT_EQ(refused.status().code(), Code::kInvalidArgument) << refused.status().message();
}

TEST_P(CodedFileJobsTest, AJobWithoutAGroupingPerSegmentIsRefused) {
  WriteJob job = Stage("f", SampleJobs()[0], true, true);
  job.byte_groups.pop_back();
  const Result<WriteResult> written = executor_->Write(job);
  EXPECT_EQ(written.status().code(), Code::kInvalidArgument) << written.status().message();
}

TEST_P(CodedFileJobsTest, WriteFromWithACodecIsRefused) {
  const WriteJob job = Stage("f", SampleJobs()[1], true, true);
  const Result<WriteResult> written = executor_->WriteFrom(job, {arena_->data()});
  EXPECT_EQ(written.status().code(), Code::kInvalidArgument) << written.status().message();
  EXPECT_NE(written.status().message().find("arena only"), std::string::npos) << written.status().message();
  EXPECT_FALSE(std::filesystem::exists(Path("f")));
}

// Jobs without a codec are the inner executor's: their segments at their own file offsets, no stored layout.
TEST_P(CodedFileJobsTest, JobsWithoutACodecPassThroughToTheirOwnOffsets) {
  WriteJob job = Stage("f", SampleJobs()[0], true, true, kPage);
  job.codec = Codec::kNone;
  job.byte_groups.clear();
  const Result<WriteResult> written = executor_->Write(job);
  ASSERT_TRUE(written.ok()) << written.status().message();
  EXPECT_TRUE(written->stored_offsets.empty());
  EXPECT_TRUE(written->stored_sizes.empty());
  const std::string file = ReadWhole(Path("f"));
  EXPECT_EQ(file.size(), job.final_size);
  for (const FileSegment& s : job.segments) {
    EXPECT_EQ(file.substr(s.file_offset, s.length), std::string(arena_->data() + s.arena_offset, s.length));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CodedFileJobsTest,
                         ::testing::Values(IoBackendKind::kIoUring, IoBackendKind::kPwrite),
                         [](const ::testing::TestParamInfo<IoBackendKind>& info) {
                           return std::string(KindName(info.param));
                         });

}  // namespace
}  // namespace ckpt::io

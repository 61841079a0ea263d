// File jobs on S3 objects, against a real S3 server (tests/s3/io/s3_job_fixture.h): what the save engine's write
// jobs leave in the bucket, how they go (multipart or one PUT), and what a read job says of a damaged object.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "io/checksum.h"
#include "io/file_jobs.h"
#include "io/s3/s3_client.h"
#include "tests/s3/io/s3_job_fixture.h"

namespace ckpt::io {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kReadAt = 64 * kMiB;  // where reads land in the arena, past every staged file

// Counts of requests sent between two snapshots.
s3::RequestCounts Sent(const s3::RequestCounts& before, const s3::RequestCounts& after) {
  return s3::RequestCounts{after.get - before.get,        after.put - before.put,   after.head - before.head,
                           after.del - before.del,        after.list - before.list, after.post - before.post,
                           after.retries - before.retries};
}

std::string LocalFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Segments with gaps between them, in three jobs, a final size that is no multiple of anything, zeros after the
// last segment; about 300 KB, under one part.
std::vector<std::vector<Piece>> SmallFileWithGaps() {
  return {{{0, 100000}, {106496, 50000}}, {{163840, 70000}}, {{237568, 30001}}};
}
constexpr uint64_t kSmallFileBytes = 300001;

// The same over 40 MiB, so that with 16 MiB parts the first part straddles segments and gaps across two jobs, the
// second lies inside one segment, and the last is what the finish job leaves, zeros at its end.
std::vector<std::vector<Piece>> LargeFileWithGaps() {
  return {{{0, 10 * kMiB + 123}, {12 * kMiB, 3 * kMiB}},
          {{16 * kMiB - 12288, 20 * kMiB + 5}},
          {{36 * kMiB, 4 * kMiB - 1000}}};
}
constexpr uint64_t kLargeFileBytes = 40 * kMiB + 777;

TEST_F(S3FileJobsTest, AnObjectWrittenInJobsWithGapsReadsBackExactlyWithZeroGapsAndTheLocalChecksums) {
  for (const auto& [pieces, final_size] :
       {std::pair{SmallFileWithGaps(), kSmallFileBytes}, std::pair{LargeFileWithGaps(), kLargeFileBytes}}) {
    SCOPED_TRACE("object of " + std::to_string(final_size) + " bytes");
    std::unique_ptr<FileJobExecutor> executor = MakeExecutor();
    ASSERT_NE(executor, nullptr);
    const StagedFile file = Stage(final_size, pieces, 7);
    const std::string name = "data/0/0-" + std::to_string(final_size) + ".bin";

    const Result<std::vector<std::vector<uint64_t>>> in_s3 = RunWrites(*executor, WriteJobs(file, Url(name)));
    ASSERT_TRUE(in_s3.ok()) << in_s3.status().message();
    EXPECT_EQ(executor->backend_name(), "s3");
    const Result<std::vector<std::vector<uint64_t>>> local = RunWrites(*executor, WriteJobs(file, Path("local.bin")));
    ASSERT_TRUE(local.ok()) << local.status().message();
    EXPECT_NE(executor->backend_name(), "s3");
    EXPECT_EQ(in_s3.value(), local.value()) << "the same bytes must have the same block checksums in S3 as in a file";

    const std::string object = ObjectBytes(name);
    EXPECT_EQ(object.size(), final_size);
    EXPECT_TRUE(object == file.image) << "the object differs from the file's bytes (gaps must be zeros)";
    EXPECT_TRUE(object == LocalFileBytes(Path("local.bin")));

    ReadFailure failure;
    const Status read = executor->Read(WholeRead(file, Url(name), kReadAt), &failure);
    ASSERT_TRUE(read.ok()) << read.message();
    EXPECT_EQ(std::memcmp(arena_->data() + kReadAt, file.image.data(), final_size), 0);
    std::filesystem::remove(Path("local.bin"));
  }
}

TEST_F(S3FileJobsTest, A40MiBObjectGoesAsAMultipartUploadAndA1MiBObjectAsOnePut) {
  std::unique_ptr<FileJobExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  const StagedFile large = Stage(kLargeFileBytes, LargeFileWithGaps(), 1);
  s3::RequestCounts before = client_->counts();
  ASSERT_TRUE(Ok(RunWrites(*executor, WriteJobs(large, Url("large.bin"))).status()));
  s3::RequestCounts sent = Sent(before, client_->counts());
  EXPECT_GE(sent.post, 2u) << "a multipart upload is begun and completed with POSTs";
  EXPECT_GE(sent.put, 3u) << "40 MiB in 16 MiB parts are three part PUTs";
  EXPECT_TRUE(ObjectBytes("large.bin") == large.image);

  const StagedFile small = Stage(kMiB, {{{0, kMiB}}}, 2);
  before = client_->counts();
  ASSERT_TRUE(Ok(RunWrites(*executor, WriteJobs(small, Url("small.bin"))).status()));
  sent = Sent(before, client_->counts());
  EXPECT_EQ(sent.post, 0u) << "an object under one part is no multipart upload";
  EXPECT_EQ(sent.put - sent.retries, 1u) << "an object under one part is one PUT";
  EXPECT_TRUE(ObjectBytes("small.bin") == small.image);
}

TEST_F(S3FileJobsTest, ReadingAnObjectReplacedByOtherBytesIsCorruptNamingTheChangedBlock) {
  std::unique_ptr<FileJobExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  const StagedFile file = Stage(kMiB, {{{0, kMiB}}}, 3);
  ASSERT_TRUE(Ok(RunWrites(*executor, WriteJobs(file, Url("data.bin"))).status()));
  std::string changed = file.image;
  changed[5 * kBlock + 17] ^= 0x40;
  ASSERT_TRUE(Ok(client_->Put(bucket_, Key("data.bin"), changed).status()));

  ReadFailure failure{99, 99};
  const Status read = executor->Read(WholeRead(file, Url("data.bin"), kReadAt), &failure);
  EXPECT_EQ(read.code(), Code::kCorrupt) << read.message();
  EXPECT_EQ(failure.segment, 0u);
  EXPECT_EQ(failure.block, 5u);
  EXPECT_NE(read.message().find(Url("data.bin")), std::string::npos) << read.message();
}

TEST_F(S3FileJobsTest, ReadingPastTheObjectsEndIsCorruptSayingItIsTruncated) {
  std::unique_ptr<FileJobExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  const StagedFile file = Stage(kMiB, {{{0, kMiB}}}, 4);
  ASSERT_TRUE(Ok(RunWrites(*executor, WriteJobs(file, Url("data.bin"))).status()));
  // A segment that runs past the end, and one that starts past it (which S3 answers with 416).
  for (const FileSegment& segment : {FileSegment{0, kReadAt, 2 * kMiB}, FileSegment{2 * kMiB, kReadAt, 4096}}) {
    ReadJob job = WholeRead(file, Url("data.bin"), kReadAt);
    job.segments = {segment};
    job.expected_checksums = {{}};
    const Status read = executor->Read(job, nullptr);
    EXPECT_EQ(read.code(), Code::kCorrupt) << read.message();
    EXPECT_NE(read.message().find("truncated"), std::string::npos) << read.message();
    EXPECT_NE(read.message().find(Url("data.bin")), std::string::npos) << read.message();
  }
}

TEST_F(S3FileJobsTest, AbandonFilesAbortsTheUploadAndLeavesNoObject) {
  std::unique_ptr<FileJobExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  const StagedFile file = Stage(kLargeFileBytes, LargeFileWithGaps(), 5);
  const std::vector<WriteJob> jobs = WriteJobs(file, Url("data/1/0-0.bin"));
  ASSERT_TRUE(Ok(executor->Write(jobs[0]).status()));
  ASSERT_TRUE(Ok(executor->Write(jobs[1]).status()));  // parts are stored by now
  Result<std::vector<s3::ListedUpload>> uploads = client_->ListMultipartUploads(bucket_, prefix_ + "/");
  ASSERT_TRUE(uploads.ok()) << uploads.status().message();
  EXPECT_EQ(uploads->size(), 1u);

  EXPECT_EQ(executor->AbandonFiles(root_ + "/data/10"), 0u) << "a sibling sharing the prefix is not inside";
  EXPECT_EQ(executor->AbandonFiles(root_ + "/data"), 1u);
  uploads = client_->ListMultipartUploads(bucket_, prefix_ + "/");
  ASSERT_TRUE(uploads.ok()) << uploads.status().message();
  EXPECT_TRUE(uploads->empty());
  EXPECT_EQ(client_->Head(bucket_, Key("data/1/0-0.bin")).status().code(), Code::kNotFound);
  const Result<WriteResult> late = executor->Write(jobs[2]);
  EXPECT_EQ(late.status().code(), Code::kInvalidArgument) << "an abandoned object takes no more jobs";
}

TEST_F(S3FileJobsTest, AFailedJobAbortsItsUploadAndNamesTheObject) {
  std::unique_ptr<FileJobExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  const StagedFile file = Stage(kLargeFileBytes, LargeFileWithGaps(), 6);
  std::vector<WriteJob> jobs = WriteJobs(file, Url("data.bin"));
  ASSERT_TRUE(Ok(executor->Write(jobs[0]).status()));
  ASSERT_TRUE(Ok(executor->Write(jobs[1]).status()));
  jobs[2].segments[0].file_offset = 0;  // before bytes already sent
  const Result<WriteResult> failed = executor->Write(jobs[2]);
  EXPECT_EQ(failed.status().code(), Code::kInvalidArgument);
  EXPECT_NE(failed.status().message().find(Url("data.bin")), std::string::npos) << failed.status().message();
  const Result<std::vector<s3::ListedUpload>> uploads = client_->ListMultipartUploads(bucket_, prefix_ + "/");
  ASSERT_TRUE(uploads.ok()) << uploads.status().message();
  EXPECT_TRUE(uploads->empty());
}

TEST_F(S3FileJobsTest, ACreateJobForAnObjectBeingWrittenIsRefused) {
  std::unique_ptr<FileJobExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  const StagedFile file = Stage(kSmallFileBytes, SmallFileWithGaps(), 8);
  const std::vector<WriteJob> jobs = WriteJobs(file, Url("data.bin"));
  ASSERT_TRUE(Ok(executor->Write(jobs[0]).status()));
  EXPECT_EQ(executor->Write(jobs[0]).status().code(), Code::kInvalidArgument);
}

TEST_F(S3FileJobsTest, CallerMemoryIsWrittenAndReadFromAnyAddressAndLength) {
  Result<std::unique_ptr<FileJobExecutor>> executor = FileJobExecutor::CreateForCallerMemory(IoTuning{});
  ASSERT_TRUE(executor.ok()) << executor.status().message();
  const std::string bytes = testing::Pattern(20 * kMiB + 3, 9);
  WriteJob job;
  job.path = Url("data.bin");
  job.create = true;
  job.final_size = bytes.size() + 100;
  job.block_size = kBlock;
  const Result<SourceRules> rules = (*executor)->PrepareWrite(job);
  ASSERT_TRUE(rules.ok()) << rules.status().message();
  EXPECT_EQ(rules->alignment, 1u);
  EXPECT_FALSE(rules->whole_pages);

  job.create = false;
  job.finish = true;
  job.segments = {FileSegment{0, 0, 5 * kMiB + 1}, FileSegment{8 * kMiB, 0, bytes.size() - 8 * kMiB}};
  const Result<WriteResult> written =
      (*executor)->WriteFrom(job, {bytes.data() + 1, bytes.data() + 8 * kMiB});  // unaligned on purpose
  ASSERT_TRUE(written.ok()) << written.status().message();
  ASSERT_EQ(written->checksums.size(), 2u);
  EXPECT_EQ(written->checksums[0], BlockChecksums(bytes.data() + 1, 5 * kMiB + 1, kBlock));

  std::string expected(job.final_size, '\0');
  expected.replace(0, 5 * kMiB + 1, bytes, 1, 5 * kMiB + 1);
  expected.replace(8 * kMiB, bytes.size() - 8 * kMiB, bytes, 8 * kMiB);
  EXPECT_TRUE(ObjectBytes("data.bin") == expected);

  std::string into(job.final_size + 1, 'x');
  ReadJob read;
  read.root = root_;
  read.path = Url("data.bin");
  read.block_size = kBlock;
  read.segments = {FileSegment{0, 1, job.final_size}};  // one byte in, any length
  read.expected_checksums = {BlockChecksums(expected.data(), expected.size(), kBlock)};
  const Status status = (*executor)->ReadInto(read, into.data(), into.size(), nullptr);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(into.substr(1) == expected);
  EXPECT_EQ(into[0], 'x');
}

TEST_F(S3FileJobsTest, AReadJobOutsideItsCheckpointIsRefused) {
  std::unique_ptr<FileJobExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  ReadJob job;
  job.root = root_;
  job.path = root_ + "-other/data.bin";
  job.segments = {FileSegment{0, 0, 4096}};
  job.expected_checksums = {{}};
  EXPECT_EQ(executor->Read(job, nullptr).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace ckpt::io

// The fixture of the S3 file-job tests: the S3 server named by CKPT_S3_TEST_ENV (a file of NAME=VALUE lines:
// AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, CKPT_S3_TEST_BUCKET, as
// `tools/s3_server.sh start DIR` writes DIR/env), a checkpoint URL of the test's own in its bucket (emptied after
// the test), a staging arena, and data files staged in it as the save engine stages them.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/checksum.h"
#include "io/file_jobs.h"
#include "io/s3/s3_client.h"
#include "io/staging_arena.h"
#include "tests/unit/support/temp_dir.h"
#include "tests/unit/support/test_pattern.h"

namespace ckpt::io {

// Where a segment's bytes go in its file.
struct Piece {
  uint64_t file_offset = 0;
  uint64_t length = 0;
};

// A data file staged in the arena: its segments back to back from an arena offset, each padded with zeros to a
// 4 KiB boundary, with garbage between them and the next (no gap of the file is in the arena), split into jobs.
struct StagedFile {
  uint64_t final_size = 0;
  std::vector<std::vector<FileSegment>> jobs;
  std::string image;  // the file's bytes: the segments' bytes where they go, zeros elsewhere
};

// For ASSERT_TRUE / EXPECT_TRUE: a failed status's message is the failure's.
inline ::testing::AssertionResult Ok(const Status& status) {
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << status.message();
}

class S3FileJobsTest : public testing::TempDirTest {
 protected:
  static constexpr uint64_t kArenaBytes = 128ull << 20;
  static constexpr uint64_t kBlock = 64 << 10;

  void SetUp() override {
    const char* env_file = getenv("CKPT_S3_TEST_ENV");
    if (env_file == nullptr) {
      GTEST_SKIP() << "CKPT_S3_TEST_ENV is not set: these tests need a real S3 server "
                      "(tools/s3_server.sh start DIR, then CKPT_S3_TEST_ENV=DIR/env)";
    }
    ASSERT_NO_FATAL_FAILURE(LoadEnvironment(env_file));
    Result<s3::Client*> client = s3::SharedClient();
    ASSERT_TRUE(client.ok()) << client.status().message();
    client_ = client.value();
    static std::atomic<int> tests{0};
    const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    prefix_ = "ckpt-s3-file-jobs/" + std::to_string(getpid()) + "-" + std::to_string(tests++) + "-" + test;
    root_ = s3::UrlOf(bucket_, prefix_);
    Result<std::unique_ptr<StagingArena>> arena = StagingArena::Create(kArenaBytes);
    ASSERT_TRUE(arena.ok()) << arena.status().message();
    arena_ = std::move(arena.value());
  }

  // Whatever a test left under its prefix, objects and uploads, is removed.
  void TearDown() override {
    if (client_ == nullptr) return;
    if (Result<std::vector<s3::ListedUpload>> uploads = client_->ListMultipartUploads(bucket_, prefix_ + "/");
        uploads.ok()) {
      for (const s3::ListedUpload& u : *uploads) (void)client_->AbortMultipartUpload(bucket_, u.key, u.upload_id);
    }
    if (Result<std::vector<s3::ListedObject>> objects = client_->List(bucket_, prefix_ + "/"); objects.ok()) {
      for (const s3::ListedObject& o : *objects) (void)client_->Delete(bucket_, o.key);
    }
  }

  // The URL of data file `name` of the test's checkpoint, and its key.
  std::string Url(const std::string& name) const { return root_ + "/" + name; }
  std::string Key(const std::string& name) const { return prefix_ + "/" + name; }

  // Stages `jobs` (each a list of pieces, in file order) from arena offset `arena_start`; the pieces' bytes are
  // Pattern(seed) at their file offsets.
  StagedFile Stage(uint64_t final_size, const std::vector<std::vector<Piece>>& jobs, uint32_t seed,
                   uint64_t arena_start = 0) {
    StagedFile file;
    file.final_size = final_size;
    file.image.assign(final_size, '\0');
    const std::string bytes = testing::Pattern(final_size, seed);
    uint64_t arena_offset = arena_start;
    for (const std::vector<Piece>& pieces : jobs) {
      std::vector<FileSegment>& segments = file.jobs.emplace_back();
      for (const Piece& p : pieces) {
        const uint64_t padded = (p.length + 4095) / 4096 * 4096;
        std::memcpy(arena_->data() + arena_offset, bytes.data() + p.file_offset, p.length);
        std::memset(arena_->data() + arena_offset + p.length, 0, padded - p.length);
        std::memset(arena_->data() + arena_offset + padded, 0x5a, 4096);  // garbage up to the next segment
        file.image.replace(p.file_offset, p.length, bytes, p.file_offset, p.length);
        segments.push_back(FileSegment{p.file_offset, arena_offset, p.length});
        arena_offset += padded + 4096;
      }
    }
    return file;
  }

  // The write jobs of `file` at `path`: create on the first, finish on the last.
  static std::vector<WriteJob> WriteJobs(const StagedFile& file, const std::string& path) {
    std::vector<WriteJob> jobs;
    for (size_t i = 0; i < file.jobs.size(); ++i) {
      WriteJob& job = jobs.emplace_back();
      job.path = path;
      job.create = i == 0;
      job.finish = i + 1 == file.jobs.size();
      job.final_size = file.final_size;
      job.block_size = kBlock;
      job.segments = file.jobs[i];
    }
    return jobs;
  }

  // Runs the jobs in order; the checksums of every segment, in file order.
  static Result<std::vector<std::vector<uint64_t>>> RunWrites(FileJobExecutor& executor,
                                                              const std::vector<WriteJob>& jobs) {
    std::vector<std::vector<uint64_t>> checksums;
    for (const WriteJob& job : jobs) {
      ASSIGN_OR_RETURN(WriteResult result, executor.Write(job));
      for (std::vector<uint64_t>& sums : result.checksums) checksums.push_back(std::move(sums));
    }
    return checksums;
  }

  // A read of the whole of `file` (at `url`, in the test's checkpoint) into the arena at `arena_offset`.
  ReadJob WholeRead(const StagedFile& file, const std::string& url, uint64_t arena_offset) const {
    ReadJob job;
    job.root = root_;
    job.path = url;
    job.block_size = kBlock;
    job.segments = {FileSegment{0, arena_offset, file.final_size}};
    job.expected_checksums = {BlockChecksums(file.image.data(), file.image.size(), kBlock)};
    return job;
  }

  std::unique_ptr<FileJobExecutor> MakeExecutor() {
    Result<std::unique_ptr<FileJobExecutor>> executor =
        FileJobExecutor::Create(arena_->data(), arena_->capacity(), IoTuning{});
    EXPECT_TRUE(executor.ok()) << executor.status().message();
    return executor.ok() ? std::move(executor.value()) : nullptr;
  }

  // The object's bytes, or the error's message.
  std::string ObjectBytes(const std::string& name) {
    Result<std::string> bytes = client_->Get(bucket_, Key(name), 1ull << 30);
    return bytes.ok() ? std::move(bytes.value()) : "<" + bytes.status().message() + ">";
  }

  s3::Client* client_ = nullptr;
  std::string bucket_;
  std::string prefix_;
  std::string root_;  // the test's checkpoint: s3://bucket/prefix
  std::unique_ptr<StagingArena> arena_;

 private:
  void LoadEnvironment(const char* env_file) {
    std::ifstream in(env_file);
    ASSERT_TRUE(in) << "cannot read CKPT_S3_TEST_ENV=" << env_file;
    std::string line;
    while (std::getline(in, line)) {
      const size_t equals = line.find('=');
      if (line.empty() || line[0] == '#' || equals == std::string::npos) continue;
      setenv(line.substr(0, equals).c_str(), line.substr(equals + 1).c_str(), /*overwrite=*/1);
    }
    const char* bucket = getenv("CKPT_S3_TEST_BUCKET");
    ASSERT_NE(bucket, nullptr) << env_file << " names no CKPT_S3_TEST_BUCKET";
    bucket_ = bucket;
  }
};

}  // namespace ckpt::io

// S3 file jobs run by ckpt-io-worker processes: a worker finds the server through the AWS_* environment it
// inherits from the process that starts the pool, keeps an object's upload across the object's jobs, and reads it
// back into the shared arena.
#include <gtest/gtest.h>
#include <limits.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "io/checksum.h"
#include "io/worker_pool.h"
#include "tests/s3/io/s3_job_fixture.h"

namespace ckpt::io {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// The tests are built in <build>/tests and the worker in <build>/runtime.
std::string BuiltWorkerPath() {
  char exe[PATH_MAX] = {0};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "";
  return std::filesystem::path(exe).parent_path().parent_path() / "runtime" / "ckpt-io-worker";
}

TEST_F(S3FileJobsTest, WorkerProcessesWriteAnObjectInJobsAndReadItBack) {
  WorkerPoolOptions options;
  options.workers = 2;
  options.worker_path = BuiltWorkerPath();
  ASSERT_EQ(access(options.worker_path.c_str(), X_OK), 0)
      << "build the ckpt-io-worker target first: " << options.worker_path << " is missing";
  Result<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(*arena_, options);
  ASSERT_TRUE(pool.ok()) << pool.status().message();
  ASSERT_EQ((*pool)->pids().size(), 2u) << "the jobs must run in worker processes";

  const StagedFile file =
      Stage(20 * kMiB + 5, {{{0, 9 * kMiB}}, {{9 * kMiB, 4 * kMiB}}, {{16 * kMiB, 4 * kMiB + 1}}}, 11);
  std::vector<std::vector<uint64_t>> checksums;
  for (const WriteJob& job : WriteJobs(file, Url("data/0/1-0.bin"))) {
    Result<WriteResult> written = (*pool)->SubmitWrite(1, job).get();
    ASSERT_TRUE(written.ok()) << written.status().message();
    for (std::vector<uint64_t>& sums : written->checksums) checksums.push_back(std::move(sums));
  }
  EXPECT_EQ((*pool)->backend_name(), "s3");
  ASSERT_EQ(checksums.size(), 3u);
  EXPECT_EQ(checksums[2], BlockChecksums(file.image.data() + 16 * kMiB, 4 * kMiB + 1, kBlock));
  EXPECT_TRUE(ObjectBytes("data/0/1-0.bin") == file.image);

  constexpr uint64_t kReadAt = 64 * kMiB;
  ReadFailure failure;
  const Status read = (*pool)->SubmitRead(0, WholeRead(file, Url("data/0/1-0.bin"), kReadAt), &failure).get();
  ASSERT_TRUE(read.ok()) << read.message();
  EXPECT_EQ(std::memcmp(arena_->data() + kReadAt, file.image.data(), file.final_size), 0);
}

TEST_F(S3FileJobsTest, WorkerProcessesAbandonAnObjectsUpload) {
  WorkerPoolOptions options;
  options.workers = 2;
  options.worker_path = BuiltWorkerPath();
  Result<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(*arena_, options);
  ASSERT_TRUE(pool.ok()) << pool.status().message();
  const StagedFile file = Stage(40 * kMiB, {{{0, 20 * kMiB}}, {{20 * kMiB, 20 * kMiB}}}, 12);
  ASSERT_TRUE(Ok((*pool)->SubmitWrite(0, WriteJobs(file, Url("data/0/0-0.bin"))[0]).get().status()));
  ASSERT_TRUE(Ok((*pool)->AbandonFiles(root_ + "/data")));
  const Result<std::vector<s3::ListedUpload>> uploads = client_->ListMultipartUploads(bucket_, prefix_ + "/");
  ASSERT_TRUE(uploads.ok()) << uploads.status().message();
  EXPECT_TRUE(uploads->empty());
}

}  // namespace
}  // namespace ckpt::io

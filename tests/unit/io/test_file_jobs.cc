// ctest-labels: threaded
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "common/fault_injection.h"
#include "io/checksum.h"
#include "io/file_jobs.h"
#include "io/io_backend.h"
#include "io/staging_arena.h"
#include "tests/unit/support/scoped_env.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::io {
namespace {

using testing::ScopedEnv;

constexpr uint64_t kPage = 4096;
constexpr uint64_t kMiB = 1ull << 20;
// Small requests and blocks, so that small test data still spans many requests, blocks and a full queue.
constexpr uint64_t kRequestBytes = 64 * 1024;
constexpr uint64_t kBlockBytes = 24 * 1024;
// Where a test stages data to write, and where reads land, so that a read never sees the bytes it should fetch.
constexpr uint64_t kWriteArea = 0;
constexpr uint64_t kReadArea = 96 * kMiB;
constexpr uint64_t kArenaBytes = 192 * kMiB;

uint64_t RoundUp(uint64_t value) { return (value + kPage - 1) / kPage * kPage; }

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

bool IsTmpfs(const std::string& path) {
  struct statfs fs;
  return statfs(path.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

// Descriptors of this process open on files inside `dir`.
int DescriptorsInside(const std::string& dir) {
  const std::string prefix = std::filesystem::canonical(dir).string() + "/";
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(entry.path(), error).string();
    if (!error && target.rfind(prefix, 0) == 0) ++count;
  }
  return count;
}

const char* KindName(IoBackendKind kind) { return kind == IoBackendKind::kIoUring ? "io_uring" : "pwrite"; }

class FileJobsTest : public testing::TempDirTest, public ::testing::WithParamInterface<IoBackendKind> {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<StagingArena>> arena = StagingArena::Create(kArenaBytes);
    ASSERT_TRUE(arena.ok()) << arena.status().message();
    arena_ = std::move(arena).value();
    Result<std::unique_ptr<FileJobExecutor>> executor = MakeExecutor();
    if (!executor.ok() && executor.status().code() == Code::kUnsupported) {
      GTEST_SKIP() << "the kernel refuses io_uring: " << executor.status().message();
    }
    ASSERT_TRUE(executor.ok()) << executor.status().message();
    executor_ = std::move(executor).value();
  }

  IoTuning Tuning(bool direct = true) const {
    IoTuning tuning;
    tuning.backend = GetParam();
    tuning.direct = direct;
    tuning.request_bytes = kRequestBytes;
    tuning.queue_depth = 4;
    tuning.pwrite_threads = 3;
    return tuning;
  }

  Result<std::unique_ptr<FileJobExecutor>> MakeExecutor(bool direct = true) {
    return FileJobExecutor::Create(arena_->data(), arena_->capacity(), Tuning(direct));
  }

  // Random bytes at `arena_offset`, zeros after them up to the next 4 KiB boundary (as the stager leaves them).
  std::string Stage(uint64_t arena_offset, uint64_t length, uint32_t seed) {
    std::mt19937_64 random(seed);
    std::string bytes(length, '\0');
    for (uint64_t i = 0; i < length; i += sizeof(uint64_t)) {
      const uint64_t word = random();
      std::memcpy(&bytes[i], &word, std::min<uint64_t>(sizeof word, length - i));
    }
    std::memcpy(arena_->data() + arena_offset, bytes.data(), length);
    std::memset(arena_->data() + arena_offset + length, 0, RoundUp(length) - length);
    return bytes;
  }

  // Segments of the given lengths laid out back to back (4 KiB-aligned) in the file and in the write area.
  std::vector<FileSegment> Layout(const std::vector<uint64_t>& lengths, uint64_t file_start = 0) {
    std::vector<FileSegment> segments;
    uint64_t file_offset = file_start;
    uint64_t arena_offset = kWriteArea;
    for (uint64_t length : lengths) {
      segments.push_back(FileSegment{file_offset, arena_offset, length});
      file_offset += RoundUp(length);
      arena_offset += RoundUp(length);
    }
    return segments;
  }

  std::vector<std::string> StageAll(const std::vector<FileSegment>& segments, uint32_t seed) {
    std::vector<std::string> data;
    for (const FileSegment& s : segments) data.push_back(Stage(s.arena_offset, s.length, seed++));
    return data;
  }

  WriteJob MakeWrite(const std::string& name, const std::vector<FileSegment>& segments, bool create, bool finish) {
    WriteJob job;
    job.path = Path(name);
    job.create = create;
    job.finish = finish;
    job.final_size = segments.empty() ? 0 : segments.back().file_offset + segments.back().length;
    job.block_size = kBlockBytes;
    job.segments = segments;
    return job;
  }

  // A read of the written segments into the read area, expecting the checksums the write returned.
  ReadJob MakeRead(const std::string& name, const std::vector<FileSegment>& written, const WriteResult& result) {
    ReadJob job;
    job.root = dir();
    job.path = Path(name);
    job.block_size = kBlockBytes;
    for (const FileSegment& s : written) {
      job.segments.push_back(FileSegment{s.file_offset, kReadArea + s.arena_offset - kWriteArea, s.length});
    }
    job.expected_checksums = result.checksums;
    return job;
  }

  // File `name` is as long as its last segment reaches and holds each segment's data, and the write returned each
  // segment's block checksums.
  void ExpectFileHolds(const std::string& name, const std::vector<FileSegment>& segments,
                       const std::vector<std::string>& data, const WriteResult& written) const {
    ASSERT_EQ(written.checksums.size(), segments.size());
    const std::string file = ReadWhole(Path(name));
    ASSERT_EQ(file.size(), segments.back().file_offset + segments.back().length);
    for (size_t i = 0; i < segments.size(); ++i) {
      EXPECT_EQ(written.checksums[i], BlockChecksums(data[i].data(), data[i].size(), kBlockBytes)) << "segment " << i;
      EXPECT_EQ(file.substr(segments[i].file_offset, segments[i].length), data[i]) << "segment " << i;
    }
  }

  std::string ArenaBytes(uint64_t offset, uint64_t length) const {
    return std::string(arena_->data() + offset, length);
  }

  std::unique_ptr<StagingArena> arena_;
  std::unique_ptr<FileJobExecutor> executor_;
};

TEST_P(FileJobsTest, BackendNameSaysWhichBackendRuns) {
  EXPECT_EQ(executor_->backend_name().rfind(KindName(GetParam()), 0), 0u) << executor_->backend_name();
}

TEST_P(FileJobsTest, WriteThenReadRoundTripsSegmentsWithTheirChecksums) {
  const std::vector<FileSegment> segments = Layout({100000, 5 * kPage, 300001});
  const std::vector<std::string> data = StageAll(segments, 1);
  Result<WriteResult> written = executor_->Write(MakeWrite("f", segments, true, true));
  ASSERT_TRUE(written.ok()) << written.status().message();

  ExpectFileHolds("f", segments, data, written.value());

  ReadFailure failure;
  const ReadJob read = MakeRead("f", segments, written.value());
  const Status status = executor_->Read(read, &failure);
  ASSERT_TRUE(status.ok()) << status.message();
  for (size_t i = 0; i < segments.size(); ++i) {
    EXPECT_EQ(ArenaBytes(read.segments[i].arena_offset, read.segments[i].length), data[i]) << "segment " << i;
  }
}

// A job whose segments the caller checksummed while staging them (compute_checksums false) writes them all the same
// and returns no checksums.
TEST_P(FileJobsTest, AJobNotAskedForChecksumsWritesItsSegmentsAndReturnsNone) {
  const std::vector<FileSegment> segments = Layout({100000, 5 * kPage});
  const std::vector<std::string> data = StageAll(segments, 3);
  WriteJob job = MakeWrite("f", segments, true, true);
  job.compute_checksums = false;
  Result<WriteResult> written = executor_->Write(job);
  ASSERT_TRUE(written.ok()) << written.status().message();
  EXPECT_TRUE(written->checksums.empty());
  const std::string file = ReadWhole(Path("f"));
  for (size_t i = 0; i < segments.size(); ++i) {
    EXPECT_EQ(file.substr(segments[i].file_offset, segments[i].length), data[i]) << "segment " << i;
  }
}

TEST_P(FileJobsTest, FileWrittenByCreateMiddleAndFinishJobsHoldsEverySegment) {
  const std::vector<FileSegment> segments = Layout({70000, 8 * kPage, 12345});
  const std::vector<std::string> data = StageAll(segments, 7);
  const uint64_t final_size = segments.back().file_offset + segments.back().length;
  for (size_t i = 0; i < segments.size(); ++i) {
    WriteJob job = MakeWrite("f", {segments[i]}, i == 0, i + 1 == segments.size());
    job.final_size = final_size;
    Result<WriteResult> written = executor_->Write(job);
    ASSERT_TRUE(written.ok()) << "job " << i << ": " << written.status().message();
  }
  const std::string file = ReadWhole(Path("f"));
  ASSERT_EQ(file.size(), final_size);
  for (size_t i = 0; i < segments.size(); ++i) {
    EXPECT_EQ(file.substr(segments[i].file_offset, segments[i].length), data[i]) << "segment " << i;
  }
}

TEST_P(FileJobsTest, FinishTruncatesToFinalSize) {
  const std::vector<FileSegment> segments = Layout({5000});
  StageAll(segments, 3);
  WriteJob job = MakeWrite("f", segments, true, true);
  job.final_size = 4999;
  ASSERT_TRUE(executor_->Write(job).ok());
  struct stat st;
  ASSERT_EQ(stat(Path("f").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 4999);
}

// A direct write past a file's end extends it, which ext4 serialises and io_uring sends to its blocking workers:
// the create job gives the file every byte its direct writes will reach, and the finish job cuts the padding.
TEST_P(FileJobsTest, ACreatedFileHasItsWholeSizeBeforeItsFirstWriteSoNoWriteExtendsIt) {
  const std::vector<FileSegment> segments = Layout({3 * kPage, 12345});
  StageAll(segments, 5);
  const uint64_t final_size = segments.back().file_offset + segments.back().length;
  WriteJob first = MakeWrite("f", {segments[0]}, true, false);
  first.final_size = final_size;
  ASSERT_TRUE(executor_->Write(first).ok());
  struct stat st;
  ASSERT_EQ(stat(Path("f").c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), RoundUp(final_size)) << "after the create job";

  WriteJob last = MakeWrite("f", {segments[1]}, false, true);
  last.final_size = final_size;
  ASSERT_TRUE(executor_->Write(last).ok());
  ASSERT_EQ(stat(Path("f").c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), final_size) << "after the finish job";
}

TEST_P(FileJobsTest, ReadReportsTheBlockOfAFlippedByte) {
  const std::vector<FileSegment> segments = Layout({3 * kBlockBytes, 4 * kBlockBytes});
  StageAll(segments, 11);
  Result<WriteResult> written = executor_->Write(MakeWrite("f", segments, true, true));
  ASSERT_TRUE(written.ok()) << written.status().message();

  const uint64_t damaged = segments[1].file_offset + 2 * kBlockBytes + 5;
  const int fd = open(Path("f").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char byte;
  ASSERT_EQ(pread(fd, &byte, 1, damaged), 1);
  byte ^= 0x40;
  ASSERT_EQ(pwrite(fd, &byte, 1, damaged), 1);
  close(fd);

  ReadFailure failure;
  const Status status = executor_->Read(MakeRead("f", segments, written.value()), &failure);
  EXPECT_EQ(status.code(), Code::kCorrupt);
  EXPECT_NE(status.message().find(Path("f")), std::string::npos) << status.message();
  EXPECT_EQ(failure.segment, 1u);
  EXPECT_EQ(failure.block, 2u);
}

TEST_P(FileJobsTest, ReadOfTruncatedFileIsCorrupt) {
  const std::vector<FileSegment> segments = Layout({50000, 50000});
  StageAll(segments, 5);
  Result<WriteResult> written = executor_->Write(MakeWrite("f", segments, true, true));
  ASSERT_TRUE(written.ok()) << written.status().message();
  ASSERT_EQ(truncate(Path("f").c_str(), static_cast<off_t>(segments[1].file_offset + 1000)), 0);

  ReadFailure failure;
  const Status status = executor_->Read(MakeRead("f", segments, written.value()), &failure);
  EXPECT_EQ(status.code(), Code::kCorrupt);
  EXPECT_NE(status.message().find("truncated"), std::string::npos) << status.message();
}

// Page-aligned memory of this process, outside the arena, filled with `fill`: where a load reads straight into a
// trainer's tensor.
class CallerMemory {
 public:
  CallerMemory(uint64_t size, char fill) : data_(static_cast<char*>(std::aligned_alloc(kPage, size))), size_(size) {
    std::memset(data_, fill, size);
  }
  ~CallerMemory() { std::free(data_); }
  CallerMemory(const CallerMemory&) = delete;
  CallerMemory& operator=(const CallerMemory&) = delete;
  char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  char* data_;
  uint64_t size_;
};

TEST_P(FileJobsTest, ReadIntoCallerMemoryFillsItsSegmentsVerifiedAndNotOneByteMore) {
  const std::vector<FileSegment> segments = Layout({8 * kPage, 3 * kBlockBytes});
  const std::vector<std::string> data = StageAll(segments, 21);
  Result<WriteResult> written = executor_->Write(MakeWrite("f", segments, true, true));
  ASSERT_TRUE(written.ok()) << written.status().message();
  Result<std::unique_ptr<FileJobExecutor>> reader = FileJobExecutor::CreateForCallerMemory(Tuning());
  ASSERT_TRUE(reader.ok()) << reader.status().message();

  // Each segment lands one page apart from the other, with guard pages around them that must stay untouched.
  CallerMemory memory(kPage + 8 * kPage + kPage + 3 * kBlockBytes + kPage, '\x5c');
  ReadJob job = MakeRead("f", segments, written.value());
  job.segments[0].arena_offset = kPage;
  job.segments[1].arena_offset = kPage + 8 * kPage + kPage;
  const Status status = (*reader)->ReadInto(job, memory.data(), memory.size(), nullptr);
  ASSERT_TRUE(status.ok()) << status.message();
  for (size_t i = 0; i < segments.size(); ++i) {
    EXPECT_EQ(std::string(memory.data() + job.segments[i].arena_offset, segments[i].length), data[i]) << i;
  }
  for (const uint64_t guard : {uint64_t{0}, 9 * kPage, memory.size() - kPage}) {
    EXPECT_EQ(std::string(memory.data() + guard, kPage), std::string(kPage, '\x5c')) << "guard page at " << guard;
  }
  EXPECT_EQ((*reader)->backend_name().rfind(KindName(GetParam()), 0), 0u) << (*reader)->backend_name();
}

TEST_P(FileJobsTest, ReadIntoCallerMemoryReportsTheBlockOfAFlippedByte) {
  const std::vector<FileSegment> segments = Layout({4 * kBlockBytes});
  StageAll(segments, 23);
  Result<WriteResult> written = executor_->Write(MakeWrite("f", segments, true, true));
  ASSERT_TRUE(written.ok()) << written.status().message();
  const int fd = open(Path("f").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const char byte = 0x11;
  ASSERT_EQ(pwrite(fd, &byte, 1, 3 * kBlockBytes + 17), 1);
  close(fd);
  Result<std::unique_ptr<FileJobExecutor>> reader = FileJobExecutor::CreateForCallerMemory(Tuning());
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  CallerMemory memory(4 * kBlockBytes, 0);
  ReadJob job = MakeRead("f", segments, written.value());
  job.segments[0].arena_offset = 0;
  ReadFailure failure;
  const Status status = (*reader)->ReadInto(job, memory.data(), memory.size(), &failure);
  EXPECT_EQ(status.code(), Code::kCorrupt) << status.message();
  EXPECT_NE(status.message().find(Path("f")), std::string::npos) << status.message();
  EXPECT_EQ(failure.block, 3u);
}

// Direct I/O rounds lengths up to 4096 bytes: into caller memory that would overwrite what follows a segment, so a
// segment whose length is not a multiple of 4096 is refused where the memory has no room for its last page whole,
// as are unaligned memory and anything past its end. An executor for caller memory has no arena: its arena jobs are
// refused and create no file.
TEST_P(FileJobsTest, ReadIntoRefusesWhatWouldReachPastItsMemoryAndArenaJobsOfACallerMemoryExecutor) {
  const std::vector<FileSegment> segments = Layout({3 * kPage});
  StageAll(segments, 25);
  Result<WriteResult> written = executor_->Write(MakeWrite("f", segments, true, true));
  ASSERT_TRUE(written.ok()) << written.status().message();
  Result<std::unique_ptr<FileJobExecutor>> reader = FileJobExecutor::CreateForCallerMemory(Tuning());
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  CallerMemory memory(4 * kPage, 0);
  ReadJob job = MakeRead("f", segments, written.value());
  job.segments[0].arena_offset = 0;

  ReadJob ragged = job;
  ragged.segments[0].length = 3 * kPage - 8;
  ragged.expected_checksums[0] = {};
  EXPECT_EQ((*reader)->ReadInto(ragged, memory.data(), 3 * kPage - 8, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ((*reader)->ReadInto(job, memory.data() + 8, memory.size() - 8, nullptr).code(), Code::kInvalidArgument);
  ReadJob beyond = job;
  beyond.segments[0].arena_offset = 2 * kPage;
  EXPECT_EQ((*reader)->ReadInto(beyond, memory.data(), memory.size(), nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(std::string(memory.data(), memory.size()), std::string(memory.size(), '\0'));

  EXPECT_EQ((*reader)->Read(job, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ((*reader)->Write(MakeWrite("g", segments, true, true)).status().code(), Code::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(Path("g")));
}

// A save written in place: each segment from a buffer of its own, in this process, with the same checksums and file
// bytes as from the arena; a segment whose length is not a multiple of 4096 comes from memory padded with zeros,
// and the file is cut to its final size.
TEST_P(FileJobsTest, WriteFromCallerMemoryWritesEachSegmentFromItsOwnBufferWithItsChecksums) {
  const std::vector<FileSegment> segments = Layout({8 * kPage, 3 * kBlockBytes, 5000});
  const std::vector<std::string> data = StageAll(segments, 31);
  std::vector<std::unique_ptr<CallerMemory>> buffers;
  std::vector<const char*> sources;
  for (size_t i = 0; i < segments.size(); ++i) {
    buffers.push_back(std::make_unique<CallerMemory>(RoundUp(segments[i].length), '\0'));
    std::memcpy(buffers.back()->data(), data[i].data(), data[i].size());
    sources.push_back(buffers.back()->data());
  }
  Result<std::unique_ptr<FileJobExecutor>> writer = FileJobExecutor::CreateForCallerMemory(Tuning());
  ASSERT_TRUE(writer.ok()) << writer.status().message();
  WriteJob job = MakeWrite("f", segments, true, true);
  for (FileSegment& segment : job.segments) segment.arena_offset = 7 * kPage;  // not used: the sources say
  Result<WriteResult> written = (*writer)->WriteFrom(job, sources);
  ASSERT_TRUE(written.ok()) << written.status().message();

  ExpectFileHolds("f", segments, data, written.value());
  const Status read = executor_->Read(MakeRead("f", segments, written.value()), nullptr);
  EXPECT_TRUE(read.ok()) << read.message();
}

// The alignment statx reports for direct I/O on `path`'s memory, or 0 where it says none.
uint64_t StatxMemoryAlignment(const std::string& path) {
#ifdef STATX_DIOALIGN
  struct statx info;
  std::memset(&info, 0, sizeof info);
  if (statx(AT_FDCWD, path.c_str(), 0, STATX_DIOALIGN, &info) == 0 && (info.stx_mask & STATX_DIOALIGN) != 0) {
    return info.stx_dio_mem_align;
  }
#endif
  return 0;
}

// A prepared file says what its sources need: with direct I/O, the memory alignment the kernel reports for it and
// whole pages; buffered (tmpfs), nothing. A prepared file then takes sources aligned that way, and its last bytes
// straight from memory when buffered.
TEST_P(FileJobsTest, PrepareWriteSaysWhatAFileTakesFromMemoryAndWriteFromHoldsToIt) {
  const testing::TempDir shm("file-jobs", "/dev/shm");
  for (const std::string& folder : {dir(), shm.path()}) {
    Result<std::unique_ptr<FileJobExecutor>> writer = FileJobExecutor::CreateForCallerMemory(Tuning());
    ASSERT_TRUE(writer.ok()) << writer.status().message();
    WriteJob job = MakeWrite("f", Layout({2 * kPage + 100}), true, false);
    job.path = folder + "/f";
    Result<SourceRules> rules = (*writer)->PrepareWrite(job);
    ASSERT_TRUE(rules.ok()) << rules.status().message();
    if (IsTmpfs(folder)) {
      EXPECT_EQ(rules->alignment, 1u) << folder;
      EXPECT_FALSE(rules->whole_pages) << folder;
    } else {
      const uint64_t reported = StatxMemoryAlignment(job.path);
      EXPECT_EQ(rules->alignment, reported != 0 ? reported : kPage) << folder;
      EXPECT_TRUE(rules->whole_pages) << folder;
    }
    // A source at the first address the rules allow past a page boundary; buffered, its last bytes from memory too.
    CallerMemory memory(4 * kPage, '\0');
    const uint64_t offset = rules->alignment < kPage ? rules->alignment : 0;
    std::string data(job.segments[0].length, '\0');
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 13 + 1);
    std::memcpy(memory.data() + offset, data.data(), data.size());
    job.create = false;
    job.finish = true;
    if (rules->whole_pages) job.segments[0].length = job.final_size = 2 * kPage;  // direct: whole pages only
    Result<WriteResult> written = (*writer)->WriteFrom(job, {memory.data() + offset});
    ASSERT_TRUE(written.ok()) << written.status().message();
    EXPECT_TRUE(ReadWhole(job.path) == data.substr(0, job.segments[0].length)) << folder;
  }
}

// Direct I/O needs aligned memory, and every segment needs its source: anything else is refused before the file
// is created.
TEST_P(FileJobsTest, WriteFromRefusesUnalignedOrMissingSourcesAndCreatesNothing) {
  const std::vector<FileSegment> segments = Layout({2 * kPage, 2 * kPage});
  CallerMemory memory(5 * kPage, 'x');
  Result<std::unique_ptr<FileJobExecutor>> writer = FileJobExecutor::CreateForCallerMemory(Tuning());
  ASSERT_TRUE(writer.ok()) << writer.status().message();
  const WriteJob job = MakeWrite("f", segments, true, true);

  const Result<WriteResult> unaligned = (*writer)->WriteFrom(job, {memory.data(), memory.data() + 2 * kPage + 8});
  EXPECT_EQ(unaligned.status().code(), Code::kInvalidArgument);
  EXPECT_NE(unaligned.status().message().find("segment 1"), std::string::npos) << unaligned.status().message();
  const Result<WriteResult> missing = (*writer)->WriteFrom(job, {memory.data()});
  EXPECT_EQ(missing.status().code(), Code::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("2 segments but 1 sources"), std::string::npos)
      << missing.status().message();
  EXPECT_FALSE(std::filesystem::exists(Path("f")));
  // The same job from aligned sources goes through.
  EXPECT_TRUE((*writer)->WriteFrom(job, {memory.data(), memory.data() + 2 * kPage}).ok());
}

TEST_P(FileJobsTest, DiskFileSystemUsesDirectIo) {
  if (IsTmpfs(dir())) GTEST_SKIP() << dir() << " is on tmpfs, which has no direct I/O";
  const std::vector<FileSegment> segments = Layout({kPage});
  StageAll(segments, 2);
  ASSERT_TRUE(executor_->Write(MakeWrite("f", segments, true, true)).ok());
  EXPECT_NE(executor_->backend_name().find("+O_DIRECT"), std::string::npos) << executor_->backend_name();
}

TEST_P(FileJobsTest, TmpfsFallsBackToBufferedIo) {
  if (access("/dev/shm", W_OK) != 0) GTEST_SKIP() << "no writable /dev/shm: " << std::strerror(errno);
  const testing::TempDir shm("file-jobs", "/dev/shm");
  const std::string path = shm.Path("f");
  const std::vector<FileSegment> segments = Layout({33333, 2 * kPage});
  const std::vector<std::string> data = StageAll(segments, 9);
  WriteJob job = MakeWrite("unused", segments, true, true);
  job.path = path;
  Result<WriteResult> written = executor_->Write(job);
  const std::string name_after_write = executor_->backend_name();
  const std::string file = ReadWhole(path);
  ReadJob read = MakeRead("unused", segments, written.ok() ? written.value() : WriteResult{});
  read.root = shm.path();
  read.path = path;
  const Status read_status = executor_->Read(read, nullptr);

  ASSERT_TRUE(written.ok()) << written.status().message();
  EXPECT_NE(name_after_write.find("+buffered"), std::string::npos) << name_after_write;
  EXPECT_EQ(file.substr(segments[1].file_offset), data[1]);
  ASSERT_TRUE(read_status.ok()) << read_status.message();
  EXPECT_EQ(ArenaBytes(read.segments[0].arena_offset, segments[0].length), data[0]);
}

TEST_P(FileJobsTest, FullFileSystemIsNoSpaceNamingTheFile) {
  const std::string mount_point = Path("small");
  ASSERT_EQ(mkdir(mount_point.c_str(), 0700), 0);
  if (mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a 1 MiB tmpfs: " << std::strerror(errno);
  }
  const std::vector<FileSegment> segments = Layout({2 * kMiB});
  StageAll(segments, 4);
  WriteJob job = MakeWrite("unused", segments, true, true);
  job.path = mount_point + "/f";
  Result<WriteResult> written = executor_->Write(job);
  umount2(mount_point.c_str(), MNT_DETACH);

  ASSERT_FALSE(written.ok());
  EXPECT_EQ(written.status().code(), Code::kNoSpace) << written.status().message();
  EXPECT_NE(written.status().message().find(job.path), std::string::npos) << written.status().message();
}

TEST_P(FileJobsTest, CreateOfExistingFileFails) {
  std::ofstream(Path("f")) << "already here";
  const std::vector<FileSegment> segments = Layout({kPage});
  StageAll(segments, 6);
  Result<WriteResult> written = executor_->Write(MakeWrite("f", segments, true, true));
  ASSERT_FALSE(written.ok());
  EXPECT_EQ(written.status().code(), Code::kAlreadyExists) << written.status().message();
  EXPECT_EQ(ReadWhole(Path("f")), "already here");
}

// A memory-tier save writes over a file the agent recycled: the same inode (its pages reused), longer than the new
// contents before, and exactly them after.
TEST_P(FileJobsTest, CreateThatMayOverwriteWritesOverAnExistingFileAndCutsItToItsSize) {
  std::ofstream(Path("f")) << std::string(3 * kPage + 100, 'r');
  struct stat before;
  ASSERT_EQ(stat(Path("f").c_str(), &before), 0);
  const std::vector<FileSegment> segments = Layout({5000, 3000});
  const std::vector<std::string> data = StageAll(segments, 21);
  WriteJob job = MakeWrite("f", segments, true, true);
  job.overwrite_existing = true;
  Result<WriteResult> written = executor_->Write(job);
  ASSERT_TRUE(written.ok()) << written.status().message();
  ExpectFileHolds("f", segments, data, *written);
  struct stat after;
  ASSERT_EQ(stat(Path("f").c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
}

TEST_P(FileJobsTest, CreateThatMayOverwriteStillRefusesALink) {
  std::ofstream(Path("target")) << "elsewhere";
  ASSERT_EQ(symlink(Path("target").c_str(), Path("f").c_str()), 0);
  const std::vector<FileSegment> segments = Layout({kPage});
  StageAll(segments, 22);
  WriteJob job = MakeWrite("f", segments, true, true);
  job.overwrite_existing = true;
  EXPECT_FALSE(executor_->Write(job).ok());
  EXPECT_EQ(ReadWhole(Path("target")), "elsewhere");
}

TEST_P(FileJobsTest, LaterJobForAFileNeverCreatedIsNotFound) {
  const std::vector<FileSegment> segments = Layout({kPage});
  StageAll(segments, 8);
  Result<WriteResult> written = executor_->Write(MakeWrite("missing", segments, false, true));
  ASSERT_FALSE(written.ok());
  EXPECT_EQ(written.status().code(), Code::kNotFound) << written.status().message();
}

TEST_P(FileJobsTest, UnalignedOrOutOfArenaSegmentsAreRefused) {
  std::vector<FileSegment> unaligned = Layout({kPage});
  unaligned[0].file_offset = 100;
  EXPECT_EQ(executor_->Write(MakeWrite("a", unaligned, true, true)).status().code(), Code::kInvalidArgument);
  const std::vector<FileSegment> outside = {FileSegment{0, arena_->capacity() - kPage, 2 * kPage}};
  EXPECT_EQ(executor_->Write(MakeWrite("b", outside, true, true)).status().code(), Code::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(Path("a")));
}

TEST_P(FileJobsTest, ReadWithWrongChecksumCountIsRefused) {
  ReadJob job;
  job.root = dir();
  job.path = Path("f");
  job.block_size = kBlockBytes;
  job.segments = Layout({3 * kBlockBytes});
  job.expected_checksums = {{1, 2}};
  EXPECT_EQ(executor_->Read(job, nullptr).code(), Code::kInvalidArgument);
}

TEST_P(FileJobsTest, SixtyFourMiBRoundTrip) {
  const std::vector<FileSegment> segments = Layout({40 * kMiB + 123, 24 * kMiB});
  const std::vector<std::string> data = StageAll(segments, 13);
  Result<WriteResult> written = executor_->Write(MakeWrite("big", segments, true, true));
  ASSERT_TRUE(written.ok()) << written.status().message();
  const ReadJob read = MakeRead("big", segments, written.value());
  const Status status = executor_->Read(read, nullptr);
  ASSERT_TRUE(status.ok()) << status.message();
  for (size_t i = 0; i < segments.size(); ++i) {
    EXPECT_TRUE(ArenaBytes(read.segments[i].arena_offset, segments[i].length) == data[i]) << "segment " << i;
  }
}

TEST_P(FileJobsTest, AbandonFilesClosesTheFilesLeftOpenInsideTheDirectoryOnly) {
  for (const char* sub : {"save", "save/data", "save-next"}) ASSERT_EQ(mkdir(Path(sub).c_str(), 0700), 0) << sub;
  const std::vector<FileSegment> segments = Layout({kPage});
  StageAll(segments, 12);
  for (const char* name : {"save/data/0-0.bin", "save/data/0-1.bin", "save-next/0-0.bin"}) {
    const Result<WriteResult> written = executor_->Write(MakeWrite(name, segments, true, false));
    ASSERT_TRUE(written.ok()) << name << ": " << written.status().message();
  }
  ASSERT_EQ(DescriptorsInside(Path("save")), 2);

  EXPECT_EQ(executor_->AbandonFiles(Path("save")), 2u);
  EXPECT_EQ(DescriptorsInside(Path("save")), 0);
  EXPECT_EQ(DescriptorsInside(Path("save-next")), 1);
  EXPECT_EQ(executor_->AbandonFiles(""), 0u);
}

TEST_P(FileJobsTest, InjectedEioFailsTheWriteAsIoNamingTheFile) {
  if (!fault::kCompiledIn) GTEST_SKIP() << "a build without CKPT_FAULT_INJECTION has no fault hooks";
  const std::vector<FileSegment> segments = Layout({3 * kRequestBytes});
  StageAll(segments, 20);
  const WriteJob job = MakeWrite("failing-disk.bin", segments, true, true);
  const ScopedEnv eio(fault::kEioPathVar, "failing-disk");
  const Result<WriteResult> written = executor_->Write(job);
  ASSERT_FALSE(written.ok());
  EXPECT_EQ(written.status().code(), Code::kIo) << written.status().message();
  EXPECT_NE(written.status().message().find(job.path), std::string::npos) << written.status().message();
  EXPECT_NE(written.status().message().find(std::strerror(EIO)), std::string::npos) << written.status().message();
}

TEST_P(FileJobsTest, InjectedEioFailsTheReadAsIoNamingTheFile) {
  if (!fault::kCompiledIn) GTEST_SKIP() << "a build without CKPT_FAULT_INJECTION has no fault hooks";
  const std::vector<FileSegment> segments = Layout({3 * kRequestBytes});
  StageAll(segments, 21);
  Result<WriteResult> written = executor_->Write(MakeWrite("failing-disk.bin", segments, true, true));
  ASSERT_TRUE(written.ok()) << written.status().message();
  const ReadJob read = MakeRead("failing-disk.bin", segments, written.value());
  const ScopedEnv eio(fault::kEioPathVar, "failing-disk");
  const Status status = executor_->Read(read, nullptr);
  EXPECT_EQ(status.code(), Code::kIo) << status.message();
  EXPECT_NE(status.message().find(read.path), std::string::npos) << status.message();
}

// Every attempt moves at most one page: each request of 16 pages comes back short 15 times and must be resumed.
TEST_P(FileJobsTest, WritesAndReadsCutShortAreResumedUntilWhole) {
  if (!fault::kCompiledIn) GTEST_SKIP() << "a build without CKPT_FAULT_INJECTION has no fault hooks";
  const ScopedEnv short_transfers(fault::kShortTransferVar, std::to_string(kPage));
  const std::vector<FileSegment> segments = Layout({100000, 3 * kRequestBytes + 5});
  const std::vector<std::string> data = StageAll(segments, 22);
  Result<WriteResult> written = executor_->Write(MakeWrite("f", segments, true, true));
  ASSERT_TRUE(written.ok()) << written.status().message();
  const std::string file = ReadWhole(Path("f"));
  ASSERT_EQ(file.size(), segments.back().file_offset + segments.back().length);
  for (size_t i = 0; i < segments.size(); ++i) {
    EXPECT_TRUE(file.substr(segments[i].file_offset, segments[i].length) == data[i]) << "segment " << i;
  }
  const ReadJob read = MakeRead("f", segments, written.value());
  const Status status = executor_->Read(read, nullptr);
  ASSERT_TRUE(status.ok()) << status.message();
  for (size_t i = 0; i < segments.size(); ++i) {
    EXPECT_TRUE(ArenaBytes(read.segments[i].arena_offset, segments[i].length) == data[i]) << "segment " << i;
  }
}

// Buffered files accept transfers of any length: short ones that end mid-page are resumed where they stopped.
TEST_P(FileJobsTest, UnalignedShortTransfersOfBufferedFilesAreResumedWhereTheyStopped) {
  if (!fault::kCompiledIn) GTEST_SKIP() << "a build without CKPT_FAULT_INJECTION has no fault hooks";
  Result<std::unique_ptr<FileJobExecutor>> buffered = MakeExecutor(/*direct=*/false);
  ASSERT_TRUE(buffered.ok()) << buffered.status().message();
  const ScopedEnv short_transfers(fault::kShortTransferVar, "1000");
  const std::vector<FileSegment> segments = Layout({kRequestBytes + 77});
  const std::vector<std::string> data = StageAll(segments, 23);
  Result<WriteResult> written = buffered.value()->Write(MakeWrite("f", segments, true, true));
  ASSERT_TRUE(written.ok()) << written.status().message();
  EXPECT_TRUE(ReadWhole(Path("f")) == data[0]);
  const ReadJob read = MakeRead("f", segments, written.value());
  const Status status = buffered.value()->Read(read, nullptr);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(ArenaBytes(read.segments[0].arena_offset, segments[0].length) == data[0]);
}

INSTANTIATE_TEST_SUITE_P(Backends, FileJobsTest, ::testing::Values(IoBackendKind::kIoUring, IoBackendKind::kPwrite),
                         [](const ::testing::TestParamInfo<IoBackendKind>& info) { return KindName(info.param); });

class FileJobExecutorCreateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<StagingArena>> arena = StagingArena::Create(kMinArenaBytes);
    ASSERT_TRUE(arena.ok()) << arena.status().message();
    arena_ = std::move(arena).value();
  }
  Result<std::unique_ptr<FileJobExecutor>> Create(const IoTuning& tuning) {
    return FileJobExecutor::Create(arena_->data(), arena_->capacity(), tuning);
  }
  std::unique_ptr<StagingArena> arena_;
};

TEST_F(FileJobExecutorCreateTest, AutoFallsBackToPwriteOnlyWhenIoUringIsRefused) {
  IoTuning uring;
  uring.backend = IoBackendKind::kIoUring;
  const bool uring_allowed = Create(uring).ok();
  Result<std::unique_ptr<FileJobExecutor>> automatic = Create(IoTuning{});
  ASSERT_TRUE(automatic.ok()) << automatic.status().message();
  EXPECT_EQ(automatic.value()->backend_name().rfind(uring_allowed ? "io_uring" : "pwrite", 0), 0u)
      << automatic.value()->backend_name();
}

TEST_F(FileJobExecutorCreateTest, RequestSizeThatIsNotAMultipleOfTheAlignmentIsRefused) {
  IoTuning tuning;
  tuning.request_bytes = 1000;
  EXPECT_EQ(Create(tuning).status().code(), Code::kInvalidArgument);
}

TEST_F(FileJobExecutorCreateTest, ZeroQueueDepthIsRefused) {
  IoTuning tuning;
  tuning.queue_depth = 0;
  EXPECT_EQ(Create(tuning).status().code(), Code::kInvalidArgument);
}

// The retry rules both backends share, driven with results no healthy disk produces on demand.
class ApplyAttemptTest : public ::testing::Test {
 protected:
  IoTarget Target(IoDirection direction, bool direct) const { return IoTarget{direction, 3, direct, &path_}; }
  IoRequest Request() const {
    IoRequest request;
    request.length = 3 * kPage;
    request.file_offset = 8 * kPage;
    return request;
  }
  std::string path_ = "/data/0-0.bin";
};

TEST_F(ApplyAttemptTest, ShortDirectWriteResumesAtTheLastAlignedByte) {
  IoRequest request = Request();
  int error = 0;
  EXPECT_EQ(ApplyAttempt(Target(IoDirection::kWrite, true), request, 5000, &error), NextStep::kResubmit);
  EXPECT_EQ(request.transferred, kPage);
}

TEST_F(ApplyAttemptTest, ShortBufferedWriteResumesWhereItStopped) {
  IoRequest request = Request();
  int error = 0;
  EXPECT_EQ(ApplyAttempt(Target(IoDirection::kWrite, false), request, 5000, &error), NextStep::kResubmit);
  EXPECT_EQ(request.transferred, 5000u);
  EXPECT_EQ(ApplyAttempt(Target(IoDirection::kWrite, false), request, 3 * kPage - 5000, &error), NextStep::kDone);
}

TEST_F(ApplyAttemptTest, ZeroByteReadIsEndOfFile) {
  IoRequest request = Request();
  int error = 0;
  EXPECT_EQ(ApplyAttempt(Target(IoDirection::kRead, true), request, 0, &error), NextStep::kDone);
  EXPECT_EQ(request.transferred, 0u);
}

TEST_F(ApplyAttemptTest, UnalignedShortDirectReadIsEndOfFile) {
  IoRequest request = Request();
  int error = 0;
  EXPECT_EQ(ApplyAttempt(Target(IoDirection::kRead, true), request, 5000, &error), NextStep::kDone);
  EXPECT_EQ(request.transferred, 5000u);
}

TEST_F(ApplyAttemptTest, EagainIsRetriedButNotForever) {
  IoRequest request = Request();
  int error = 0;
  int attempts = 1;
  while (ApplyAttempt(Target(IoDirection::kWrite, true), request, -EAGAIN, &error) == NextStep::kResubmit) {
    ++attempts;
    ASSERT_LT(attempts, 1000000);
  }
  EXPECT_GT(attempts, 1);
  EXPECT_EQ(error, EAGAIN);
}

TEST_F(ApplyAttemptTest, ZeroByteWriteIsRetriedButNotForever) {
  IoRequest request = Request();
  int error = 0;
  int attempts = 1;
  while (ApplyAttempt(Target(IoDirection::kWrite, false), request, 0, &error) == NextStep::kResubmit) {
    ++attempts;
    ASSERT_LT(attempts, 1000000);
  }
  EXPECT_GT(attempts, 1);
  EXPECT_EQ(error, EIO);
}

TEST_F(ApplyAttemptTest, OtherErrorsFailAtOnce) {
  IoRequest request = Request();
  int error = 0;
  EXPECT_EQ(ApplyAttempt(Target(IoDirection::kWrite, true), request, -EIO, &error), NextStep::kFail);
  EXPECT_EQ(error, EIO);
}

TEST_F(ApplyAttemptTest, NoSpaceErrorNamesTheFileAndOffset) {
  IoRequest request = Request();
  request.transferred = kPage;
  const Status status = TransferError(Target(IoDirection::kWrite, true), request, EDQUOT);
  EXPECT_EQ(status.code(), Code::kNoSpace);
  EXPECT_NE(status.message().find(path_), std::string::npos) << status.message();
  EXPECT_NE(status.message().find(std::to_string(9 * kPage)), std::string::npos) << status.message();
}

// Two threads read into or write from the caller's memory where the process may use 4 cores or more; one below,
// where a second finds no core of its own.
TEST(CallerMemoryThreadsTest, OneBelowFourCoresAndTwoFromFourOn) {
  EXPECT_EQ(CallerMemoryThreadsFor(1), 1u);
  EXPECT_EQ(CallerMemoryThreadsFor(2), 1u);
  EXPECT_EQ(CallerMemoryThreadsFor(3), 1u);
  EXPECT_EQ(CallerMemoryThreadsFor(4), 2u);
  EXPECT_EQ(CallerMemoryThreadsFor(192), 2u);
}

}  // namespace
}  // namespace ckpt::io

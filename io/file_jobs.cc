// The file-job executor: validates a job, opens its file (O_DIRECT when the file system really does direct I/O),
// splits its segments into aligned requests for the backend, hashes written blocks while the writes are in flight
// and verifies read blocks. One job at a time: the executor is not thread-safe (a worker runs jobs in order).
// Jobs on S3 objects ("s3://..." paths) pass it by: Create hands them to io/s3_file_jobs.h's executor.
#include "io/file_jobs.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "common/os_error.h"
#include "io/block_checksums.h"
#include "io/checksum.h"
#include "io/coded_file_jobs.h"
#include "io/confined_open.h"
#include "io/io_backend.h"
#include "io/s3_file_jobs.h"

namespace ckpt::io {
namespace {

constexpr uint64_t kMaxRequestBytes = 1ull << 30;  // one read/write transfers at most ~2 GiB; stay well below
constexpr uint32_t kMaxQueueDepth = 4096;
constexpr uint32_t kMaxPwriteThreads = 256;
constexpr mode_t kDataFileMode = 0644;

uint64_t RoundUp(uint64_t value, uint64_t granule) { return (value + granule - 1) / granule * granule; }

Status ValidateTuning(const IoTuning& tuning) {
  if (tuning.backend != IoBackendKind::kAuto && tuning.backend != IoBackendKind::kIoUring &&
      tuning.backend != IoBackendKind::kPwrite) {
    return InvalidArgument("unknown I/O backend " + std::to_string(static_cast<int32_t>(tuning.backend)));
  }
  if (tuning.request_bytes < kDirectAlignment || tuning.request_bytes > kMaxRequestBytes ||
      tuning.request_bytes % kDirectAlignment != 0) {
    return InvalidArgument("I/O request size " + std::to_string(tuning.request_bytes) +
                           " must be a multiple of 4096 between 4096 and " + std::to_string(kMaxRequestBytes));
  }
  if (tuning.queue_depth == 0 || tuning.queue_depth > kMaxQueueDepth) {
    return InvalidArgument("I/O queue depth " + std::to_string(tuning.queue_depth) + " must be between 1 and " +
                           std::to_string(kMaxQueueDepth));
  }
  if (tuning.pwrite_threads == 0 || tuning.pwrite_threads > kMaxPwriteThreads) {
    return InvalidArgument("pwrite thread count " + std::to_string(tuning.pwrite_threads) + " must be between 1 and " +
                           std::to_string(kMaxPwriteThreads));
  }
  return Status::Ok();
}

// Refuses what would make the I/O unaligned, overlap, or reach outside the arena: a job is bad input until checked.
Status ValidateSegments(const std::string& path, const std::vector<FileSegment>& segments, uint64_t block_size,
                        uint64_t arena_size) {
  const std::string job = "I/O job for " + Quoted(path);
  if (block_size == 0) return InvalidArgument(job + ": checksum block size is 0");
  uint64_t previous_end = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const FileSegment& s = segments[i];
    const std::string segment = job + ": segment " + std::to_string(i) + " (file offset " +
                                std::to_string(s.file_offset) + ", arena offset " + std::to_string(s.arena_offset) +
                                ", length " + std::to_string(s.length) + ")";
    if (s.file_offset % kDirectAlignment != 0 || s.arena_offset % kDirectAlignment != 0) {
      return InvalidArgument(segment + " is not 4096-byte aligned");
    }
    if (s.length > UINT64_MAX - kDirectAlignment || s.file_offset > UINT64_MAX - RoundUp(s.length, kDirectAlignment)) {
      return InvalidArgument(segment + " is too long");
    }
    if (s.arena_offset > arena_size || RoundUp(s.length, kDirectAlignment) > arena_size - s.arena_offset) {
      return InvalidArgument(segment + " reaches past the arena of " + std::to_string(arena_size) + " bytes");
    }
    if (s.file_offset < previous_end) {
      return InvalidArgument(segment + " overlaps or precedes the segment before it");
    }
    previous_end = s.file_offset + s.length;
  }
  return Status::Ok();
}

// Whether O_DIRECT on this descriptor bypasses the page cache at our 4096-byte alignment. tmpfs accepts O_DIRECT
// since Linux 6.6 but has no device below it; statx reports no direct-I/O alignment there. Kernels before 6.1 report
// no alignment for any file system, so then only tmpfs is ruled out. Where it works, *memory_alignment is what the
// kernel says direct I/O needs of memory (a device's DMA alignment: 512 bytes on virtio and loop disks, often 4 on
// NVMe drives), else 4096.
bool DirectIoWorks(int fd, uint64_t* memory_alignment) {
  *memory_alignment = kDirectAlignment;
#ifdef STATX_DIOALIGN
  struct statx info;
  std::memset(&info, 0, sizeof info);
  if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &info) == 0 && (info.stx_mask & STATX_DIOALIGN) != 0) {
    const uint32_t memory = info.stx_dio_mem_align;
    const uint32_t offset = info.stx_dio_offset_align;
    if (memory == 0 || offset == 0 || kDirectAlignment % memory != 0 || kDirectAlignment % offset != 0) return false;
    *memory_alignment = memory;
    return true;
  }
#endif
  struct statfs fs;
  return !(fstatfs(fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC);
}

struct OpenFile {
  int fd = -1;
  bool direct = false;
  uint64_t memory_alignment = 1;  // of the memory a transfer uses: the device's for direct I/O, none for buffered
};

// `fd`, opened with O_DIRECT if `direct`, with O_DIRECT cleared where the file system does not really do it.
Result<OpenFile> KeepDirectWhereItWorks(int fd, bool direct, const std::string& action) {
  uint64_t memory_alignment = kDirectAlignment;
  if (direct && !DirectIoWorks(fd, &memory_alignment)) {
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_DIRECT) != 0) {
      const int err = errno;
      close(fd);
      return OsError(action + " (clearing O_DIRECT)", err);
    }
    direct = false;
  }
  return OpenFile{fd, direct, direct ? memory_alignment : 1};
}

// Opens `path` with `flags`, adding O_DIRECT when wanted and the file system does direct I/O, else buffered.
Result<OpenFile> OpenData(const std::string& path, int flags, bool want_direct, const std::string& action) {
  flags |= O_CLOEXEC;
  int fd = open(path.c_str(), flags | (want_direct ? O_DIRECT : 0), kDataFileMode);
  bool direct = want_direct;
  if (fd < 0 && want_direct && errno == EINVAL) {
    // Refused O_DIRECT (ramfs, tmpfs before 6.6). With O_EXCL the file exists now, created by this very call,
    // since an existing file fails with EEXIST before O_DIRECT is checked: reopen it without O_EXCL.
    fd = open(path.c_str(), flags & ~O_EXCL, kDataFileMode);
    direct = false;
  }
  if (fd < 0) return OsError(action, errno);
  return KeepDirectWhereItWorks(fd, direct, action);
}

// Whether `path` names something below `directory` (not the directory itself, nor a sibling sharing its prefix).
bool IsInside(const std::string& path, const std::string& directory) {
  if (directory.empty()) return false;
  const size_t length = directory.back() == '/' ? directory.size() - 1 : directory.size();
  return path.size() > length + 1 && path.compare(0, length, directory, 0, length) == 0 && path[length] == '/';
}

// Opens a read job's file beneath its checkpoint directory only (OpenBeneath), with O_DIRECT when wanted and the
// file system does direct I/O, else buffered.
Result<OpenFile> OpenForReading(const ReadJob& job, bool want_direct) {
  if (job.root.empty() || !IsInside(job.path, job.root)) {
    return InvalidArgument("read job for " + Quoted(job.path) + " is not beneath its root " + Quoted(job.root));
  }
  const size_t name_start = job.root.back() == '/' ? job.root.size() : job.root.size() + 1;
  const std::string name = job.path.substr(name_start);
  Result<int> fd = OpenBeneath(job.root, name, O_RDONLY | (want_direct ? O_DIRECT : 0));
  bool direct = want_direct;
  if (!fd.ok() && want_direct && fd.status().code() == Code::kInvalidArgument) {  // O_DIRECT refused
    fd = OpenBeneath(job.root, name, O_RDONLY);
    direct = false;
  }
  if (!fd.ok()) return fd.status().WithContext("cannot open for reading");
  return KeepDirectWhereItWorks(*fd, direct, "cannot open for reading " + Quoted(job.path));
}

// Linux releases the descriptor even when close() fails; retrying on EINTR could close another thread's file.
Status CloseData(int fd, const std::string& path) {
  if (close(fd) != 0 && errno != EINTR) return OsError("cannot close " + Quoted(path), errno);
  return Status::Ok();
}

// A job's segments cut into requests of at most request_bytes. Direct I/O lengths are rounded up to 4096: the
// arena holds zeros up to each boundary (writes) or has room for them (reads).
struct RequestPlan {
  std::vector<IoRequest> requests;
  std::vector<size_t> segment;   // the segment each request belongs to
  std::vector<uint64_t> needed;  // bytes of the request inside its segment, before rounding
};

// Where each segment's bytes are: at its offset in `memory`.
std::vector<const char*> SegmentStarts(const char* memory, const std::vector<FileSegment>& segments) {
  std::vector<const char*> starts;
  starts.reserve(segments.size());
  for (const FileSegment& s : segments) starts.push_back(memory + s.arena_offset);
  return starts;
}

// `starts[i]`: where segment i's bytes are (or go, for reads).
RequestPlan PlanRequests(const std::vector<const char*>& starts, const std::vector<FileSegment>& segments,
                         uint64_t request_bytes, bool direct) {
  RequestPlan plan;
  for (size_t i = 0; i < segments.size(); ++i) {
    const FileSegment& s = segments[i];
    for (uint64_t done = 0; done < s.length; done += request_bytes) {
      const uint64_t piece = std::min(request_bytes, s.length - done);
      IoRequest request;
      // A read's memory is writable; the backends take one pointer type for both directions.
      request.buffer = const_cast<char*>(starts[i]) + done;
      request.length = direct ? RoundUp(piece, kDirectAlignment) : piece;
      request.file_offset = s.file_offset + done;
      plan.requests.push_back(request);
      plan.segment.push_back(i);
      plan.needed.push_back(piece);
    }
  }
  return plan;
}

// Hashes a write job's blocks one at a time, so that a backend can interleave the hashing with its I/O.
class BlockHasher {
 public:
  BlockHasher(const std::vector<const char*>& starts, const std::vector<FileSegment>& segments, uint64_t block_size)
      : starts_(starts), segments_(segments), block_size_(block_size) {
    result_.checksums.resize(segments.size());
    for (size_t i = 0; i < segments.size(); ++i) {
      result_.checksums[i].reserve(BlockCount(segments[i].length, block_size));
    }
  }

  // Hashes the next block, if any remains.
  SpareStep HashNext() {
    while (segment_ < segments_.size() && offset_ >= segments_[segment_].length) {
      ++segment_;
      offset_ = 0;
    }
    if (segment_ == segments_.size()) return SpareStep::kDone;
    const FileSegment& s = segments_[segment_];
    const uint64_t length = std::min(block_size_, s.length - offset_);
    result_.checksums[segment_].push_back(Checksum(starts_[segment_] + offset_, length));
    offset_ += length;
    return SpareStep::kMore;
  }

  WriteResult Take() {
    while (HashNext() == SpareStep::kMore) {
    }
    return std::move(result_);
  }

 private:
  const std::vector<const char*>& starts_;
  const std::vector<FileSegment>& segments_;
  uint64_t block_size_;
  size_t segment_ = 0;
  uint64_t offset_ = 0;
  WriteResult result_;
};

// Checks a read job's blocks against their checksums in the plan's order, each as soon as the requests bringing it
// have completed, so that hashing overlaps the reads instead of following them: on the RAM disk a 1 GiB load took
// 0.17-0.18 CPU seconds instead of 0.19-0.23, and 0.25-0.29 s instead of 0.28-0.34.
class BlockVerifier {
 public:
  BlockVerifier(const ReadJob& job, const char* memory, const RequestPlan& plan)
      : job_(job), memory_(memory), plan_(plan) {}

  // Verifies the next block if all its bytes are in; after a mismatch, nothing.
  SpareStep VerifyNext() {
    if (!mismatch_.ok()) return SpareStep::kDone;
    while (segment_ < job_.segments.size() && block_ >= job_.expected_checksums[segment_].size()) {
      ++segment_;
      block_ = 0;
    }
    if (segment_ == job_.segments.size()) return SpareStep::kDone;
    const FileSegment& s = job_.segments[segment_];
    const uint64_t start = block_ * job_.block_size;
    const uint64_t length = std::min(job_.block_size, s.length - start);
    if (!Arrived(start + length)) return SpareStep::kWaitForIo;
    if (Checksum(memory_ + s.arena_offset + start, length) != job_.expected_checksums[segment_][block_]) {
      mismatch_ = ChecksumMismatch(job_, segment_, block_, &where_);
      return SpareStep::kDone;
    }
    ++block_;
    return SpareStep::kMore;
  }

  // Once every request is done and the file covered the job: the blocks left, then the first mismatch, if any.
  Status Finish(ReadFailure* failure) {
    while (VerifyNext() == SpareStep::kMore) {
    }
    if (!mismatch_.ok() && failure != nullptr) *failure = where_;
    return mismatch_;
  }

 private:
  // Whether every request holding bytes of the current segment before `end` has brought all its bytes. Requests run
  // in the plan's order, segment after segment; complete_ moves past the completed ones at the front.
  bool Arrived(uint64_t end) {
    const std::vector<IoRequest>& requests = plan_.requests;
    while (complete_ < requests.size() && requests[complete_].transferred >= plan_.needed[complete_]) ++complete_;
    if (complete_ == requests.size() || plan_.segment[complete_] > segment_) return true;
    if (plan_.segment[complete_] < segment_) return false;
    return requests[complete_].file_offset - job_.segments[segment_].file_offset >= end;
  }

  const ReadJob& job_;
  const char* memory_;
  const RequestPlan& plan_;
  size_t segment_ = 0;
  uint64_t block_ = 0;
  size_t complete_ = 0;  // requests before it have brought all their bytes
  Status mismatch_;
  ReadFailure where_;
};

class Executor final : public FileJobExecutor {
 public:
  Executor(char* arena, uint64_t arena_size, const IoTuning& tuning, std::unique_ptr<IoBackend> backend)
      : arena_(arena), arena_size_(arena_size), tuning_(tuning), backend_(std::move(backend)) {}
  // Files still open belong to jobs that never finished: closed without syncing, as their save has failed.
  ~Executor() override {
    for (const auto& [path, file] : open_) close(file.fd);
  }

  Result<WriteResult> Write(const WriteJob& job) override {
    Status valid = RequireArena(job.path);
    if (valid.ok()) valid = ValidateSegments(job.path, job.segments, job.block_size, arena_size_);
    return ForgetOnFailure(job, valid.ok() ? WriteFile(job, SegmentStarts(arena_, job.segments)) : valid);
  }

  Result<WriteResult> WriteFrom(const WriteJob& job, const std::vector<const char*>& sources) override {
    const auto prepared = job.create ? open_.end() : open_.find(job.path);
    const SourceRules rules = prepared == open_.end() ? SourceRules{} : RulesFor(prepared->second);
    const Status valid = ValidateSources(job, sources, rules);
    return ForgetOnFailure(job, valid.ok() ? WriteFile(job, sources) : valid);
  }

  Result<SourceRules> PrepareWrite(const WriteJob& job) override {
    Result<OpenFile> file = FileForWrite(job);
    if (!file.ok()) {
      Forget(job.path);
      return file.status();
    }
    return RulesFor(*file);
  }

  Status Read(const ReadJob& job, ReadFailure* failure) override;
  Status ReadInto(const ReadJob& job, char* memory, uint64_t size, ReadFailure* failure) override;

  size_t AbandonFiles(const std::string& directory) override {
    size_t closed = 0;
    for (auto it = open_.begin(); it != open_.end();) {
      if (!IsInside(it->first, directory)) {
        ++it;
        continue;
      }
      close(it->second.fd);  // nothing to report: the file is not wanted any more
      it = open_.erase(it);
      ++closed;
    }
    return closed;
  }

  std::string backend_name() const override {
    std::string name = backend_->name();
    if (opened_any_) name += last_direct_ ? "+O_DIRECT" : "+buffered";
    return name;
  }

 private:
  Result<WriteResult> WriteFile(const WriteJob& job, const std::vector<const char*>& starts);
  static Status ValidateSources(const WriteJob& job, const std::vector<const char*>& sources, const SourceRules& rules);
  static SourceRules RulesFor(const OpenFile& file) { return SourceRules{file.memory_alignment, file.direct}; }
  Result<OpenFile> FileForWrite(const WriteJob& job);
  Status FinishFile(const std::string& path, uint64_t final_size);
  static Status Preallocate(int fd, const std::string& path, uint64_t size);
  void Forget(const std::string& path);
  // A failed job's file is closed: its next job opens it again.
  Result<WriteResult> ForgetOnFailure(const WriteJob& job, Result<WriteResult> result) {
    if (!result.ok()) Forget(job.path);
    return result;
  }
  Status ReadAt(const ReadJob& job, char* memory, uint64_t size, ReadFailure* failure, bool caller_memory);
  Status RequireArena(const std::string& path) const;
  Status CheckCoverage(const ReadJob& job, const RequestPlan& plan, int fd) const;
  void NoteOpened(const OpenFile& file) {
    opened_any_ = true;
    last_direct_ = file.direct;
  }

  char* arena_;
  uint64_t arena_size_;
  IoTuning tuning_;
  std::unique_ptr<IoBackend> backend_;
  std::map<std::string, OpenFile> open_;  // files between their create job and their finish job
  bool opened_any_ = false;
  bool last_direct_ = false;
};

// `starts[i]`: segment i's bytes, checked by the caller (inside the arena, or aligned caller memory).
Result<WriteResult> Executor::WriteFile(const WriteJob& job, const std::vector<const char*>& starts) {
  ASSIGN_OR_RETURN(const OpenFile file, FileForWrite(job));
  RequestPlan plan = PlanRequests(starts, job.segments, tuning_.request_bytes, file.direct);
  const IoTarget target{IoDirection::kWrite, file.fd, file.direct, &job.path};
  std::optional<BlockHasher> hasher;
  if (job.compute_checksums) hasher.emplace(starts, job.segments, job.block_size);
  RETURN_IF_ERROR(
      backend_->Run(target, plan.requests, [&hasher] { return hasher ? hasher->HashNext() : SpareStep::kDone; }));
  if (job.finish) RETURN_IF_ERROR(FinishFile(job.path, job.final_size));
  return hasher ? hasher->Take() : WriteResult{};
}

// The segments as Write checks them, but against no arena: their memory is the caller's, one source each, aligned
// as `rules` say.
Status Executor::ValidateSources(const WriteJob& job, const std::vector<const char*>& sources,
                                 const SourceRules& rules) {
  if (sources.size() != job.segments.size()) {
    return InvalidArgument("write job for " + Quoted(job.path) + " has " + std::to_string(job.segments.size()) +
                           " segments but " + std::to_string(sources.size()) + " sources");
  }
  for (size_t i = 0; i < sources.size(); ++i) {
    if (sources[i] == nullptr || reinterpret_cast<uintptr_t>(sources[i]) % rules.alignment != 0) {
      return InvalidArgument("write job for " + Quoted(job.path) + ": the memory of segment " + std::to_string(i) +
                             " is not " + std::to_string(rules.alignment) + "-byte aligned");
    }
  }
  return ValidateSegments(job.path, job.segments, job.block_size, UINT64_MAX);
}

Result<OpenFile> Executor::FileForWrite(const WriteJob& job) {
  if (!job.create) {
    const auto it = open_.find(job.path);
    if (it != open_.end()) return it->second;
  }
  // A create job for a file still open starts it over; O_EXCL then refuses, since the file exists.
  Forget(job.path);
  const int flags = O_WRONLY | (job.create ? (job.overwrite_existing ? O_CREAT | O_NOFOLLOW : O_CREAT | O_EXCL) : 0);
  const std::string action = (job.create ? "cannot create " : "cannot open for writing ") + Quoted(job.path);
  ASSIGN_OR_RETURN(const OpenFile file, OpenData(job.path, flags, tuning_.direct, action));
  NoteOpened(file);
  open_.emplace(job.path, file);
  if (job.create) RETURN_IF_ERROR(Preallocate(file.fd, job.path, job.final_size));
  return file;
}

// Reserves the whole file up front (to the 4096-byte multiple its direct writes reach), so that direct writes do not
// allocate extents request by request (fio lays its files out the same way), and gives it that size at once: a
// direct write past the end of the file extends it, which ext4 serialises on the inode's lock and io_uring hands to
// its blocking workers (a 1 GiB save on the RAM disk took 0.39-0.43 s with FALLOC_FL_KEEP_SIZE, 0.34-0.39 without).
// FinishFile cuts the file to its final size. A file system without fallocate simply allocates as the writes come; a
// full one fails here, before any byte is written.
Status Executor::Preallocate(int fd, const std::string& path, uint64_t size) {
  const uint64_t reserved = RoundUp(size, kDirectAlignment);
  if (size == 0 || fallocate(fd, 0, 0, static_cast<off_t>(reserved)) == 0) return Status::Ok();
  if (errno == EOPNOTSUPP || errno == ENOSYS) return Status::Ok();
  return OsError("cannot reserve " + std::to_string(reserved) + " bytes for " + Quoted(path), errno);
}

Status Executor::FinishFile(const std::string& path, uint64_t final_size) {
  const auto it = open_.find(path);
  const int fd = it->second.fd;
  open_.erase(it);
  // Direct writes were rounded up to 4096 bytes: cut the padding. fdatasync only after every write completed,
  // never a linked fsync, which io_uring does not order after the writes.
  Status status;
  if (ftruncate(fd, static_cast<off_t>(final_size)) != 0) {
    status = OsError("cannot truncate " + Quoted(path) + " to " + std::to_string(final_size) + " bytes", errno);
  } else if (fdatasync(fd) != 0) {
    status = OsError("cannot sync " + Quoted(path), errno);
  }
  const Status closed = CloseData(fd, path);
  return status.ok() ? closed : status;
}

void Executor::Forget(const std::string& path) {
  const auto it = open_.find(path);
  if (it == open_.end()) return;
  close(it->second.fd);
  open_.erase(it);
}

Status Executor::Read(const ReadJob& job, ReadFailure* failure) {
  RETURN_IF_ERROR(RequireArena(job.path));
  return ReadAt(job, arena_, arena_size_, failure, /*caller_memory=*/false);
}

Status Executor::ReadInto(const ReadJob& job, char* memory, uint64_t size, ReadFailure* failure) {
  if (memory == nullptr) return InvalidArgument("read job for " + Quoted(job.path) + " has no memory to read into");
  // A job of one segment has `size` to itself, where the segment's last page can be read whole; several could
  // overwrite each other's first bytes.
  for (size_t i = 0; i < job.segments.size(); ++i) {
    const FileSegment& s = job.segments[i];
    const bool room = job.segments.size() == 1 && s.arena_offset <= size &&
                      RoundUp(s.length, kDirectAlignment) <= size - s.arena_offset;
    if (s.length % kDirectAlignment != 0 && !room) {
      return InvalidArgument("read job for " + Quoted(job.path) + ": segment " + std::to_string(i) + " of " +
                             std::to_string(s.length) +
                             " bytes would be rounded up past its memory (not a multiple of 4096)");
    }
  }
  return ReadAt(job, memory, size, failure, /*caller_memory=*/true);
}

// `caller_memory`: memory is the caller's, whose alignment is checked against what direct I/O on the file needs (the
// arena's pages always suit it).
Status Executor::ReadAt(const ReadJob& job, char* memory, uint64_t size, ReadFailure* failure, bool caller_memory) {
  RETURN_IF_ERROR(ValidateSegments(job.path, job.segments, job.block_size, size));
  RETURN_IF_ERROR(ValidateExpectedChecksums(job));
  ASSIGN_OR_RETURN(const OpenFile file, OpenForReading(job, tuning_.direct));
  NoteOpened(file);
  if (caller_memory && reinterpret_cast<uintptr_t>(memory) % file.memory_alignment != 0) {
    close(file.fd);
    return InvalidArgument("read job for " + Quoted(job.path) + ": its memory is not " +
                           std::to_string(file.memory_alignment) + "-byte aligned, as direct I/O on the file needs");
  }
  RequestPlan plan =
      PlanRequests(SegmentStarts(memory, job.segments), job.segments, tuning_.request_bytes, file.direct);
  const IoTarget target{IoDirection::kRead, file.fd, file.direct, &job.path};
  BlockVerifier verifier(job, memory, plan);
  Status status = backend_->Run(target, plan.requests, [&verifier] { return verifier.VerifyNext(); });
  if (status.ok()) status = CheckCoverage(job, plan, file.fd);
  close(file.fd);  // read-only: close() has nothing left to report
  RETURN_IF_ERROR(status);
  return verifier.Finish(failure);
}

Status Executor::RequireArena(const std::string& path) const {
  if (arena_ != nullptr) return Status::Ok();
  return InvalidArgument("I/O job for " + Quoted(path) + ": this executor reads into caller memory only");
}

Status Executor::CheckCoverage(const ReadJob& job, const RequestPlan& plan, int fd) const {
  for (size_t i = 0; i < plan.requests.size(); ++i) {
    if (plan.requests[i].transferred >= plan.needed[i]) continue;
    const FileSegment& s = job.segments[plan.segment[i]];
    struct stat st;
    const std::string file_size = fstat(fd, &st) == 0 ? std::to_string(st.st_size) : "an unknown size";
    return Corrupt(Quoted(job.path) + " is truncated: segment " + std::to_string(plan.segment[i]) + " needs bytes [" +
                   std::to_string(s.file_offset) + ", " + std::to_string(s.file_offset + s.length) +
                   ") but the file has " + file_size + " bytes");
  }
  return Status::Ok();
}

// kAuto: io_uring unless the kernel refuses it; an explicit choice is never replaced.
Result<std::unique_ptr<IoBackend>> ChooseBackend(const IoTuning& tuning, char* arena, uint64_t arena_size) {
  if (tuning.backend == IoBackendKind::kPwrite) return CreatePwriteBackend(tuning.pwrite_threads);
  Result<std::unique_ptr<IoBackend>> uring = CreateUringBackend(tuning.queue_depth, arena, arena_size);
  if (uring.ok() || tuning.backend == IoBackendKind::kIoUring || uring.status().code() != Code::kUnsupported) {
    return uring;
  }
  return CreatePwriteBackend(tuning.pwrite_threads);
}

}  // namespace

uint32_t CallerMemoryThreadsFor(unsigned cores) { return cores < 4 ? 1 : 2; }

uint64_t DirectMemoryAlignment(int fd) {
  uint64_t alignment = kDirectAlignment;
  if (fd < 0 || !DirectIoWorks(fd, &alignment)) return kDirectAlignment;
  return alignment;
}

Result<std::unique_ptr<FileJobExecutor>> FileJobExecutor::Create(char* arena, uint64_t arena_size,
                                                                 const IoTuning& tuning) {
  if (arena == nullptr || arena_size == 0) return InvalidArgument("file jobs need a mapped staging arena");
  if (reinterpret_cast<uintptr_t>(arena) % kDirectAlignment != 0) {
    return InvalidArgument("the staging arena's mapping is not 4096-byte aligned, as direct I/O requires");
  }
  RETURN_IF_ERROR(ValidateTuning(tuning));
  ASSIGN_OR_RETURN(std::unique_ptr<IoBackend> backend, ChooseBackend(tuning, arena, arena_size));
  auto local = std::make_unique<Executor>(arena, arena_size, tuning, std::move(backend));
  return CodeBlocks(RouteObjectStoreJobs(std::move(local), arena, arena_size), arena, arena_size);
}

Result<std::unique_ptr<FileJobExecutor>> FileJobExecutor::CreateForCallerMemory(const IoTuning& tuning) {
  RETURN_IF_ERROR(ValidateTuning(tuning));
  ASSIGN_OR_RETURN(std::unique_ptr<IoBackend> backend, ChooseBackend(tuning, nullptr, 0));
  auto local = std::make_unique<Executor>(nullptr, 0, tuning, std::move(backend));
  return CodeBlocks(RouteObjectStoreJobs(std::move(local), nullptr, 0), nullptr, 0);
}

}  // namespace ckpt::io

// File jobs: what an I/O worker does to one data file, between arena memory and storage. A FileJobExecutor runs
// them in the calling process with the best backend the machine allows: io_uring with O_DIRECT and large aligned
// requests, else a pwrite/pread thread pool; buffered I/O + fdatasync where O_DIRECT is refused (tmpfs). A job
// whose path is an S3 URL ("s3://bucket/key") runs against that object instead (io/s3_file_jobs.h): the file's
// write jobs become one multipart upload (or one PUT), read jobs ranged GETs, with the same block checksums.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "io/block_codec.h"

namespace ckpt::io {

// Bytes at `arena_offset` belong at `file_offset` of the job's file. Both offsets are multiples of 4096.
struct FileSegment {
  uint64_t file_offset = 0;
  uint64_t arena_offset = 0;
  uint64_t length = 0;
};

struct WriteJob {
  std::string path;
  bool create = false;  // the file's first job: create it (fails if it exists, unless overwrite_existing)
  // create: a file already there is written over in place, its pages reused (a memory-tier save into a file the
  // agent recycled); never for storage, where an existing file is a collision to refuse.
  bool overwrite_existing = false;
  bool finish = false;  // the file's last job: truncate to final_size, fdatasync, close
  uint64_t final_size = 0;
  uint64_t block_size = 1ull << 20;   // checksum granularity, from the start of each segment
  std::vector<FileSegment> segments;  // increasing file offsets; the arena holds zeros up to each 4 KiB boundary
  // false: the caller checksummed the segments as it staged them, and the result carries no checksums.
  bool compute_checksums = true;
  // Codec::kZstd: every block of segment i is compressed on its own (io/block_codec.h), its elements' bytes grouped
  // by byte_groups[i], and the stored forms are appended to the file one after another, the segments' file offsets
  // notwithstanding: the file's layout is the executor's, which the result reports. A create job starts the file
  // at offset 0, each later job where the one before ended (a job after a failed one of the same file fails), and
  // `finish` cuts the file where the last one ended. Arena jobs only (Write, not WriteFrom).
  Codec codec = Codec::kNone;
  // Per segment; 0: stored as it is, from the next 4096-byte boundary of the file (its stored sizes are its
  // blocks' lengths), so that it can be read with direct I/O.
  std::vector<uint32_t> byte_groups;
};

struct WriteResult {
  // Per segment: XXH3-64 of each block_size block (of the bytes as given, before any compression); none where the
  // job did not compute them.
  std::vector<std::vector<uint64_t>> checksums;
  // A compressed job's layout: per segment, the file offset where its first block's stored form begins and each
  // block's stored size (the block's length: stored raw); and where the file ends after the job.
  std::vector<uint64_t> stored_offsets;
  std::vector<std::vector<uint32_t>> stored_sizes;
  uint64_t file_end = 0;
};

struct ReadJob {
  std::string root;  // the checkpoint directory: the file is opened beneath it only (io/confined_open.h)
  std::string path;  // root + "/" + the file's name in the checkpoint
  uint64_t block_size = 1ull << 20;
  std::vector<FileSegment> segments;  // file offsets 4 KiB-aligned; length may end anywhere
  // Per segment, per block; verified before returning. An empty list reads the segment unverified (safetensors).
  std::vector<std::vector<uint64_t>> expected_checksums;
  // Codec::kZstd: segment i's blocks are stored compressed one after another from its file offset (which may be
  // any), block b in stored_sizes[i][b] bytes; its length is that of its bytes decompressed, which land in memory
  // and are verified there, so its memory needs no alignment nor room past its length.
  Codec codec = Codec::kNone;
  uint32_t byte_groups = 1;
  std::vector<std::vector<uint32_t>> stored_sizes;
};

// Where a read failed its checksum, so the caller can name the tensor.
struct ReadFailure {
  size_t segment = 0;
  uint64_t block = 0;
};

// What WriteFrom needs of the memory it writes one file from.
struct SourceRules {
  uint64_t alignment = 4096;  // every source's address is a multiple of this (the device's, for direct I/O)
  bool whole_pages = true;    // direct I/O: lengths are rounded up to 4096, so a segment of another length needs
                              // zeros after it; buffered files write exactly the segment's bytes
};

enum class IoBackendKind : int32_t { kAuto = 0, kIoUring = 1, kPwrite = 2 };

// What direct I/O on the open file `fd` needs of memory: statx's dio_mem_align (512 bytes on virtio and loop disks,
// often 4 on NVMe drives); 4096 where the kernel does not say (before Linux 6.1) or the file is not read directly.
uint64_t DirectMemoryAlignment(int fd);

struct IoTuning {
  IoBackendKind backend = IoBackendKind::kAuto;
  bool direct = true;                   // try O_DIRECT (falls back per file when refused)
  uint64_t request_bytes = 4ull << 20;  // size of one I/O request
  uint32_t queue_depth = 16;
  uint32_t pwrite_threads = 4;  // the fallback pool
  // Threads of the calling process reading into or writing from its own memory at once (a load's direct reads, an
  // in-place save's files), each with an executor of its own; a context sets CallerMemoryThreadsFor its cores.
  uint32_t caller_memory_threads = 2;
};

// The caller_memory_threads for a process that may run on `cores` cores: 2, or 1 below 4 cores. On 2 cores (a VM,
// bench/run's RAM disk, 1 GiB, medians of 5-6 runs), one thread loaded in the time two took (0.16 s) for 0.065 CPU
// seconds instead of 0.079, and saved in place in 0.18 s instead of 0.19 for 0.069 CPU seconds instead of 0.079: a
// second thread finds no core of its own and competes with the kernel's I/O work (the completions, which without
// IRQ time accounting are charged to the thread they interrupt).
uint32_t CallerMemoryThreadsFor(unsigned cores);

class FileJobExecutor {
 public:
  // `arena` is the caller's mapping of the staging arena. kAuto picks io_uring if the kernel allows it.
  static Result<std::unique_ptr<FileJobExecutor>> Create(char* arena, uint64_t arena_size, const IoTuning& tuning);
  // An executor for ReadInto and WriteFrom alone, in the calling process: a load reading straight into its
  // destinations, a save writing straight from its sources. Its Write and Read, having no arena, refuse every job.
  static Result<std::unique_ptr<FileJobExecutor>> CreateForCallerMemory(const IoTuning& tuning);
  virtual ~FileJobExecutor() = default;

  // Writes the segments, retrying short writes, EAGAIN and EINTR; kNoSpace on ENOSPC/EDQUOT, naming the file.
  virtual Result<WriteResult> Write(const WriteJob& job) = 0;
  // The same from this process's memory instead of the arena: segment i's bytes are at sources[i], whatever the
  // segments' arena offsets say, aligned as PrepareWrite said for the file (4096 bytes for a file not prepared).
  // Direct writes round a segment's length up to 4096 bytes, so the rest of its last page must be readable and is
  // what the file holds there (its padding): pass a segment whose length is not a multiple of 4096 only from memory
  // whose padding is zeros, unless the rules say the file is buffered. Runs in any executor.
  virtual Result<WriteResult> WriteFrom(const WriteJob& job, const std::vector<const char*>& sources) = 0;
  // Opens the job's file as its Write would (creating and reserving it for a create job), writes nothing, and says
  // what WriteFrom needs of its sources for that file; the file's jobs that follow are not create jobs.
  virtual Result<SourceRules> PrepareWrite(const WriteJob& job) = 0;
  // Reads the segments into the arena and verifies every block; kCorrupt (with *failure set) on a mismatch,
  // kCorrupt "truncated" if the file ends before a segment does.
  virtual Status Read(const ReadJob& job, ReadFailure* failure) = 0;
  // The same into `size` bytes of this process's memory at `memory` instead of the arena, aligned as direct I/O on
  // the file needs (DirectMemoryAlignment): the segments' arena offsets are offsets into it. Direct I/O reads whole
  // pages, so a segment's length must be a multiple of 4096, since the bytes past a segment may belong to someone
  // else; only a job's one segment may end anywhere, where `size` holds it rounded up to 4096.
  virtual Status ReadInto(const ReadJob& job, char* memory, uint64_t size, ReadFailure* failure) = 0;
  // Closes every file inside `directory` that a write job left open for the file's later jobs, without truncating
  // or syncing it: the save writing it has failed, and its files will be removed. Returns how many were closed; an
  // empty `directory` holds none. A later job for such a file opens it again, as after a failed write.
  // An S3 object's upload is aborted instead; its later jobs then fail, as an object cannot be appended to.
  virtual size_t AbandonFiles(const std::string& directory) = 0;
  // "io_uring", "pwrite"; with "+O_DIRECT" or "+buffered" for the last file opened; "s3" after a job on an object.
  virtual std::string backend_name() const = 0;
};

}  // namespace ckpt::io

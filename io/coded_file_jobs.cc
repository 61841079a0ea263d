#include "io/coded_file_jobs.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "io/block_checksums.h"
#include "io/checksum.h"
#include "io/io_backend.h"

namespace ckpt::io {
namespace {

uint64_t AlignDown(uint64_t value) { return value / kDirectAlignment * kDirectAlignment; }
uint64_t AlignUp(uint64_t value) { return (value + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment; }

// Page-aligned memory for direct I/O, grown as jobs need and kept for the next.
class AlignedBuffer {
 public:
  ~AlignedBuffer() { std::free(data_); }
  Result<char*> Reserve(uint64_t size) {
    if (size <= size_) return data_;
    std::free(data_);
    size_ = 0;
    data_ = static_cast<char*>(std::aligned_alloc(kDirectAlignment, AlignUp(size)));
    if (data_ == nullptr) return IoError("cannot allocate " + std::to_string(size) + " bytes for compressed blocks");
    size_ = AlignUp(size);
    return data_;
  }

 private:
  char* data_ = nullptr;
  uint64_t size_ = 0;
};

// Where a compressed file stands between its jobs: its end, and the bytes of its last page before that end, which
// the next job writes again in front of its own, as direct writes start on page boundaries.
struct FileEnd {
  uint64_t offset = 0;
  std::string last_page;
};

class CodingExecutor final : public FileJobExecutor {
 public:
  CodingExecutor(std::unique_ptr<FileJobExecutor> inner, char* arena, uint64_t arena_size)
      : inner_(std::move(inner)), arena_(arena), arena_size_(arena_size) {}

  Result<WriteResult> Write(const WriteJob& job) override {
    if (job.codec == Codec::kNone) return inner_->Write(job);
    Result<WriteResult> result = WriteCompressed(job);
    if (!result.ok() || job.finish) ends_.erase(job.path);
    return result;
  }

  Result<WriteResult> WriteFrom(const WriteJob& job, const std::vector<const char*>& sources) override {
    if (job.codec != Codec::kNone) {
      return InvalidArgument("write job for " + Quoted(job.path) + ": compressed jobs are written from the arena only");
    }
    return inner_->WriteFrom(job, sources);
  }

  Result<SourceRules> PrepareWrite(const WriteJob& job) override { return inner_->PrepareWrite(job); }

  Status Read(const ReadJob& job, ReadFailure* failure) override {
    if (job.codec == Codec::kNone) return inner_->Read(job, failure);
    if (arena_ == nullptr) {
      return InvalidArgument("I/O job for " + Quoted(job.path) + ": this executor reads into caller memory only");
    }
    return ReadCompressed(job, arena_, arena_size_, failure);
  }

  Status ReadInto(const ReadJob& job, char* memory, uint64_t size, ReadFailure* failure) override {
    if (job.codec == Codec::kNone) return inner_->ReadInto(job, memory, size, failure);
    if (memory == nullptr) return InvalidArgument("read job for " + Quoted(job.path) + " has no memory to read into");
    return ReadCompressed(job, memory, size, failure);
  }

  size_t AbandonFiles(const std::string& directory) override {
    for (auto it = ends_.begin(); it != ends_.end();) {
      it = it->first.rfind(directory + "/", 0) == 0 ? ends_.erase(it) : std::next(it);
    }
    return inner_->AbandonFiles(directory);
  }

  std::string backend_name() const override { return inner_->backend_name(); }

 private:
  Result<WriteResult> WriteCompressed(const WriteJob& job);
  Status ReadCompressed(const ReadJob& job, char* memory, uint64_t size, ReadFailure* failure);
  Status CheckWriteJob(const WriteJob& job) const;

  std::unique_ptr<FileJobExecutor> inner_;
  char* arena_;
  uint64_t arena_size_;
  std::map<std::string, FileEnd> ends_;  // compressed files between their create job and their finish job
  AlignedBuffer buffer_;
  BlockCompressor compressor_;
  BlockDecompressor decompressor_;
};

Status CodingExecutor::CheckWriteJob(const WriteJob& job) const {
  const std::string what = "write job for " + Quoted(job.path);
  if (arena_ == nullptr) return InvalidArgument(what + ": this executor has no arena to write from");
  if (job.block_size == 0) return InvalidArgument(what + ": checksum block size is 0");
  if (job.byte_groups.size() != job.segments.size()) {
    return InvalidArgument(what + " has " + std::to_string(job.segments.size()) + " segments but byte groupings for " +
                           std::to_string(job.byte_groups.size()));
  }
  for (size_t i = 0; i < job.segments.size(); ++i) {
    const FileSegment& s = job.segments[i];
    if (s.arena_offset > arena_size_ || s.length > arena_size_ - s.arena_offset) {
      return InvalidArgument(what + ": segment " + std::to_string(i) + " reaches past the arena of " +
                             std::to_string(arena_size_) + " bytes");
    }
    if (job.byte_groups[i] != 0 && !ValidByteGroups(job.byte_groups[i])) {
      return InvalidArgument(what + ": segment " + std::to_string(i) + " has byte grouping " +
                             std::to_string(job.byte_groups[i]) + ", none of 0, 1, 2, 4 and 8");
    }
  }
  if (!job.create && ends_.count(job.path) == 0) {
    return InvalidArgument(what +
                           " continues a compressed file that no earlier job of this executor started (or "
                           "whose earlier job failed)");
  }
  return Status::Ok();
}

Result<WriteResult> CodingExecutor::WriteCompressed(const WriteJob& job) {
  RETURN_IF_ERROR(CheckWriteJob(job));
  FileEnd end = job.create ? FileEnd{} : ends_[job.path];
  uint64_t total = end.last_page.size();
  for (const FileSegment& s : job.segments) total += s.length + kDirectAlignment;  // room to align a raw one
  ASSIGN_OR_RETURN(char* out, buffer_.Reserve(total + kDirectAlignment));
  std::memcpy(out, end.last_page.data(), end.last_page.size());
  const uint64_t start = end.offset - end.last_page.size();  // a page boundary
  uint64_t filled = end.last_page.size();
  WriteResult result;
  for (size_t i = 0; i < job.segments.size(); ++i) {
    const FileSegment& s = job.segments[i];
    const char* bytes = arena_ + s.arena_offset;
    const bool raw = job.byte_groups[i] == 0;
    if (raw) {
      std::memset(out + filled, 0, AlignUp(filled) - filled);
      filled = AlignUp(filled);
    }
    result.stored_offsets.push_back(start + filled);
    std::vector<uint32_t>& sizes = result.stored_sizes.emplace_back();
    std::vector<uint64_t>* sums = job.compute_checksums ? &result.checksums.emplace_back() : nullptr;
    for (uint64_t at = 0; at < s.length; at += job.block_size) {
      const uint64_t length = std::min(job.block_size, s.length - at);
      if (sums != nullptr) sums->push_back(Checksum(bytes + at, length));
      uint64_t stored = length;
      if (raw) {
        std::memcpy(out + filled, bytes + at, length);
      } else {
        stored = compressor_.Compress(bytes + at, length, job.byte_groups[i], out + filled);
      }
      sizes.push_back(static_cast<uint32_t>(stored));
      filled += stored;
    }
  }
  // Direct writes reach the end of their last page, which holds zeros past the file's end.
  std::memset(out + filled, 0, AlignUp(filled) - filled);
  WriteJob stored_job;
  stored_job.path = job.path;
  stored_job.create = job.create;
  stored_job.overwrite_existing = job.overwrite_existing;
  stored_job.finish = job.finish;
  // A create job reserves the file's final size, which the caller gave before compression: an upper bound.
  stored_job.final_size = job.finish ? start + filled : job.final_size;
  stored_job.block_size = job.block_size;
  stored_job.compute_checksums = false;
  if (filled > 0) stored_job.segments.push_back(FileSegment{start, 0, filled});
  std::vector<const char*> sources(stored_job.segments.size(), out);
  RETURN_IF_ERROR(inner_->WriteFrom(stored_job, sources).status());
  result.file_end = start + filled;
  const uint64_t page = AlignDown(filled);
  ends_[job.path] = FileEnd{start + filled, std::string(out + page, filled - page)};
  return result;
}

Status CodingExecutor::ReadCompressed(const ReadJob& job, char* memory, uint64_t size, ReadFailure* failure) {
  const std::string what = "read job for " + Quoted(job.path);
  RETURN_IF_ERROR(ValidateExpectedChecksums(job));
  if (job.stored_sizes.size() != job.segments.size()) {
    return InvalidArgument(what + " has " + std::to_string(job.segments.size()) + " segments but stored sizes for " +
                           std::to_string(job.stored_sizes.size()));
  }
  for (size_t i = 0; i < job.segments.size(); ++i) {
    const FileSegment& s = job.segments[i];
    const std::vector<uint32_t>& sizes = job.stored_sizes[i];
    const std::string segment = what + ": segment " + std::to_string(i);
    if (s.arena_offset > size || s.length > size - s.arena_offset) {
      return InvalidArgument(segment + " reaches past its memory of " + std::to_string(size) + " bytes");
    }
    if (sizes.size() != BlockCount(s.length, job.block_size)) {
      return InvalidArgument(segment + " has " + std::to_string(BlockCount(s.length, job.block_size)) + " blocks but " +
                             std::to_string(sizes.size()) + " stored sizes");
    }
    uint64_t stored = 0;
    for (uint32_t n : sizes) stored += n;
    if (s.file_offset > UINT64_MAX - stored - kDirectAlignment) return InvalidArgument(segment + " is too long");
    // The stored bytes are read whole pages at a time into the buffer, unverified: the blocks are verified once
    // decompressed.
    const uint64_t lead = s.file_offset - AlignDown(s.file_offset);
    ASSIGN_OR_RETURN(char* in, buffer_.Reserve(AlignUp(lead + stored)));
    ReadJob raw;
    raw.root = job.root;
    raw.path = job.path;
    raw.block_size = job.block_size;
    raw.segments.push_back(FileSegment{AlignDown(s.file_offset), 0, lead + stored});
    raw.expected_checksums.emplace_back();
    if (stored > 0) RETURN_IF_ERROR(inner_->ReadInto(raw, in, AlignUp(lead + stored), nullptr));
    char* out = memory + s.arena_offset;
    uint64_t consumed = lead;
    for (uint64_t b = 0; b < sizes.size(); ++b) {
      const uint64_t at = b * job.block_size;
      const uint64_t length = std::min(job.block_size, s.length - at);
      const std::string block = Quoted(job.path) + ": segment " + std::to_string(i) + ", block " + std::to_string(b);
      const Status decoded =
          decompressor_.Decompress(in + consumed, sizes[b], job.byte_groups, out + at, length, block);
      if (!decoded.ok()) {
        if (failure != nullptr) *failure = ReadFailure{i, b};
        return decoded;
      }
      if (!job.expected_checksums[i].empty() && Checksum(out + at, length) != job.expected_checksums[i][b]) {
        return ChecksumMismatch(job, i, b, failure);
      }
      consumed += sizes[b];
    }
  }
  return Status::Ok();
}

}  // namespace

std::unique_ptr<FileJobExecutor> CodeBlocks(std::unique_ptr<FileJobExecutor> inner, char* arena, uint64_t arena_size) {
  return std::make_unique<CodingExecutor>(std::move(inner), arena, arena_size);
}

}  // namespace ckpt::io

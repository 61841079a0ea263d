#include "io/block_checksums.h"

#include <algorithm>
#include <string>

#include "io/checksum.h"

namespace ckpt::io {

Status ValidateExpectedChecksums(const ReadJob& job) {
  if (job.expected_checksums.size() != job.segments.size()) {
    return InvalidArgument("read job for " + Quoted(job.path) + " has " + std::to_string(job.segments.size()) +
                           " segments but checksums for " + std::to_string(job.expected_checksums.size()));
  }
  if (job.block_size == 0) return InvalidArgument("read job for " + Quoted(job.path) + ": checksum block size is 0");
  for (size_t i = 0; i < job.segments.size(); ++i) {
    const uint64_t blocks = BlockCount(job.segments[i].length, job.block_size);
    if (!job.expected_checksums[i].empty() && job.expected_checksums[i].size() != blocks) {
      return InvalidArgument("read job for " + Quoted(job.path) + ": segment " + std::to_string(i) + " has " +
                             std::to_string(blocks) + " blocks but " +
                             std::to_string(job.expected_checksums[i].size()) + " checksums");
    }
  }
  return Status::Ok();
}

Status ChecksumMismatch(const ReadJob& job, size_t segment, uint64_t block, ReadFailure* failure) {
  if (failure != nullptr) *failure = ReadFailure{segment, block};
  const FileSegment& s = job.segments[segment];
  uint64_t start = block * job.block_size;
  uint64_t end = std::min(start + job.block_size, s.length);
  std::string stored;
  if (job.codec != Codec::kNone && segment < job.stored_sizes.size() && block < job.stored_sizes[segment].size()) {
    // The block's stored form is where the file's bytes are; the checksum is of the block decompressed.
    const std::vector<uint32_t>& sizes = job.stored_sizes[segment];
    start = 0;
    for (uint64_t b = 0; b < block; ++b) start += sizes[b];
    end = start + sizes[block];
    stored = ", compressed";
  }
  return Corrupt("checksum mismatch in " + Quoted(job.path) + ": segment " + std::to_string(segment) + ", block " +
                 std::to_string(block) + " (file bytes [" + std::to_string(s.file_offset + start) + ", " +
                 std::to_string(s.file_offset + end) + ")" + stored + ")");
}

Status VerifyBlocks(const ReadJob& job, const char* memory, ReadFailure* failure) {
  for (size_t i = 0; i < job.segments.size(); ++i) {
    const std::vector<uint64_t>& expected = job.expected_checksums[i];
    const char* bytes = memory + job.segments[i].arena_offset;
    for (uint64_t block = 0; block < expected.size(); ++block) {
      const uint64_t start = block * job.block_size;
      const uint64_t length = std::min(job.block_size, job.segments[i].length - start);
      if (Checksum(bytes + start, length) != expected[block]) return ChecksumMismatch(job, i, block, failure);
    }
  }
  return Status::Ok();
}

WriteResult SegmentChecksums(const std::vector<FileSegment>& segments, const std::vector<const char*>& starts,
                             uint64_t block_size) {
  WriteResult result;
  result.checksums.reserve(segments.size());
  for (size_t i = 0; i < segments.size(); ++i) {
    result.checksums.push_back(BlockChecksums(starts[i], segments[i].length, block_size));
  }
  return result;
}

}  // namespace ckpt::io

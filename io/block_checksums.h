// The block checksums of file jobs, one decision for every storage backend (files, S3 objects): XXH3-64 of each
// block_size block counted from the start of each segment, computed for a write job's segments and checked for a
// read job's, with one wording for a mismatch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "io/file_jobs.h"

namespace ckpt::io {

// kInvalidArgument unless the job has one list per segment, each empty or with one checksum per block.
Status ValidateExpectedChecksums(const ReadJob& job);

// kCorrupt naming the job's file, the segment, the block and its file bytes; sets *failure where non-null.
Status ChecksumMismatch(const ReadJob& job, size_t segment, uint64_t block, ReadFailure* failure);

// Checks every block of the job's segments, all of whose bytes are in: segment i at memory + its arena offset.
// The first mismatch, as ChecksumMismatch says it.
Status VerifyBlocks(const ReadJob& job, const char* memory, ReadFailure* failure);

// The checksums a write job returns: per segment, of its bytes at starts[i].
WriteResult SegmentChecksums(const std::vector<FileSegment>& segments, const std::vector<const char*>& starts,
                             uint64_t block_size);

}  // namespace ckpt::io

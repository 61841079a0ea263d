// Compressed file jobs (WriteJob::codec, ReadJob::codec): an executor in front of another that compresses a write
// job's blocks into a buffer of its own and has the other write that buffer where the file's previous job ended,
// and that reads a compressed segment's stored bytes through the other into a buffer, decompressing and verifying
// each block into the segment's memory. Jobs without a codec pass through unchanged.
#pragma once

#include <cstdint>
#include <memory>

#include "io/file_jobs.h"

namespace ckpt::io {

// `arena`, `arena_size`: the staging arena that `inner`'s Write and Read use (null, 0: caller memory only).
std::unique_ptr<FileJobExecutor> CodeBlocks(std::unique_ptr<FileJobExecutor> inner, char* arena, uint64_t arena_size);

}  // namespace ckpt::io

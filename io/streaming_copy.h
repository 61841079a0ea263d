// Copies into memory that is written once and not read again soon, such as the tensors a load fills: the bulk goes
// through non-temporal stores, which write whole cache lines to memory without first reading the destination's
// lines in. A plain copy reads every destination line before overwriting it, a third of the memory traffic of a
// copy whose source is already in the cache (as a load's is, just after its checksum).
#pragma once

#include <cstddef>

#include "io/checksum.h"

namespace ckpt::io {

// Copies below this size go through memcpy: their destination is likely to be read soon, and in the cache.
inline constexpr size_t kStreamingCopyMinBytes = 64 * 1024;

// memcpy's contract (no overlap); the destination is not left in the cache.
void StreamingCopy(void* dst, const void* src, size_t size);

// StreamingCopy that also feeds the bytes to `checksummer`, without reading them from memory a second time: whole
// blocks from a block's start are copied and hashed in one pass where the CPU can (BlockChecksummer::
// CopyWholeBlocks), and the rest piece by piece, each piece hashed from the source just after its copy, while it is
// in the cache. A 1 GiB save on the RAM disk spent 0.087-0.100 CPU seconds in its rank and workers so, against
// 0.126-0.157 copying in the rank and hashing the copy from memory in a worker, and blocked its caller as long
// (73-88 ms against 70-81). The source must not change meanwhile: the pieces' checksums are the copy's only if they
// are the source's.
void StreamingCopyChecksummed(void* dst, const void* src, size_t size, BlockChecksummer& checksummer);

}  // namespace ckpt::io

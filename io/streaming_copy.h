// Copies into memory that is written once and not read again soon, such as the tensors a load fills: the bulk goes
// through non-temporal stores, which write whole cache lines to memory without first reading the destination's
// lines in. A plain copy reads every destination line before overwriting it, a third of the memory traffic of a
// copy whose source is already in the cache (as a load's is, just after its checksum).
#pragma once

#include <cstddef>

namespace ckpt::io {

// Copies below this size go through memcpy: their destination is likely to be read soon, and in the cache.
inline constexpr size_t kStreamingCopyMinBytes = 64 * 1024;

// memcpy's contract (no overlap); the destination is not left in the cache.
void StreamingCopy(void* dst, const void* src, size_t size);

}  // namespace ckpt::io

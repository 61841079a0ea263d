// Writes one safetensors file of an export: the header, then the tensors' bytes, window by window. Each window is
// filled by a load from the checkpoint (the load engine's direct, parallel, checksummed reads, and its dtype casts)
// into flattened shards that lie in the window's buffer, while the window before it is written with direct I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/core/context.h"
#include "runtime/format/checkpoint_source.h"

namespace ckpt::runtime {

// A tensor as exported: its record and the dtype it is written in.
struct ExportedTensor {
  const TensorRecord* record = nullptr;
  int32_t dtype = 0;
  uint64_t bytes() const;
};

// Writes `path` (a new file, kAlreadyExists if one is there): `header` (EncodeSafetensorsHeader's bytes), then
// every tensor of `tensors` packed in order. `ctx` is a one-rank context; `source` is the opened checkpoint (named
// `checkpoint` in messages). Windows are `window_bytes` rounded up to 4096; two are in memory at a time. The file
// is synced before this returns; on failure it is removed. An object storage URL is written as one upload instead.
Status WriteExportFile(Context& ctx, const CheckpointSource& source, const std::string& checkpoint,
                       const std::string& path, const std::string& header, const std::vector<ExportedTensor>& tensors,
                       uint64_t window_bytes);

}  // namespace ckpt::runtime

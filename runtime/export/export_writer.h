// Writes one safetensors file of an export: the header, then the tensors' bytes, window by window. Each window is
// filled by reading the checkpoint's chunks straight into it, in this process (runtime/load/chunk_fetcher.h's
// FetchChunksInProcess: direct, checksummed reads, no staging arena), its values converted where the export changes
// a tensor's dtype, while the windows before it are written, in order, by a thread of its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "io/file_jobs.h"
#include "runtime/format/checkpoint_source.h"

namespace ckpt::runtime {

// A tensor as exported: its record and the dtype it is written in.
struct ExportedTensor {
  const TensorRecord* record = nullptr;
  int32_t dtype = 0;
  uint64_t bytes() const;
};

// Writes `path` (a new file, kAlreadyExists if one is there): `header` (EncodeSafetensorsHeader's bytes), then
// every tensor of `tensors` packed in order, reading and writing as `tuning` says. `source` is the opened checkpoint
// (named `checkpoint` in messages). Windows are `window_bytes` rounded up to 4096, laid from where the data starts,
// so that a window's tensor bytes keep the alignment they have in the file; a few are in memory at a time. The file
// is synced before this returns; on failure it is removed. An object storage URL is written as one upload instead.
Status WriteExportFile(const io::IoTuning& tuning, const CheckpointSource& source, const std::string& checkpoint,
                       const std::string& path, const std::string& header, const std::vector<ExportedTensor>& tensors,
                       uint64_t window_bytes);

}  // namespace ckpt::runtime

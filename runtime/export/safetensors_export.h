// Export of a committed checkpoint to safetensors: one file, or the Hugging Face sharded layout (numbered files
// and model.safetensors.index.json). Tensors are written whole, merged from however many chunks saved them, and
// streamed through bounded windows (runtime/export/export_writer.h), so memory does not grow with the largest tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace ckpt::runtime {

inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000;  // Hugging Face's usual "5GB"
// A few windows are in memory at once (runtime/export/export_writer.h): one filled while the others are written.
// Small ones cost little more per byte (a window's fixed cost is about 50 us) and commit less memory: 256 MiB exported
// on the RAM disk in 114-119 ms with 8 MiB windows, 130-136 with 16 (the pages of 64 MiB of windows took 17-25 ms).
inline constexpr uint64_t kDefaultExportWindowBytes = 8ull << 20;
// The data of every exported file starts at a multiple of this (the header is padded with spaces), so that the
// files can be read with O_DIRECT.
inline constexpr uint64_t kExportDataAlignment = 4096;

struct ExportOptions {
  // Files of the sharded layout hold at most this many bytes of data (a larger tensor gets a file of its own);
  // 0 puts everything in one file.
  uint64_t max_shard_bytes = kDefaultMaxShardBytes;
  std::vector<std::string> keys;  // the tensors to export; empty: all
  // Several processes may share one export: each writes the files whose index is part_index modulo part_count,
  // and part 0 also writes the index. Every process plans the same files, so each byte is written once.
  uint32_t part_index = 0;
  uint32_t part_count = 1;
  uint64_t window_bytes = kDefaultExportWindowBytes;  // filled while those before are written (four in memory)
  // 0: as stored. A floating dtype (F16, BF16, F32, F64): floating tensors are converted to it, others kept.
  int32_t dtype = 0;
};

struct ExportedFile {
  std::string name;  // relative to the output directory
  uint64_t tensor_count = 0;
  uint64_t data_bytes = 0;
  bool written_here = false;  // false when another part writes it
};

struct ExportSummary {
  std::vector<ExportedFile> files;
  uint64_t tensor_count = 0;
  uint64_t data_bytes = 0;
  bool wrote_index = false;
};

// Exports the tensors of `reader`'s checkpoint. `out` ending in ".safetensors" is one file (max_shard_bytes does not
// apply); otherwise `out` is a directory, created if needed, that receives model.safetensors when the data fits in one
// file and model-NNNNN-of-NNNNN.safetensors plus model.safetensors.index.json otherwise. The files' __metadata__
// carries the checkpoint's user metadata, and "format": "pt" unless the metadata names a format, since Hugging Face's
// loaders insist on one. Every file is written under a temporary name, synced and published durably
// (io/durable_publish.h), and every directory the export creates has its parent synced; an existing file of the
// same name is never replaced, and an output directory holding safetensors files or an index that this export would not
// write is refused (kAlreadyExists), so that two models never mix. Objects and common entries are not tensors and are
// left out. Every file's header is encoded before anything is written, and nothing is written if one cannot be
// (EncodeSafetensorsHeader): a tensor whose dtype safetensors cannot name, or named "__metadata__", is kUnsupported; so
// a written header is always one that safetensors readers, ckpt's among them, accept. `checkpoint` is a ckpt checkpoint
// or safetensors weights (runtime/format/checkpoint_source.h).
Result<ExportSummary> ExportSafetensors(const std::string& checkpoint, const std::string& out,
                                        const ExportOptions& options);

}  // namespace ckpt::runtime

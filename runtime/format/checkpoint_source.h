// What a load or a reader may be pointed at: a ckpt checkpoint directory (its MANIFEST), or safetensors weights as
// published: one .safetensors file, a Hugging Face directory (model.safetensors, or numbered files and
// model.safetensors.index.json), or that index file itself. Safetensors are described by the same in-memory
// Manifest, one chunk per tensor, so every layout of ranks loads them through the same planner and read-once
// exchange as a native checkpoint.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "runtime/format/manifest.h"

namespace ckpt::runtime {

// The planning granularity of safetensors chunks, which carry no checksums: a read covers whole such blocks.
inline constexpr uint64_t kForeignBlockSize = 4ull << 20;

struct CheckpointSource {
  std::string dir;    // the directory the manifest's file names are relative to
  Manifest manifest;  // for safetensors: one unverified chunk (no block checksums) per tensor
  bool safetensors = false;
  // Opened with ChunkDecoding::kOnDemand: the tensors' chunks not decoded yet (ChunkDecoderOf). Null: all are.
  std::unique_ptr<EncodedChunks> encoded_chunks;
};

// Whether a ckpt checkpoint's tensors' chunks are decoded when it is opened, or as a load asks for them
// (DecodeManifestWithoutChunks): a rank of a large job needs only those of the tensors it plans and reads.
enum class ChunkDecoding { kAll, kOnDemand };

// Opens `path` as described above. A directory with a MANIFEST is a ckpt checkpoint whatever else it holds. For
// safetensors every file's header is parsed defensively (runtime/format/safetensors.h); a tensor found in two files, an
// index naming a tensor its file lacks, or a file holding a tensor the index does not list is kCorrupt. Their
// __metadata__ becomes the user metadata (the first file naming a key wins). kNotFound when `path` is none of these.
Result<CheckpointSource> OpenCheckpointSource(const std::string& path, ChunkDecoding chunks = ChunkDecoding::kAll);

// Decodes into `source.manifest` the chunks of the tensors asked for, where they are not yet; `source` must outlive
// the decoder.
ChunkDecoder ChunkDecoderOf(CheckpointSource& source);

}  // namespace ckpt::runtime

// The checks DecodeManifest makes of a decoded manifest (runtime/format/manifest.h lists them), in two parts: what
// every rank of a load relies on (files, keys, tensors' dtypes and shapes, objects, common entries), and the chunks of
// one tensor, which a rank checks only for the tensors it plans or reads (DecodeManifestWithoutChunks).
#pragma once

#include <vector>

#include "common/status.h"
#include "runtime/format/manifest.h"

namespace ckpt::runtime {

// Everything the loaders rely on without checking again.
Status ValidateManifest(const Manifest& manifest);
// The same except the tensors' chunks, which may not be decoded yet.
Status ValidateManifestWithoutChunks(const Manifest& manifest);
// One tensor's chunks, against its (already checked) dtype and shape: inside the tensor, byte lengths matching,
// byte ranges inside the data files, checksum counts, tiling the tensor without gaps or overlaps.
Status ValidateTensorChunks(const TensorRecord& tensor, const std::vector<DataFileRecord>& files);
// Chunk `chunk` of the tensor alone: all of the above but the tiling, which only the tensor's chunks together show.
Status ValidateChunkRecord(const TensorRecord& tensor, size_t chunk, const std::vector<DataFileRecord>& files);

}  // namespace ckpt::runtime

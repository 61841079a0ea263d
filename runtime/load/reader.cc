#include "runtime/load/reader.h"

#include <algorithm>

#include "runtime/core/dtype.h"
#include "runtime/core/state.h"
#include "runtime/format/checkpoint_source.h"

namespace ckpt::runtime {

CheckpointReader::CheckpointReader(std::string dir, Manifest manifest)
    : dir_(std::move(dir)), manifest_(std::move(manifest)), files_(dir_, manifest_) {}

Result<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(const std::string& path) {
  ASSIGN_OR_RETURN(CheckpointSource source, OpenCheckpointSource(path));
  return std::unique_ptr<CheckpointReader>(new CheckpointReader(std::move(source.dir), std::move(source.manifest)));
}

Status CheckpointReader::ReadBox(const std::string& key, const Box& box, void* buffer, uint64_t buffer_size) {
  auto it = std::lower_bound(manifest_.tensors.begin(), manifest_.tensors.end(), key,
                             [](const TensorRecord& t, const std::string& k) { return t.key < k; });
  if (it == manifest_.tensors.end() || it->key != key) {
    return NotFound("tensor '" + key + "' is not in the checkpoint at " + dir_);
  }
  if (box.ndim() != it->shape.size() || !Contains(WholeBox(it->shape), box)) {
    return InvalidArgument("tensor '" + key + "': box " + box.ToString() + " is not inside its shape " +
                           ShapeToString(it->shape));
  }
  const uint64_t expected = box.volume() * DTypeSize(it->dtype);
  if (buffer_size != expected) {
    return InvalidArgument("tensor '" + key + "': the buffer has " + std::to_string(buffer_size) +
                           " bytes, the box needs " + std::to_string(expected));
  }
  if (box.empty()) return Status::Ok();
  return ReadTensorRegion(files_, *it, box, buffer, box);
}

Result<const std::string*> CheckpointReader::Common(const std::string& key) {
  for (const CommonRecord& c : manifest_.common) {
    if (c.key != key) continue;
    if (c.is_inline) return &c.inline_bytes;
    auto cached = stored_common_.find(key);
    if (cached == stored_common_.end()) {
      ASSIGN_OR_RETURN(std::string bytes, ReadStoredBytes(files_, c.stored, "common '" + key + "'"));
      cached = stored_common_.emplace(key, std::move(bytes)).first;
    }
    return &cached->second;
  }
  return NotFound("common entry '" + key + "' is not in the checkpoint at " + dir_);
}

Status CheckpointReader::Verify() {
  for (uint32_t f = 0; f < manifest_.files.size(); ++f) RETURN_IF_ERROR(files_.Open(f).status());
  for (const TensorRecord& t : manifest_.tensors) {
    for (const ChunkRecord& c : t.chunks) {
      RETURN_IF_ERROR(VerifyStoredBytes(files_, c.bytes, "tensor '" + t.key + "' chunk " + c.box.ToString()));
    }
  }
  for (const ObjectRecord& o : manifest_.objects) {
    for (const ObjectPieceRecord& p : o.pieces) {
      RETURN_IF_ERROR(VerifyStoredBytes(files_, p.bytes, "object '" + o.key + "' cell " + ShapeToString(p.index)));
    }
  }
  for (const CommonRecord& c : manifest_.common) {
    if (!c.is_inline) RETURN_IF_ERROR(VerifyStoredBytes(files_, c.stored, "common '" + c.key + "'"));
  }
  return Status::Ok();
}

}  // namespace ckpt::runtime

#include "runtime/core/state.h"

#include "common/key_text.h"
#include "gpu/device_copy.h"
#include "runtime/core/dtype.h"

namespace ckpt::runtime {
namespace {

constexpr size_t kMaxKeyBytes = 4096;

Status CheckKey(const std::string& key, const char* what) {
  if (key.empty()) return InvalidArgument(std::string(what) + " key is empty");
  if (key.size() > kMaxKeyBytes) return InvalidArgument(std::string(what) + " key is longer than 4096 bytes");
  return CheckKeyText(key, std::string(what) + " key", Code::kInvalidArgument);
}

// "tensor 'a\nb'": how messages name a registered key, escaped (common/key_text.h).
std::string Named(const char* kind, const std::string& key) { return std::string(kind) + " " + Quoted(key); }

Status CheckBoxInShape(const std::string& key, const Shape& global_shape, const Box& box) {
  for (size_t d = 0; d < box.ndim(); ++d) {
    if (box.offset[d] > global_shape[d] || box.shape[d] > global_shape[d] - box.offset[d]) {
      return InvalidArgument(Named("tensor", key) + ": box " + box.ToString() + " lies outside the global shape " +
                             ShapeToString(global_shape));
    }
  }
  return Status::Ok();
}

// The byte count the caller's buffer must have: elements of the box, or of the flattened range.
Result<uint64_t> ExpectedBytes(const TensorShard& s) {
  uint64_t elements = s.flattened ? s.flat_end - s.flat_start : s.box.volume();
  uint64_t size = DTypeSize(s.dtype);
  if (elements != 0 && size > UINT64_MAX / elements) {
    return InvalidArgument(Named("tensor", s.key) + ": byte size overflows 64 bits");
  }
  return elements * size;
}

// `other` has the same key.
Status CheckConsistentWith(const TensorShard& s, const TensorShard& other) {
  if (other.dtype != s.dtype || other.global_shape != s.global_shape) {
    return InvalidArgument(Named("tensor", s.key) +
                           " registered twice on this rank with different dtype or global shape (" +
                           DTypeName(other.dtype) + " " + ShapeToString(other.global_shape) + " vs " +
                           DTypeName(s.dtype) + " " + ShapeToString(s.global_shape) + ")");
  }
  for (const auto& mine : s.pieces) {
    for (const auto& theirs : other.pieces) {
      if (auto overlap = Intersect(mine.box, theirs.box)) {
        return InvalidArgument(Named("tensor", s.key) + ": this rank registers the elements " + overlap->ToString() +
                               " twice");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

std::string ShapeToString(const Shape& shape) {
  std::string out = "[";
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d) out += ", ";
    out += std::to_string(shape[d]);
  }
  return out + "]";
}

Status State::AddTensor(TensorShard s) {
  RETURN_IF_ERROR(CheckKey(s.key, "tensor"));
  const std::string name = Named("tensor", s.key);
  if (!IsValidDType(s.dtype)) return InvalidArgument(name + ": unknown dtype " + std::to_string(s.dtype));
  if (s.global_shape.size() > kMaxDims) {
    return InvalidArgument(name + ": " + std::to_string(s.global_shape.size()) + " dimensions, at most 8 allowed");
  }
  if (s.box.shape.size() != s.global_shape.size() || s.box.offset.size() != s.global_shape.size()) {
    return InvalidArgument(name + ": local shape and offset must have the global shape's rank");
  }
  if (!VolumeFits(s.global_shape, DTypeSize(s.dtype))) return InvalidArgument(name + ": global shape too large");
  RETURN_IF_ERROR(CheckBoxInShape(s.key, s.global_shape, s.box));
  if (s.flattened && (s.flat_start > s.flat_end || s.flat_end > s.box.volume())) {
    return InvalidArgument(name + ": flattened range [" + std::to_string(s.flat_start) + ", " +
                           std::to_string(s.flat_end) + ") is outside its box of " + std::to_string(s.box.volume()) +
                           " elements");
  }
  ASSIGN_OR_RETURN(uint64_t expected, ExpectedBytes(s));
  if (s.data_size != expected) {
    return InvalidArgument(name + ": data_size is " + std::to_string(s.data_size) + " bytes, the shard holds " +
                           std::to_string(expected));
  }
  if (s.data == nullptr && expected != 0) return InvalidArgument(name + ": data is NULL");
  if (s.device >= 0) RETURN_IF_ERROR(gpu::CheckDeviceShard(s.data, s.device, s.key));
  if (s.flattened) {
    s.pieces = DecomposeFlatRange(s.box, s.flat_start, s.flat_end);
  } else {
    s.pieces = {FlatPiece{s.box, 0}};
  }
  auto& same_key = tensors_by_key_[s.key];
  for (size_t i : same_key) RETURN_IF_ERROR(CheckConsistentWith(s, tensors_[i]));
  same_key.push_back(tensors_.size());
  tensors_.push_back(std::move(s));
  return Status::Ok();
}

const std::vector<size_t>& State::TensorsWithKey(const std::string& key) const {
  static const std::vector<size_t> kNone;
  auto it = tensors_by_key_.find(key);
  return it == tensors_by_key_.end() ? kNone : it->second;
}

Status State::AddObject(ObjectShard o) {
  RETURN_IF_ERROR(CheckKey(o.key, "object"));
  const std::string name = Named("object", o.key);
  if (o.grid_shape.size() > kMaxDims || o.index.size() != o.grid_shape.size()) {
    return InvalidArgument(name + ": grid index and shape must have the same rank, at most 8");
  }
  for (size_t d = 0; d < o.index.size(); ++d) {
    if (o.index[d] >= o.grid_shape[d]) {
      return InvalidArgument(name + ": index " + ShapeToString(o.index) + " outside grid " +
                             ShapeToString(o.grid_shape));
    }
  }
  if (o.data == nullptr && o.size != 0) return InvalidArgument(name + ": size is nonzero but data is NULL");
  for (const auto& other : objects_) {
    if (other.key == o.key && other.index == o.index) {
      return InvalidArgument(name + ": cell " + ShapeToString(o.index) + " registered twice on this rank");
    }
    if (other.key == o.key && other.grid_shape != o.grid_shape) {
      return InvalidArgument(name + ": registered with two grid shapes on this rank");
    }
  }
  objects_.push_back(std::move(o));
  return Status::Ok();
}

Status State::AddCommon(std::string key, std::string bytes) {
  RETURN_IF_ERROR(CheckKey(key, "common"));
  if (!common_.emplace(key, std::move(bytes)).second) {
    return InvalidArgument(Named("common", key) + " registered twice");
  }
  return Status::Ok();
}

RankDescriptor State::Describe(int rank, const std::string& node) const {
  RankDescriptor desc;
  desc.rank = rank;
  desc.node = node;
  for (const auto& s : tensors_) {
    for (const auto& piece : s.pieces) {
      desc.tensors.push_back(TensorShardDesc{s.key, s.dtype, s.global_shape, piece.box, s.replica_id});
    }
  }
  for (const auto& o : objects_) {
    desc.objects.push_back(ObjectShardDesc{o.key, o.grid_shape, o.index, o.size});
  }
  return desc;
}

}  // namespace ckpt::runtime

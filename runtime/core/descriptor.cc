#include "runtime/core/descriptor.h"

#include <string>

#include "common/bytes.h"
#include "runtime/core/dtype.h"

namespace ckpt::runtime {
namespace {

constexpr uint32_t kMaxReplicaIdLength = 16;
constexpr uint32_t kMaxShardsPerRank = 1u << 24;
// Smallest encoding of one tensor shard (key length, dtype, four counts) and of one object cell (key length, two
// counts, size): the reader bounds each count by what is left before allocating.
constexpr size_t kMinTensorShardBytes = 8 + 4 + 4 * 4;
constexpr size_t kMinObjectShardBytes = 8 + 2 * 4 + 8;

void EncodeTensor(const TensorShardDesc& t, ByteWriter* w) {
  w->Bytes(t.key);
  w->I32(t.dtype);
  w->U64s(t.global_shape);
  w->U64s(t.box.offset);
  w->U64s(t.box.shape);
  w->U32s(t.replica_id);
}

void EncodeObject(const ObjectShardDesc& o, ByteWriter* w) {
  w->Bytes(o.key);
  w->U64s(o.grid_shape);
  w->U64s(o.index);
  w->U64(o.size);
}

// Reads a list of dimensions, refusing more than kMaxDims with a message naming `what`.
Status ReadDims(ByteReader* r, const std::string& what, Shape* dims) {
  uint32_t ndim = 0;
  RETURN_IF_ERROR(r->U32(&ndim));
  if (ndim > kMaxDims) {
    return Corrupt(what + " has " + std::to_string(ndim) + " dimensions, at most " + std::to_string(kMaxDims));
  }
  dims->resize(ndim);
  for (auto& extent : *dims) RETURN_IF_ERROR(r->U64(&extent));
  return Status::Ok();
}

Status DecodeTensor(ByteReader* r, const std::string& source, TensorShardDesc* t) {
  RETURN_IF_ERROR(r->Bytes(&t->key));
  const std::string what = source + ": tensor '" + t->key + "'";
  RETURN_IF_ERROR(r->I32(&t->dtype));
  if (!IsValidDType(t->dtype)) return Corrupt(what + ": dtype " + std::to_string(t->dtype) + " is not a dtype");
  RETURN_IF_ERROR(ReadDims(r, what + " global shape", &t->global_shape));
  RETURN_IF_ERROR(ReadDims(r, what + " box offset", &t->box.offset));
  RETURN_IF_ERROR(ReadDims(r, what + " box shape", &t->box.shape));
  const size_t ndim = t->global_shape.size();
  if (t->box.offset.size() != ndim || t->box.shape.size() != ndim) {
    return Corrupt(what + ": box offset and shape have " + std::to_string(t->box.offset.size()) + " and " +
                   std::to_string(t->box.shape.size()) + " dimensions, global shape " + std::to_string(ndim));
  }
  Status status = r->U32s(&t->replica_id, kMaxReplicaIdLength);
  if (!status.ok()) return status.WithContext(what + " replica id");
  return Status::Ok();
}

Status DecodeObject(ByteReader* r, const std::string& source, ObjectShardDesc* o) {
  RETURN_IF_ERROR(r->Bytes(&o->key));
  const std::string what = source + ": object '" + o->key + "'";
  RETURN_IF_ERROR(ReadDims(r, what + " grid shape", &o->grid_shape));
  RETURN_IF_ERROR(ReadDims(r, what + " index", &o->index));
  if (o->index.size() != o->grid_shape.size()) {
    return Corrupt(what + ": index has " + std::to_string(o->index.size()) + " dimensions, grid " +
                   std::to_string(o->grid_shape.size()));
  }
  return r->U64(&o->size);
}

}  // namespace

std::string EncodeRankDescriptor(const RankDescriptor& desc) {
  ByteWriter w;
  w.I32(desc.rank);
  w.Bytes(desc.node);
  w.U32(static_cast<uint32_t>(desc.tensors.size()));
  for (const auto& t : desc.tensors) EncodeTensor(t, &w);
  w.U32(static_cast<uint32_t>(desc.objects.size()));
  for (const auto& o : desc.objects) EncodeObject(o, &w);
  return w.Take();
}

Result<RankDescriptor> DecodeRankDescriptor(std::string_view bytes, int from_rank) {
  const std::string source = "shard descriptors from rank " + std::to_string(from_rank);
  ByteReader r(bytes, source);
  RankDescriptor desc;
  RETURN_IF_ERROR(r.I32(&desc.rank));
  if (desc.rank != from_rank) return Corrupt(source + " claim rank " + std::to_string(desc.rank));
  RETURN_IF_ERROR(r.Bytes(&desc.node));
  uint32_t count = 0;
  RETURN_IF_ERROR(r.Count(&count, kMaxShardsPerRank, kMinTensorShardBytes));
  desc.tensors.resize(count);
  for (auto& t : desc.tensors) RETURN_IF_ERROR(DecodeTensor(&r, source, &t));
  RETURN_IF_ERROR(r.Count(&count, kMaxShardsPerRank, kMinObjectShardBytes));
  desc.objects.resize(count);
  for (auto& o : desc.objects) RETURN_IF_ERROR(DecodeObject(&r, source, &o));
  RETURN_IF_ERROR(r.ExpectDone());
  return desc;
}

int KeyChecker(std::string_view key, int world_size) {
  if (world_size <= 1) return 0;
  // FNV-1a, 64 bits: stable across processes and builds, unlike std::hash.
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : key) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return static_cast<int>(hash % static_cast<uint64_t>(world_size));
}

}  // namespace ckpt::runtime

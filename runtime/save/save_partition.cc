#include "runtime/save/save_partition.h"

#include <algorithm>
#include <set>
#include <utility>

#include "common/bytes.h"
#include "runtime/core/dtype.h"

namespace ckpt::runtime {
namespace {

constexpr uint32_t kMaxDims = 8;
constexpr uint32_t kMaxEntries = 1u << 26;
// Smallest encodings (empty key, no dimensions), which bound each count by what is left of the message.
constexpr size_t kMinItemBytes = 1 + 8 + 3 * 4 + 8;
constexpr size_t kMinTensorRecordBytes = 8 + 4 + 4;
constexpr size_t kMinObjectRecordBytes = 8 + 4;

Status ReadDims(ByteReader* r, Shape* dims) { return r->U64s(dims, kMaxDims); }

void EncodeItem(const WriteItem& item, ByteWriter* w) {
  w->U8(item.is_object ? 1 : 0);
  w->Bytes(item.key);
  w->U64s(item.box.offset);
  w->U64s(item.box.shape);
  w->U64s(item.index);
  w->U64(item.bytes);
}

Status DecodeItem(ByteReader* r, const std::string& source, int writer, WriteItem* item) {
  uint8_t is_object = 0;
  RETURN_IF_ERROR(r->U8(&is_object));
  item->is_object = is_object != 0;
  RETURN_IF_ERROR(r->Bytes(&item->key));
  RETURN_IF_ERROR(ReadDims(r, &item->box.offset));
  RETURN_IF_ERROR(ReadDims(r, &item->box.shape));
  RETURN_IF_ERROR(ReadDims(r, &item->index));
  RETURN_IF_ERROR(r->U64(&item->bytes));
  if (item->box.offset.size() != item->box.shape.size()) {
    return Corrupt(source + ": item of '" + item->key + "' has a box offset and shape of different lengths");
  }
  item->writer = writer;
  return Status::Ok();
}

// What an owner tells one rank: its items and the replicas it checks; to rank 0 also the owner's records (and, from
// rank 0, the node count).
struct OwnerMessage {
  std::vector<WriteItem> items;
  std::vector<WriteItem> replicas;  // writer: the rank that writes it
  std::vector<TensorRecord> tensors;
  std::vector<ObjectRecord> objects;
  uint32_t node_count = 0;
};

std::string EncodeOwnerMessage(const OwnerMessage& m) {
  ByteWriter w;
  w.U32(static_cast<uint32_t>(m.items.size()));
  for (const WriteItem& item : m.items) EncodeItem(item, &w);
  w.U32(static_cast<uint32_t>(m.replicas.size()));
  for (const WriteItem& item : m.replicas) {
    EncodeItem(item, &w);
    w.I32(item.writer);
  }
  w.U32(static_cast<uint32_t>(m.tensors.size()));
  for (const TensorRecord& t : m.tensors) {
    w.Bytes(t.key);
    w.I32(t.dtype);
    w.U64s(t.shape);
  }
  w.U32(static_cast<uint32_t>(m.objects.size()));
  for (const ObjectRecord& o : m.objects) {
    w.Bytes(o.key);
    w.U64s(o.grid_shape);
  }
  w.U32(m.node_count);
  return w.Take();
}

Result<OwnerMessage> DecodeOwnerMessage(std::string_view bytes, int owner, int rank, int world_size) {
  const std::string source = "save plan from rank " + std::to_string(owner);
  ByteReader r(bytes, source);
  OwnerMessage m;
  uint32_t count = 0;
  RETURN_IF_ERROR(r.Count(&count, kMaxEntries, kMinItemBytes));
  m.items.resize(count);
  for (WriteItem& item : m.items) RETURN_IF_ERROR(DecodeItem(&r, source, rank, &item));
  RETURN_IF_ERROR(r.Count(&count, kMaxEntries, kMinItemBytes + 4));
  m.replicas.resize(count);
  for (WriteItem& item : m.replicas) {
    int32_t writer = 0;
    RETURN_IF_ERROR(DecodeItem(&r, source, rank, &item));
    RETURN_IF_ERROR(r.I32(&writer));
    if (writer < 0 || writer >= world_size || writer == rank) {
      return Corrupt(source + ": rank " + std::to_string(rank) + " is to check its replica of '" + item.key +
                     "' against rank " + std::to_string(writer) + "'s copy");
    }
    item.writer = writer;
  }
  RETURN_IF_ERROR(r.Count(&count, kMaxEntries, kMinTensorRecordBytes));
  m.tensors.resize(count);
  for (TensorRecord& t : m.tensors) {
    RETURN_IF_ERROR(r.Bytes(&t.key));
    RETURN_IF_ERROR(r.I32(&t.dtype));
    if (!IsValidDType(t.dtype)) return Corrupt(source + ": tensor '" + t.key + "' has no valid dtype");
    RETURN_IF_ERROR(ReadDims(&r, &t.shape));
  }
  RETURN_IF_ERROR(r.Count(&count, kMaxEntries, kMinObjectRecordBytes));
  m.objects.resize(count);
  for (ObjectRecord& o : m.objects) {
    RETURN_IF_ERROR(r.Bytes(&o.key));
    RETURN_IF_ERROR(ReadDims(&r, &o.grid_shape));
  }
  RETURN_IF_ERROR(r.U32(&m.node_count));
  RETURN_IF_ERROR(r.ExpectDone());
  if ((!m.tensors.empty() || !m.objects.empty() || m.node_count != 0) && rank != 0) {
    return Corrupt(source + ": manifest records sent to rank " + std::to_string(rank) + ", not to rank 0");
  }
  return m;
}

}  // namespace

std::vector<std::string> PartitionDescriptor(const RankDescriptor& mine, int world_size) {
  std::vector<RankDescriptor> parts(world_size);
  for (const TensorShardDesc& t : mine.tensors) parts[KeyChecker(t.key, world_size)].tensors.push_back(t);
  for (const ObjectShardDesc& o : mine.objects) parts[KeyChecker(o.key, world_size)].objects.push_back(o);
  std::vector<std::string> messages(world_size);
  for (int owner = 0; owner < world_size; ++owner) {
    RankDescriptor& part = parts[owner];
    if (owner != 0 && part.tensors.empty() && part.objects.empty()) continue;
    part.rank = mine.rank;
    part.node = mine.node;
    messages[owner] = EncodeRankDescriptor(part);
  }
  return messages;
}

Result<std::vector<RankDescriptor>> DecodeOwnedDescriptors(const std::vector<std::string>& incoming, int owner) {
  const int world_size = static_cast<int>(incoming.size());
  std::vector<RankDescriptor> owned(world_size);
  for (int from = 0; from < world_size; ++from) {
    owned[from].rank = from;
    if (incoming[from].empty()) continue;
    ASSIGN_OR_RETURN(owned[from], DecodeRankDescriptor(incoming[from], from));
    auto foreign = [&](const std::string& key) -> Status {
      if (KeyChecker(key, world_size) == owner) return Status::Ok();
      return Corrupt("shard descriptors from rank " + std::to_string(from) + " give key '" + key + "' to rank " +
                     std::to_string(owner) + ", which does not own it");
    };
    for (const TensorShardDesc& t : owned[from].tensors) RETURN_IF_ERROR(foreign(t.key));
    for (const ObjectShardDesc& o : owned[from].objects) RETURN_IF_ERROR(foreign(o.key));
  }
  return owned;
}

std::vector<std::string> RouteWriteItems(const SavePlan& owned_plan, const std::vector<RankDescriptor>& owned,
                                         int owner) {
  const int world_size = static_cast<int>(owned.size());
  std::vector<OwnerMessage> messages(world_size);
  for (const WriteItem& item : owned_plan.items) messages[item.writer].items.push_back(item);
  for (const ReplicaCheck& check : owned_plan.replicas) messages[check.holder].replicas.push_back(check.item);
  // Each key once, with the dtype and global shape every holder agreed on (ValidateCoverage).
  std::set<std::string> seen;
  std::set<std::string> nodes;
  for (const RankDescriptor& d : owned) {
    if (!d.node.empty()) nodes.insert(d.node);
    for (const TensorShardDesc& t : d.tensors) {
      if (seen.insert(t.key).second) messages[0].tensors.push_back(TensorRecord{t.key, t.dtype, t.global_shape, {}});
    }
    for (const ObjectShardDesc& o : d.objects) {
      if (seen.insert(o.key).second) messages[0].objects.push_back(ObjectRecord{o.key, o.grid_shape, {}});
    }
  }
  // Every rank sends rank 0 a descriptor, so only rank 0 as an owner has seen every node.
  if (owner == 0) messages[0].node_count = static_cast<uint32_t>(nodes.size());
  std::vector<std::string> encoded(world_size);
  for (int writer = 0; writer < world_size; ++writer) {
    const OwnerMessage& m = messages[writer];
    if (m.items.empty() && m.replicas.empty() && m.tensors.empty() && m.objects.empty() && m.node_count == 0) {
      continue;
    }
    encoded[writer] = EncodeOwnerMessage(m);
  }
  return encoded;
}

Result<SavePlan> MergeWriteItems(const std::vector<std::string>& incoming, int rank, ManifestSkeleton* skeleton) {
  SavePlan plan;
  plan.bytes_per_rank.assign(incoming.size(), 0);
  for (size_t owner = 0; owner < incoming.size(); ++owner) {
    if (incoming[owner].empty()) continue;
    ASSIGN_OR_RETURN(OwnerMessage m, DecodeOwnerMessage(incoming[owner], static_cast<int>(owner), rank,
                                                        static_cast<int>(incoming.size())));
    for (WriteItem& item : m.items) {
      plan.bytes_per_rank[rank] += item.bytes;
      plan.items.push_back(std::move(item));
    }
    for (WriteItem& item : m.replicas) plan.replicas.push_back(ReplicaCheck{std::move(item), rank});
    if (skeleton == nullptr) continue;
    for (TensorRecord& t : m.tensors) skeleton->tensors.push_back(std::move(t));
    for (ObjectRecord& o : m.objects) skeleton->objects.push_back(std::move(o));
    if (owner == 0) skeleton->node_count = m.node_count;
  }
  std::sort(plan.items.begin(), plan.items.end(), WriteItemLess);
  std::sort(plan.replicas.begin(), plan.replicas.end(),
            [](const ReplicaCheck& a, const ReplicaCheck& b) { return WriteItemLess(a.item, b.item); });
  if (skeleton != nullptr) {
    auto by_key = [](const auto& a, const auto& b) { return a.key < b.key; };
    std::sort(skeleton->tensors.begin(), skeleton->tensors.end(), by_key);
    std::sort(skeleton->objects.begin(), skeleton->objects.end(), by_key);
  }
  return plan;
}

}  // namespace ckpt::runtime

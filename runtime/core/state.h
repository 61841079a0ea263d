// What one rank registers: tensor shards (decomposed into regular boxes), object shards and common bytes.
// Everything a rank can check alone is checked when a shard is added, so a bad state fails at the call that
// registered it, with the key named.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/core/box.h"
#include "runtime/core/descriptor.h"

namespace ckpt::runtime {

struct TensorShard {
  std::string key;
  int32_t dtype = 0;
  Shape global_shape;
  Box box;  // the box this rank holds (for a flattened shard, the box its range is taken from)
  std::vector<uint32_t> replica_id;
  bool flattened = false;
  uint64_t flat_start = 0;
  uint64_t flat_end = 0;
  bool allow_shape_mismatch = false;
  bool allow_dtype_cast = false;  // load only: `data` takes the stored values converted to `dtype`
  bool compress = false;          // save only: stored compressed (CKPT_SHARD_COMPRESS)
  void* data = nullptr;
  uint64_t data_size = 0;
  int device = -1;  // the CUDA device holding `data`; -1: host memory
  // The regular boxes the shard's data forms; range_offset is in elements from `data`.
  std::vector<FlatPiece> pieces;
};

struct ObjectShard {
  std::string key;
  Shape grid_shape;
  Shape index;
  void* data = nullptr;  // NULL at load: the bytes land in `loaded`
  uint64_t size = 0;
  std::string loaded;
};

class State {
 public:
  // Validates the shard alone and against the shards already registered, and computes its pieces.
  Status AddTensor(TensorShard shard);
  Status AddObject(ObjectShard shard);
  Status AddCommon(std::string key, std::string bytes);

  const std::vector<TensorShard>& tensors() const { return tensors_; }
  // Indexes into tensors() of the shards registered under `key` (empty if none).
  const std::vector<size_t>& TensorsWithKey(const std::string& key) const;
  std::vector<ObjectShard>& objects() { return objects_; }
  const std::vector<ObjectShard>& objects() const { return objects_; }
  std::map<std::string, std::string>& common() { return common_; }
  const std::map<std::string, std::string>& common() const { return common_; }

  // The compact description of this state exchanged at plan time.
  RankDescriptor Describe(int rank, const std::string& node) const;

 private:
  std::vector<TensorShard> tensors_;
  std::map<std::string, std::vector<size_t>> tensors_by_key_;
  std::vector<ObjectShard> objects_;
  std::map<std::string, std::string> common_;
};

// "[4, 8]"
std::string ShapeToString(const Shape& shape);

}  // namespace ckpt::runtime

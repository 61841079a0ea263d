// The shard descriptors: what each rank tells the others it holds (tensor boxes and object cells, no data), their
// compact encoding for the collectives, and which rank checks each key. The save plans from them; the load routes
// its requests by the same checker.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "runtime/core/box.h"

namespace ckpt::runtime {

// One regular box a rank holds (a flattened shard contributes its decomposed pieces). No data pointers.
struct TensorShardDesc {
  std::string key;
  int32_t dtype = 0;
  Shape global_shape;
  Box box;
  std::vector<uint32_t> replica_id;
};

struct ObjectShardDesc {
  std::string key;
  Shape grid_shape;
  Shape index;
  uint64_t size = 0;
};

struct RankDescriptor {
  int rank = 0;
  std::string node;
  std::vector<TensorShardDesc> tensors;
  std::vector<ObjectShardDesc> objects;
};

std::string EncodeRankDescriptor(const RankDescriptor& desc);
// Length- and range-checked: a short or hostile message is kCorrupt naming `from_rank`; ndim above 8 and dtypes out
// of range are refused.
Result<RankDescriptor> DecodeRankDescriptor(std::string_view bytes, int from_rank);

// The rank that checks `key` (a stable hash modulo the world), so the check is spread over all ranks.
int KeyChecker(std::string_view key, int world_size);

}  // namespace ckpt::runtime

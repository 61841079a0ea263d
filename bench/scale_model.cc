#include "bench/scale_model.h"

#include <algorithm>

#include "runtime/core/dtype.h"

namespace ckpt::bench {
namespace {

constexpr int kLayers = 96;
constexpr uint64_t kHidden = 12288;
constexpr uint64_t kVocabulary = 51200;
constexpr int kRanksPerNode = 8;
constexpr uint64_t kRngStateBytes = 4096;
constexpr int32_t kBf16 = 11;  // CKPT_DTYPE_BF16
constexpr int32_t kF32 = 12;   // CKPT_DTYPE_F32
const char* const kOptimizerStates[] = {"master", "exp_avg", "exp_avg_sq"};

// One parameter: its global shape, the dimension tensor parallelism splits (-1: every tensor rank holds it whole),
// and the pipeline stage's position: a layer, or before (-1) or after (kLayers) every layer.
struct Parameter {
  std::string name;
  runtime::Shape shape;
  int split_dim;
  int layer;
};

const std::vector<Parameter>& Parameters() {
  static const std::vector<Parameter> parameters = [] {
    std::vector<Parameter> list{{"embedding.weight", {kVocabulary, kHidden}, 0, -1}};
    const uint64_t h = kHidden;
    for (int l = 0; l < kLayers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      for (const Parameter& parameter : std::vector<Parameter>{{p + "attn.qkv.weight", {3 * h, h}, 0, l},
                                                               {p + "attn.qkv.bias", {3 * h}, 0, l},
                                                               {p + "attn.proj.weight", {h, h}, 1, l},
                                                               {p + "attn.proj.bias", {h}, -1, l},
                                                               {p + "mlp.fc1.weight", {4 * h, h}, 0, l},
                                                               {p + "mlp.fc1.bias", {4 * h}, 0, l},
                                                               {p + "mlp.fc2.weight", {h, 4 * h}, 1, l},
                                                               {p + "mlp.fc2.bias", {h}, -1, l},
                                                               {p + "ln1.weight", {h}, -1, l},
                                                               {p + "ln1.bias", {h}, -1, l},
                                                               {p + "ln2.weight", {h}, -1, l},
                                                               {p + "ln2.bias", {h}, -1, l}}) {
        list.push_back(parameter);
      }
    }
    list.push_back({"final_ln.weight", {h}, -1, kLayers});
    list.push_back({"final_ln.bias", {h}, -1, kLayers});
    return list;
  }();
  return parameters;
}

struct Coordinates {
  int tensor, data, pipeline;
};

Coordinates CoordinatesOf(const ParallelLayout& layout, int rank) {
  return {rank % layout.tensor, (rank / layout.tensor) % layout.data, rank / (layout.tensor * layout.data)};
}

bool OnStage(const ParallelLayout& layout, const Parameter& parameter, int stage) {
  const int layers_per_stage = kLayers / layout.pipeline;
  const int layer = std::clamp(parameter.layer, 0, kLayers - 1);
  return layer / layers_per_stage == stage;
}

runtime::Box LocalBox(const ParallelLayout& layout, const Parameter& parameter, int tensor_rank) {
  runtime::Box box = runtime::WholeBox(parameter.shape);
  if (parameter.split_dim >= 0) {
    const uint64_t part = parameter.shape[parameter.split_dim] / layout.tensor;
    box.offset[parameter.split_dim] = part * tensor_rank;
    box.shape[parameter.split_dim] = part;
  }
  return box;
}

// Calls fn(key, dtype, global shape, box, replica id) for every box `rank` holds.
template <typename Fn>
void ForEachBox(const ParallelLayout& layout, int rank, Fn&& fn) {
  const Coordinates at = CoordinatesOf(layout, rank);
  for (const Parameter& parameter : Parameters()) {
    if (!OnStage(layout, parameter, at.pipeline)) continue;
    const runtime::Box local = LocalBox(layout, parameter, at.tensor);
    const uint32_t tensor_replica = parameter.split_dim < 0 ? static_cast<uint32_t>(at.tensor) : 0;
    fn("model." + parameter.name, kBf16, parameter.shape, local,
       std::vector<uint32_t>{static_cast<uint32_t>(at.data), tensor_replica});
    for (const char* state : kOptimizerStates) {
      const std::string key = std::string("optim.") + state + "." + parameter.name;
      if (!layout.distributed_optimizer) {
        fn(key, kF32, parameter.shape, local, std::vector<uint32_t>{static_cast<uint32_t>(at.data), tensor_replica});
        continue;
      }
      const uint64_t volume = local.volume();
      const uint64_t begin = volume * at.data / layout.data;
      const uint64_t end = volume * (at.data + 1) / layout.data;
      for (const runtime::FlatPiece& piece : runtime::DecomposeFlatRange(local, begin, end)) {
        fn(key, kF32, parameter.shape, piece.box, std::vector<uint32_t>{0, tensor_replica});
      }
    }
  }
}

}  // namespace

ParallelLayout LayoutFor(int world, int tensor, int pipeline, bool distributed_optimizer) {
  ParallelLayout layout;
  layout.tensor = tensor;
  layout.pipeline = pipeline;
  layout.data = std::max(1, world / (tensor * pipeline));
  layout.distributed_optimizer = distributed_optimizer;
  return layout;
}

runtime::RankDescriptor DescribeRank(const ParallelLayout& layout, int rank) {
  runtime::RankDescriptor desc;
  desc.rank = rank;
  desc.node = "node-" + std::to_string(rank / kRanksPerNode);
  ForEachBox(layout, rank,
             [&](std::string key, int32_t dtype, const runtime::Shape& shape, const runtime::Box& box,
                 std::vector<uint32_t> replica) {
               desc.tensors.push_back(runtime::TensorShardDesc{std::move(key), dtype, shape, box, std::move(replica)});
             });
  desc.objects.push_back(runtime::ObjectShardDesc{
      "rng", {static_cast<uint64_t>(layout.world())}, {static_cast<uint64_t>(rank)}, kRngStateBytes});
  return desc;
}

runtime::LoadRequest RequestOf(const ParallelLayout& layout, int rank, const runtime::Manifest& manifest) {
  runtime::LoadRequest request;
  request.rank = rank;
  request.node = "node-" + std::to_string(rank / kRanksPerNode);
  ForEachBox(
      layout, rank,
      [&](const std::string& key, int32_t, const runtime::Shape&, const runtime::Box& box,
          const std::vector<uint32_t>&) {
        const auto it =
            std::lower_bound(manifest.tensors.begin(), manifest.tensors.end(), key,
                             [](const runtime::TensorRecord& t, const std::string& k) { return t.key < k; });
        request.boxes.push_back(runtime::RequestedBox{static_cast<uint32_t>(it - manifest.tensors.begin()), box});
      });
  return request;
}

}  // namespace ckpt::bench

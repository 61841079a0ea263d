// The synthetic jobs of bench/scale: a GPT-175B-like model (96 layers, hidden 12288, vocabulary 51200) trained
// with tensor, pipeline and data parallelism, bf16 weights, and fp32 master weights with two Adam moments. With a
// distributed optimizer each data-parallel rank holds a contiguous slice of each fp32 tensor's row-major
// flattening (as Megatron-Core's does per parameter); without one it holds them whole, like the weights. One RNG
// object per rank. What each rank registers is built as the library's own State::Describe would describe it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/format/manifest.h"
#include "runtime/load/load_plan.h"
#include "runtime/save/save_plan.h"

namespace ckpt::bench {

struct ParallelLayout {
  int tensor = 8;
  int pipeline = 16;
  int data = 1;  // world / (tensor * pipeline)
  bool distributed_optimizer = true;
  int world() const { return tensor * pipeline * data; }
};

// The ranks that run a job of `world` ranks with `tensor` x `pipeline` model parallelism.
ParallelLayout LayoutFor(int world, int tensor, int pipeline, bool distributed_optimizer);

// What rank `rank` registers for a save. Ranks are numbered tensor-fastest, then data, then pipeline; eight ranks a
// node.
runtime::RankDescriptor DescribeRank(const ParallelLayout& layout, int rank);

// The boxes rank `rank` of `layout` asks for, as indices into `manifest`'s tensors.
runtime::LoadRequest RequestOf(const ParallelLayout& layout, int rank, const runtime::Manifest& manifest);

}  // namespace ckpt::bench

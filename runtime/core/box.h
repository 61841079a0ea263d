// Boxes (hyper-rectangles in a tensor's global index space) and the geometry the planner and the load engine need:
// intersection, row-major flattened ranges, and copies of a region between two row-major buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ckpt::runtime {

using Shape = std::vector<uint64_t>;

// The most dimensions a tensor or an object grid may have: ckpt.h's CKPT_MAX_NDIM, which the C API checks it equals.
constexpr size_t kMaxDims = 8;

// A box of a tensor: `shape` elements starting at `offset`, both of the tensor's rank. Rank 0 (a scalar) is the
// box with empty vectors and volume 1.
struct Box {
  Shape offset;
  Shape shape;

  size_t ndim() const { return shape.size(); }
  uint64_t volume() const;
  bool empty() const { return volume() == 0; }
  bool operator==(const Box& o) const { return offset == o.offset && shape == o.shape; }
  bool operator!=(const Box& o) const { return !(*this == o); }
  // Deterministic total order (offset, then shape) for sorting plans.
  bool operator<(const Box& o) const;
  // "[0:4, 8:16]"
  std::string ToString() const;
};

// Product of the extents (1 for rank 0). Callers validate against overflow with VolumeFits first.
uint64_t Volume(const Shape& shape);
// False if the product of extents, times `element_size`, does not fit in 64 bits.
bool VolumeFits(const Shape& shape, uint64_t element_size);

// The box covering a whole tensor of `shape`.
Box WholeBox(const Shape& shape);
// True if `inner` lies entirely inside `outer` (same rank required).
bool Contains(const Box& outer, const Box& inner);
// The common part of two boxes of the same rank; nullopt if they do not overlap (or one is empty).
std::optional<Box> Intersect(const Box& a, const Box& b);

// One regular box of a flattened range, and where its elements start within the range (in elements).
struct FlatPiece {
  Box box;
  uint64_t range_offset;
};

// Splits the row-major range [start, end) of `box` into at most 2*ndim-1 boxes, in row-major order. Each piece's
// own row-major elements are consecutive in the range, starting at range_offset. Requires start <= end <=
// box.volume(); an empty range gives no pieces.
std::vector<FlatPiece> DecomposeFlatRange(const Box& box, uint64_t start, uint64_t end);

// Calls fn(src_byte_offset, dst_byte_offset, byte_count) for each maximal contiguous run of `region`, in increasing
// source order, where `src_box` and `dst_box` describe row-major buffers and `region` lies inside both.
// Trailing dimensions that both buffers hold whole are merged, so a slab becomes one run.
template <typename Fn>
void ForEachRun(const Box& src_box, const Box& dst_box, const Box& region, size_t element_size, Fn&& fn);

// Where `region` (inside `box`) is one contiguous run of the row-major buffer of `box`, the run's byte offset in that
// buffer; otherwise (several runs, or an empty region) nullopt. The one run ForEachRun would give, found without
// walking the region.
std::optional<uint64_t> SingleRunOffset(const Box& box, const Box& region, size_t element_size);

// How ForEachRun cuts `region` (inside `box`, not empty) in the row-major buffer of `box`: its number of runs and
// the bytes of each, found without walking the region.
struct RunShape {
  uint64_t runs = 0;
  uint64_t run_bytes = 0;
};
RunShape RunsOf(const Box& box, const Box& region, size_t element_size);

// Copies `region` from the buffer of `src_box` to the buffer of `dst_box` (region inside both).
void CopyRegion(const void* src, const Box& src_box, void* dst, const Box& dst_box, const Box& region,
                size_t element_size);

}  // namespace ckpt::runtime

#include "runtime/core/box_inl.h"

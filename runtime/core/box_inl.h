// The template part of box.h: ForEachRun. Included only by runtime/core/box.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ckpt::runtime {
namespace box_internal {

// Row-major strides, in elements, of a buffer holding `shape`.
inline std::vector<uint64_t> RowMajorStrides(const Shape& shape) {
  std::vector<uint64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return strides;
}

// Number of innermost dimensions of `region` that form one contiguous run in both buffers: the last dimension
// always does, and each dimension further out joins while the one inside it is held whole by both buffers.
inline size_t ContiguousInnerDims(const Box& src_box, const Box& dst_box, const Box& region) {
  const size_t ndim = region.ndim();
  size_t merged = 1;
  while (merged < ndim) {
    const size_t inner = ndim - merged;
    const uint64_t extent = region.shape[inner];
    if (extent != src_box.shape[inner] || extent != dst_box.shape[inner]) break;
    ++merged;
  }
  return merged;
}

}  // namespace box_internal

template <typename Fn>
void ForEachRun(const Box& src_box, const Box& dst_box, const Box& region, size_t element_size, Fn&& fn) {
  const size_t ndim = region.ndim();
  if (ndim == 0) {
    fn(uint64_t{0}, uint64_t{0}, static_cast<uint64_t>(element_size));
    return;
  }
  for (uint64_t extent : region.shape) {
    if (extent == 0) return;
  }
  const std::vector<uint64_t> src_strides = box_internal::RowMajorStrides(src_box.shape);
  const std::vector<uint64_t> dst_strides = box_internal::RowMajorStrides(dst_box.shape);
  const size_t outer_dims = ndim - box_internal::ContiguousInnerDims(src_box, dst_box, region);

  uint64_t run_elements = 1;
  for (size_t d = outer_dims; d < ndim; ++d) run_elements *= region.shape[d];
  const uint64_t run_bytes = run_elements * element_size;

  uint64_t src_pos = 0;
  uint64_t dst_pos = 0;
  for (size_t d = 0; d < ndim; ++d) {
    src_pos += (region.offset[d] - src_box.offset[d]) * src_strides[d];
    dst_pos += (region.offset[d] - dst_box.offset[d]) * dst_strides[d];
  }

  // Odometer over the outer dimensions; positions move by one stride per step and rewind when a digit wraps.
  std::vector<uint64_t> counter(outer_dims, 0);
  while (true) {
    fn(src_pos * element_size, dst_pos * element_size, run_bytes);
    size_t d = outer_dims;
    while (d > 0) {
      --d;
      if (++counter[d] < region.shape[d]) {
        src_pos += src_strides[d];
        dst_pos += dst_strides[d];
        break;
      }
      counter[d] = 0;
      src_pos -= (region.shape[d] - 1) * src_strides[d];
      dst_pos -= (region.shape[d] - 1) * dst_strides[d];
      if (d == 0) return;
    }
    if (outer_dims == 0) return;
  }
}

}  // namespace ckpt::runtime

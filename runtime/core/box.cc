#include "runtime/core/box.h"

#include <algorithm>
#include <cstring>

namespace ckpt::runtime {

uint64_t Box::volume() const { return Volume(shape); }

bool Box::operator<(const Box& o) const {
  if (offset != o.offset) return offset < o.offset;
  return shape < o.shape;
}

std::string Box::ToString() const {
  std::string out = "[";
  for (size_t d = 0; d < ndim(); ++d) {
    if (d > 0) out += ", ";
    out += std::to_string(offset[d]) + ":" + std::to_string(offset[d] + shape[d]);
  }
  return out + "]";
}

uint64_t Volume(const Shape& shape) {
  uint64_t volume = 1;
  for (uint64_t extent : shape) volume *= extent;
  return volume;
}

bool VolumeFits(const Shape& shape, uint64_t element_size) {
  // A zero extent makes the product zero whatever the other extents are.
  if (std::find(shape.begin(), shape.end(), uint64_t{0}) != shape.end()) return true;
  uint64_t product = 1;
  for (uint64_t extent : shape) {
    if (__builtin_mul_overflow(product, extent, &product)) return false;
  }
  return !__builtin_mul_overflow(product, element_size, &product);
}

Box WholeBox(const Shape& shape) { return Box{Shape(shape.size(), 0), shape}; }

bool Contains(const Box& outer, const Box& inner) {
  if (outer.ndim() != inner.ndim() || outer.offset.size() != outer.ndim() || inner.offset.size() != inner.ndim()) {
    return false;
  }
  for (size_t d = 0; d < outer.ndim(); ++d) {
    // Written with subtractions only, so that hostile offsets near 2^64 cannot wrap around.
    if (inner.offset[d] < outer.offset[d] || inner.shape[d] > outer.shape[d] ||
        inner.offset[d] - outer.offset[d] > outer.shape[d] - inner.shape[d]) {
      return false;
    }
  }
  return true;
}

// offset + extent, clamped at the largest value instead of wrapping.
static uint64_t SaturatingEnd(uint64_t offset, uint64_t extent) {
  uint64_t end = 0;
  return __builtin_add_overflow(offset, extent, &end) ? UINT64_MAX : end;
}

std::optional<Box> Intersect(const Box& a, const Box& b) {
  if (a.ndim() != b.ndim() || a.offset.size() != a.ndim() || b.offset.size() != b.ndim()) return std::nullopt;
  Box common{Shape(a.ndim()), Shape(a.ndim())};
  for (size_t d = 0; d < a.ndim(); ++d) {
    const uint64_t lo = std::max(a.offset[d], b.offset[d]);
    const uint64_t hi = std::min(SaturatingEnd(a.offset[d], a.shape[d]), SaturatingEnd(b.offset[d], b.shape[d]));
    if (hi <= lo) return std::nullopt;
    common.offset[d] = lo;
    common.shape[d] = hi - lo;
  }
  return common;
}

namespace {

// Builds the pieces of DecomposeFlatRange level by level. At `level`, the dimensions before it are fixed to single
// indices (`prefix`), and [begin, end) is a range of the row-major block of the remaining dimensions.
class FlatRangeSplitter {
 public:
  FlatRangeSplitter(const Box& box, uint64_t range_start) : box_(box), range_start_(range_start) {
    block_volume_.assign(box.ndim() + 1, 1);
    for (size_t d = box.ndim(); d-- > 0;) block_volume_[d] = block_volume_[d + 1] * box.shape[d];
  }

  std::vector<FlatPiece> Split(uint64_t begin, uint64_t end) {
    Shape prefix;
    Split(0, &prefix, 0, begin, end);
    return std::move(pieces_);
  }

 private:
  // `base` is the flat index, within the whole box, of the first element of the current block.
  void Split(size_t level, Shape* prefix, uint64_t base, uint64_t begin, uint64_t end) {
    if (begin >= end) return;
    if (level + 1 >= box_.ndim()) {
      AddPiece(*prefix, begin, end - begin, base + begin);
      return;
    }
    const uint64_t row = block_volume_[level + 1];
    uint64_t first_full = begin / row;
    if (begin % row != 0) {
      const uint64_t partial_row = begin / row;
      const uint64_t row_begin = partial_row * row;
      SplitRow(level, prefix, base, partial_row, begin - row_begin, std::min(end - row_begin, row));
      if (end <= row_begin + row) return;
      first_full = partial_row + 1;
    }
    const uint64_t end_full = end / row;
    if (end_full > first_full) AddPiece(*prefix, first_full, end_full - first_full, base + first_full * row);
    if (end % row != 0) SplitRow(level, prefix, base, end_full, 0, end % row);
  }

  // Recurses into one row of `level`, fixing that dimension's index to `row_index`.
  void SplitRow(size_t level, Shape* prefix, uint64_t base, uint64_t row_index, uint64_t begin, uint64_t end) {
    prefix->push_back(row_index);
    Split(level + 1, prefix, base + row_index * block_volume_[level + 1], begin, end);
    prefix->pop_back();
  }

  // A piece that fixes the dimensions of `prefix`, spans [first, first + count) of the next one, and holds every
  // dimension after that whole.
  void AddPiece(const Shape& prefix, uint64_t first, uint64_t count, uint64_t flat_begin) {
    Box piece = box_;
    const size_t level = prefix.size();
    for (size_t d = 0; d < level; ++d) {
      piece.offset[d] += prefix[d];
      piece.shape[d] = 1;
    }
    piece.offset[level] += first;
    piece.shape[level] = count;
    pieces_.push_back(FlatPiece{std::move(piece), flat_begin - range_start_});
  }

  const Box& box_;
  const uint64_t range_start_;
  std::vector<uint64_t> block_volume_;  // [d]: elements of dimensions d.. (one index of dimension d-1)
  std::vector<FlatPiece> pieces_;
};

}  // namespace

std::optional<uint64_t> SingleRunOffset(const Box& box, const Box& region, size_t element_size) {
  const size_t ndim = region.ndim();
  // Dimensions outside the ones merged into a run must each hold a single index, or there are several runs.
  const size_t outer_dims = ndim == 0 ? 0 : ndim - box_internal::ContiguousInnerDims(region, box, region);
  for (size_t d = 0; d < ndim; ++d) {
    if (region.shape[d] == 0 || (d < outer_dims && region.shape[d] != 1)) return std::nullopt;
  }
  uint64_t position = 0, stride = 1;
  for (size_t d = ndim; d-- > 0;) {
    position += (region.offset[d] - box.offset[d]) * stride;
    stride *= box.shape[d];
  }
  return position * element_size;
}

RunShape RunsOf(const Box& box, const Box& region, size_t element_size) {
  const size_t ndim = region.ndim();
  const size_t outer_dims = ndim == 0 ? 0 : ndim - box_internal::ContiguousInnerDims(region, box, region);
  RunShape shape{1, element_size};
  for (size_t d = 0; d < ndim; ++d) (d < outer_dims ? shape.runs : shape.run_bytes) *= region.shape[d];
  return shape;
}

std::vector<FlatPiece> DecomposeFlatRange(const Box& box, uint64_t start, uint64_t end) {
  if (start >= end || end > box.volume()) return {};
  if (box.ndim() == 0) return {FlatPiece{box, 0}};
  return FlatRangeSplitter(box, start).Split(start, end);
}

void CopyRegion(const void* src, const Box& src_box, void* dst, const Box& dst_box, const Box& region,
                size_t element_size) {
  const auto* from = static_cast<const char*>(src);
  auto* to = static_cast<char*>(dst);
  ForEachRun(src_box, dst_box, region, element_size, [&](uint64_t src_offset, uint64_t dst_offset, uint64_t bytes) {
    std::memcpy(to + dst_offset, from + src_offset, bytes);
  });
}

}  // namespace ckpt::runtime

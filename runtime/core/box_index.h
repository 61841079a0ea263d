// A k-d tree over boxes, to find the boxes that meet another without testing them all (the load planner's chunks
// against the boxes ranks ask for).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "runtime/core/box.h"

namespace ckpt::runtime {

// offset + extent, clamped at the largest value instead of wrapping, as Intersect computes a box's end.
inline uint64_t EndOf(uint64_t offset, uint64_t extent) {
  uint64_t end = 0;
  return __builtin_add_overflow(offset, extent, &end) ? UINT64_MAX : end;
}

// Boxes of one tensor (all of one dimension count), arranged so that the boxes meeting a query box are found without
// testing every box: with thousands of ranks, a tensor's chunks times its wanted boxes is what made load planning
// quadratic. An implicit k-d tree: each range of slots is a subtree whose root is its middle slot, the range split
// on the boxes' starts along the dimension where they spread most (the columns of a column split, whose boxes all
// span every row), and each root keeps the bounding box of its subtree, which is skipped whole when it misses the
// chunk. On the grids that layouts are cut into, a chunk costs about log(boxes) plus the boxes it meets.
class BoxIndex {
 public:
  // `boxes` not empty, every one of the same number of dimensions.
  explicit BoxIndex(const std::vector<const Box*>& boxes) : ndim_(boxes.front()->ndim()) {
    for (const Box* box : boxes) {
      for (size_t d = 0; d < ndim_; ++d) {
        box_lo_.push_back(box->offset[d]);
        box_hi_.push_back(EndOf(box->offset[d], box->shape[d]));
      }
    }
    slots_.resize(boxes.size());
    std::iota(slots_.begin(), slots_.end(), uint32_t{0});
    tree_lo_.resize(box_lo_.size());
    tree_hi_.resize(box_hi_.size());
    Arrange(0, slots_.size());
  }

  // The boxes meeting `chunk` (of the boxes' dimensions) in at least one element, as positions in the constructor's
  // list, ascending.
  void FindMeeting(const Box& chunk, std::vector<uint32_t>* found) const {
    found->clear();
    Collect(0, slots_.size(), chunk, found);
    std::sort(found->begin(), found->end());
  }

 private:
  static size_t RootOf(size_t begin, size_t end) { return begin + (end - begin) / 2; }

  uint64_t StartOf(uint32_t position, size_t dim) const { return box_lo_[position * ndim_ + dim]; }

  size_t WidestDimension(size_t begin, size_t end) const {
    size_t widest = 0;
    uint64_t widest_spread = 0;
    for (size_t d = 0; d < ndim_; ++d) {
      const auto [lowest, highest] =
          std::minmax_element(slots_.begin() + begin, slots_.begin() + end,
                              [&](uint32_t a, uint32_t b) { return StartOf(a, d) < StartOf(b, d); });
      const uint64_t spread = StartOf(*highest, d) - StartOf(*lowest, d);
      if (spread > widest_spread) {
        widest = d;
        widest_spread = spread;
      }
    }
    return widest;
  }

  // Makes slots [begin, end) a subtree: its root goes in place, then its children, then its bounds.
  void Arrange(size_t begin, size_t end) {
    if (begin == end) return;
    const size_t root = RootOf(begin, end);
    if (ndim_ > 0) {
      const size_t dim = WidestDimension(begin, end);
      std::nth_element(slots_.begin() + begin, slots_.begin() + root, slots_.begin() + end,
                       [&](uint32_t a, uint32_t b) { return StartOf(a, dim) < StartOf(b, dim); });
    }
    std::copy_n(box_lo_.begin() + slots_[root] * ndim_, ndim_, tree_lo_.begin() + root * ndim_);
    std::copy_n(box_hi_.begin() + slots_[root] * ndim_, ndim_, tree_hi_.begin() + root * ndim_);
    Arrange(begin, root);
    Arrange(root + 1, end);
    for (const auto& [child_begin, child_end] : {std::make_pair(begin, root), std::make_pair(root + 1, end)}) {
      if (child_begin == child_end) continue;
      const size_t child = RootOf(child_begin, child_end);
      for (size_t d = 0; d < ndim_; ++d) {
        tree_lo_[root * ndim_ + d] = std::min(tree_lo_[root * ndim_ + d], tree_lo_[child * ndim_ + d]);
        tree_hi_[root * ndim_ + d] = std::max(tree_hi_[root * ndim_ + d], tree_hi_[child * ndim_ + d]);
      }
    }
  }

  // Whether the extents [lo, hi) at `index` share an element with `chunk` in every dimension, as Intersect decides.
  bool Meets(const std::vector<uint64_t>& lo, const std::vector<uint64_t>& hi, size_t index, const Box& chunk) const {
    for (size_t d = 0; d < ndim_; ++d) {
      const uint64_t common_lo = std::max(lo[index * ndim_ + d], chunk.offset[d]);
      const uint64_t common_hi = std::min(hi[index * ndim_ + d], EndOf(chunk.offset[d], chunk.shape[d]));
      if (common_hi <= common_lo) return false;
    }
    return true;
  }

  void Collect(size_t begin, size_t end, const Box& chunk, std::vector<uint32_t>* found) const {
    if (begin == end) return;
    const size_t root = RootOf(begin, end);
    if (!Meets(tree_lo_, tree_hi_, root, chunk)) return;
    if (Meets(box_lo_, box_hi_, slots_[root], chunk)) found->push_back(slots_[root]);
    Collect(begin, root, chunk, found);
    Collect(root + 1, end, chunk, found);
  }

  size_t ndim_;
  std::vector<uint64_t> box_lo_, box_hi_;    // [position * ndim_ + d]: each box's extents
  std::vector<uint32_t> slots_;              // positions, arranged as the tree
  std::vector<uint64_t> tree_lo_, tree_hi_;  // [slot * ndim_ + d]: the subtree's bounding box
};

}  // namespace ckpt::runtime

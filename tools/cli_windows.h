// A box of a tensor cut into windows of bounded bytes, so that the `ckpt` tool streams tensors of any size (cat,
// diff) through a fixed buffer, one ckpt_reader_read per window.
#pragma once

#include <ckpt.h>

#include <cstdint>

namespace ckpt_cli {

// The windows are boxes that follow each other in row-major order: their bytes, read one after the other, are the
// box's row-major bytes. Each holds whole trailing dimensions where they fit in `max_bytes`, and otherwise whole
// rows of the innermost dimension that still fit (at least one element).
class BoxWindows {
 public:
  BoxWindows(uint32_t ndim, const uint64_t* offset, const uint64_t* shape, uint64_t element_size, uint64_t max_bytes);

  // Bytes of the largest window: a buffer of this size holds any of them.
  uint64_t max_window_bytes() const { return max_window_bytes_; }
  // Writes the next window's box (ndim values each); false once every window was given.
  bool Next(uint64_t* offset, uint64_t* shape);

 private:
  uint32_t ndim_;
  uint64_t offset_[CKPT_MAX_NDIM] = {0};
  uint64_t shape_[CKPT_MAX_NDIM] = {0};
  // Dimensions before `split_` advance one index at a time, `split_` by `step_`, those after it are whole.
  uint32_t split_ = 0;
  uint64_t step_ = 0;
  uint64_t position_[CKPT_MAX_NDIM] = {0};
  uint64_t max_window_bytes_ = 0;
  bool done_ = false;
};

}  // namespace ckpt_cli

// Windows of a box (tools/cli_windows.h).
#include "tools/cli_windows.h"

#include <algorithm>

namespace ckpt_cli {

BoxWindows::BoxWindows(uint32_t ndim, const uint64_t* offset, const uint64_t* shape, uint64_t element_size,
                       uint64_t max_bytes)
    : ndim_(ndim) {
  std::copy(offset, offset + ndim, offset_);
  std::copy(shape, shape + ndim, shape_);
  if (std::any_of(shape, shape + ndim, [](uint64_t extent) { return extent == 0; })) {
    done_ = true;  // an empty box: no window at all
    return;
  }
  // From the last dimension inwards, take each one whole while the slab still fits.
  uint64_t inner_bytes = element_size;
  uint32_t whole_from = ndim;
  while (whole_from > 0 && shape_[whole_from - 1] <= max_bytes / inner_bytes) {
    inner_bytes *= shape_[--whole_from];
  }
  if (whole_from == 0) {  // the whole box fits, including a box of no dimension: one window
    step_ = ndim == 0 ? 1 : shape_[0];
    max_window_bytes_ = inner_bytes;
    return;
  }
  split_ = whole_from - 1;
  step_ = std::max<uint64_t>(1, std::min(shape_[split_], max_bytes / inner_bytes));
  max_window_bytes_ = step_ * inner_bytes;
}

bool BoxWindows::Next(uint64_t* offset, uint64_t* shape) {
  if (done_) return false;
  for (uint32_t d = 0; d < ndim_; ++d) {
    offset[d] = offset_[d] + position_[d];
    shape[d] = d < split_ ? 1 : d == split_ ? std::min(step_, shape_[d] - position_[d]) : shape_[d];
  }
  if (ndim_ == 0) {
    done_ = true;
    return true;
  }
  // Advance like an odometer: `split_` by its step, the dimensions before it by one, carrying leftwards.
  position_[split_] += step_;
  for (uint32_t d = split_; position_[d] >= shape_[d]; --d) {
    position_[d] = 0;
    if (d == 0) {
      done_ = true;
      break;
    }
    ++position_[d - 1];
  }
  return true;
}

}  // namespace ckpt_cli

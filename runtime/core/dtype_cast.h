// Conversion between the floating element types F16, BF16, F32 and F64, for loads that ask for another dtype than
// the checkpoint stores (CKPT_SHARD_ALLOW_DTYPE_CAST). IEEE semantics, whatever the calling thread's floating-point
// environment: round to nearest, ties to even, with a single rounding even where a conversion is computed in two
// steps (F16 <-> BF16 goes through F32, exactly); overflow gives infinity; subnormals in and out are exact or
// rounded like any value; infinities keep their sign; a NaN stays a NaN of the same sign, made quiet, with as much
// of its payload as the narrower type holds.
#pragma once

#include <cstdint>

namespace ckpt::runtime {

// Whether CastElements converts `from` elements into `to` elements: both are among F16, BF16, F32 and F64.
bool IsCastable(int32_t from, int32_t to);

// Converts `count` elements of dtype `from` at `src` into dtype `to` at `dst`; IsCastable(from, to) must hold. The
// buffers must not overlap; neither needs more alignment than a byte.
void CastElements(int32_t from, int32_t to, const void* src, void* dst, uint64_t count);

}  // namespace ckpt::runtime

#include "runtime/core/dtype_cast.h"

#include <algorithm>
#include <cfenv>
#include <cstring>
#include <type_traits>

#include "runtime/core/dtype.h"

namespace ckpt::runtime {
namespace {

// An IEEE binary format by its bit layout.
template <typename BitsType, int kExponentBits, int kMantissaBits>
struct Format {
  using Bits = BitsType;
  static constexpr int kWidth = 8 * sizeof(Bits);
  static constexpr int kMantissa = kMantissaBits;
  static constexpr int kBias = (1 << (kExponentBits - 1)) - 1;
  static constexpr Bits kSign = Bits(Bits(1) << (kWidth - 1));
  static constexpr Bits kInfinity = Bits(((Bits(1) << kExponentBits) - 1) << kMantissa);
  static constexpr Bits kQuiet = Bits(Bits(1) << (kMantissa - 1));
  static constexpr Bits kMantissaMask = Bits((Bits(1) << kMantissa) - 1);
  static_assert(1 + kExponentBits + kMantissaBits == kWidth);
};
using F16 = Format<uint16_t, 5, 10>;
using BF16 = Format<uint16_t, 8, 7>;
using F32 = Format<uint32_t, 8, 23>;
using F64 = Format<uint64_t, 11, 52>;

// The C++ floating type of a wide format: the subnormal paths compute in it.
template <typename Bits>
struct FloatOf;
template <>
struct FloatOf<uint32_t> {
  using Type = float;
};
template <>
struct FloatOf<uint64_t> {
  using Type = double;
};

template <typename To, typename From>
To BitCast(From from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof to);
  return to;
}

// Rounds a value of `Wide` to `Narrow`, a format with fewer mantissa bits and no more exponent bits.
template <typename Wide, typename Narrow>
typename Narrow::Bits RoundToNarrow(typename Wide::Bits x) {
  using W = typename Wide::Bits;
  using N = typename Narrow::Bits;
  constexpr int kShift = Wide::kMantissa - Narrow::kMantissa;
  constexpr W kRebias = W(Wide::kBias - Narrow::kBias) << Wide::kMantissa;
  const W sign = x & Wide::kSign;
  const W magnitude = x ^ sign;
  // Normal results: the exponent rebiased, then the dropped bits rounded off by adding just under half an ulp plus
  // the lowest kept bit, so that a tie goes to the even neighbour. A carry out of the mantissa steps the exponent up;
  // past the largest finite value that reaches infinity, and bits beyond infinity's are clamped to it (overflow).
  // Below the narrow normals `rebiased` wraps around; the select below replaces what it gives there.
  const W rebiased = magnitude - kRebias;
  const W rounded = (rebiased + ((W(1) << (kShift - 1)) - 1) + ((rebiased >> kShift) & 1)) >> kShift;
  N result = N(std::min<W>(rounded, Narrow::kInfinity));
  if constexpr (kRebias != 0) {
    // Narrow subnormals: adding the power of two whose ulp in `Wide` is the narrow format's least subnormal rounds
    // the value to a multiple of that subnormal (to nearest, ties to even, by IEEE addition); the bits above the
    // power's are then the narrow subnormal's, up to the least normal where the rounding carries. (With the same
    // bias, F32 to BF16, the normal path above covers subnormals too: the two layouts line up.)
    using Float = typename FloatOf<W>::Type;
    constexpr W kMagic = W(Wide::kBias + 1 - Narrow::kBias - Narrow::kMantissa + Wide::kMantissa) << Wide::kMantissa;
    const N subnormal = N(BitCast<W>(BitCast<Float>(magnitude) + BitCast<Float>(kMagic)) - kMagic);
    result = magnitude < kRebias + (W(1) << Wide::kMantissa) ? subnormal : result;
  }
  // NaNs stay NaNs, quiet, with the top of their payload.
  const N nan = N(Narrow::kInfinity | Narrow::kQuiet | ((magnitude >> kShift) & Narrow::kMantissaMask));
  result = magnitude > Wide::kInfinity ? nan : result;
  return N(result | N(sign >> (Wide::kWidth - Narrow::kWidth)));
}

// Converts a value of `Narrow` to `Wide`, a format with more mantissa bits and at least as many exponent bits:
// exactly.
template <typename Narrow, typename Wide>
typename Wide::Bits Widen(typename Narrow::Bits x) {
  using W = typename Wide::Bits;
  using N = typename Narrow::Bits;
  constexpr int kShift = Wide::kMantissa - Narrow::kMantissa;
  constexpr W kRebias = W(Wide::kBias - Narrow::kBias) << Wide::kMantissa;
  const N sign = x & Narrow::kSign;
  const N narrow_magnitude = x ^ sign;
  const W magnitude = W(narrow_magnitude) << kShift;
  W result = magnitude + kRebias;
  if constexpr (kRebias != 0) {
    // A narrow subnormal is a wide normal. Written with the exponent of the narrow format's least normal, its bits
    // read as that power of two plus the value; subtracting the power leaves the value, exactly (so no rounding
    // mode applies, and no operand or result is subnormal).
    using Float = typename FloatOf<W>::Type;
    constexpr W kLeastNormal = kRebias + (W(1) << Wide::kMantissa);
    const W subnormal = BitCast<W>(BitCast<Float>(magnitude | kLeastNormal) - BitCast<Float>(kLeastNormal));
    result = narrow_magnitude < (N(1) << Narrow::kMantissa) ? subnormal : result;
  }
  // Infinities and NaNs keep the top exponent; NaNs are made quiet.
  const W special = magnitude | Wide::kInfinity | (narrow_magnitude > Narrow::kInfinity ? Wide::kQuiet : W(0));
  result = narrow_magnitude >= Narrow::kInfinity ? special : result;
  return result | (W(sign) << (Wide::kWidth - Narrow::kWidth));
}

template <typename From, typename To>
typename To::Bits ConvertOne(typename From::Bits x) {
  if constexpr (std::is_same_v<From, To>) {
    return x;
  } else if constexpr (From::kWidth == 16 && To::kWidth == 16) {
    // F16 and BF16 each hold what the other cannot: through F32, which holds both exactly, so that only the last
    // step rounds.
    return RoundToNarrow<F32, To>(Widen<From, F32>(x));
  } else if constexpr (From::kWidth < To::kWidth) {
    return Widen<From, To>(x);
  } else {
    // Directly, F64 to F16 and BF16 too: rounding to F32 first would round twice.
    return RoundToNarrow<From, To>(x);
  }
}

// One branch-free loop per pair, which the compiler vectorizes; memcpy lets the buffers have any alignment.
template <typename From, typename To>
void Convert(const void* src, void* dst, uint64_t count) {
  const char* __restrict in = static_cast<const char*>(src);
  char* __restrict out = static_cast<char*>(dst);
  for (uint64_t i = 0; i < count; ++i) {
    typename From::Bits x;
    std::memcpy(&x, in + i * sizeof x, sizeof x);
    const typename To::Bits y = ConvertOne<From, To>(x);
    std::memcpy(out + i * sizeof y, &y, sizeof y);
  }
}

using Kernel = void (*)(const void*, void*, uint64_t);

template <typename From>
constexpr Kernel kFrom[4] = {Convert<From, F16>, Convert<From, BF16>, Convert<From, F32>, Convert<From, F64>};
constexpr const Kernel* kKernels[4] = {kFrom<F16>, kFrom<BF16>, kFrom<F32>, kFrom<F64>};

// The index of a castable dtype in kKernels, else -1.
int KernelIndex(int32_t dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::kF16:
      return 0;
    case DType::kBF16:
      return 1;
    case DType::kF32:
      return 2;
    case DType::kF64:
      return 3;
    default:
      return -1;
  }
}

// RoundToNarrow's subnormal path rounds with one floating-point addition, which follows the thread's rounding
// mode; a caller may have changed it (fesetround), so the conversion runs rounding to nearest and restores it after.
class RoundingToNearest {
 public:
  RoundingToNearest() : saved_(std::fegetround()) {
    if (saved_ != FE_TONEAREST) std::fesetround(FE_TONEAREST);
  }
  ~RoundingToNearest() {
    if (saved_ != FE_TONEAREST) std::fesetround(saved_);
  }
  RoundingToNearest(const RoundingToNearest&) = delete;
  RoundingToNearest& operator=(const RoundingToNearest&) = delete;

 private:
  const int saved_;
};

}  // namespace

bool IsCastable(int32_t from, int32_t to) { return KernelIndex(from) >= 0 && KernelIndex(to) >= 0; }

void CastElements(int32_t from, int32_t to, const void* src, void* dst, uint64_t count) {
  const RoundingToNearest rounding;
  kKernels[KernelIndex(from)][KernelIndex(to)](src, dst, count);
}

}  // namespace ckpt::runtime

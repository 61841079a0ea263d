// The floating dtype conversions of loads with CKPT_SHARD_ALLOW_DTYPE_CAST (runtime/core/dtype_cast.h), checked against
// references that share no code with them: 16-bit patterns decoded field by field with ldexp, the nearest of all
// 65,536 patterns found by search, the compiler's _Float16 where it has one, and the hardware's F64 to F32.
#include <gtest/gtest.h>

#include <cfenv>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/dtype_cast.h"

namespace ckpt::runtime {
namespace {

constexpr int32_t kF16 = static_cast<int32_t>(DType::kF16);
constexpr int32_t kBF16 = static_cast<int32_t>(DType::kBF16);
constexpr int32_t kF32 = static_cast<int32_t>(DType::kF32);
constexpr int32_t kF64 = static_cast<int32_t>(DType::kF64);

template <typename To, typename From>
To Cast(int32_t from, int32_t to, From x) {
  To y;
  CastElements(from, to, &x, &y, 1);
  return y;
}

template <typename To, typename From>
To Bits(From value) {
  To bits;
  static_assert(sizeof bits == sizeof value);
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// A 16-bit format by its exponent width: F16 has 5 bits, BF16 8.
struct Format16 {
  int32_t dtype;
  int exponent_bits;
  int mantissa_bits() const { return 15 - exponent_bits; }
  uint16_t infinity() const { return static_cast<uint16_t>(((1 << exponent_bits) - 1) << mantissa_bits()); }
};
constexpr Format16 kHalf{kF16, 5};
constexpr Format16 kBrain{kBF16, 8};

// The value of a pattern, from its fields.
double Decode(const Format16& f, uint16_t bits) {
  const int bias = (1 << (f.exponent_bits - 1)) - 1;
  const int exponent = (bits >> f.mantissa_bits()) & ((1 << f.exponent_bits) - 1);
  const int mantissa = bits & ((1 << f.mantissa_bits()) - 1);
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exponent == (1 << f.exponent_bits) - 1) return mantissa ? NAN : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, 1 - bias - f.mantissa_bits());
  return sign * std::ldexp(mantissa + (1 << f.mantissa_bits()), exponent - bias - f.mantissa_bits());
}

bool IsNan(const Format16& f, uint16_t bits) { return (bits & 0x7fff) > f.infinity(); }
bool IsQuietNan(const Format16& f, uint16_t bits) {
  return IsNan(f, bits) && (bits & (1 << (f.mantissa_bits() - 1))) != 0;
}

// The pattern nearest to `value` (not a NaN), ties to the even pattern; past the largest finite value by half its
// ulp or more, infinity. Non-negative patterns are ordered as their values, so the neighbours are found by search.
uint16_t Nearest(const Format16& f, double value) {
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  const double a = std::fabs(value);
  const uint16_t largest = f.infinity() - 1;
  uint16_t below = 0;
  for (uint16_t step = 0x4000; step != 0; step >>= 1) {
    if (below + step <= largest && Decode(f, static_cast<uint16_t>(below + step)) <= a) below += step;
  }
  const uint16_t above = static_cast<uint16_t>(below + 1);
  const double low = Decode(f, below);
  const double high = below == largest ? low + (low - Decode(f, largest - 1)) : Decode(f, above);
  uint16_t nearest = (a - low < high - a) ? below : (a - low > high - a) ? above : (below & 1) ? above : below;
  if (a == low) nearest = below;
  return static_cast<uint16_t>(sign | nearest);
}

// Every 16-bit pattern, in one buffer, so that the conversions run through their vectorised loops.
std::vector<uint16_t> AllPatterns() {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  return all;
}

void ExpectRoundTripThroughWider(const Format16& f, int32_t wide_dtype, size_t wide_size) {
  const std::vector<uint16_t> all = AllPatterns();
  std::vector<char> wide(all.size() * wide_size);
  std::vector<uint16_t> back(all.size());
  CastElements(f.dtype, wide_dtype, all.data(), wide.data(), all.size());
  CastElements(wide_dtype, f.dtype, wide.data(), back.data(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    const double value = wide_size == 4 ? Bits<float>(*reinterpret_cast<uint32_t*>(&wide[i * 4]))
                                        : Bits<double>(*reinterpret_cast<uint64_t*>(&wide[i * 8]));
    if (IsNan(f, all[i])) {
      ASSERT_TRUE(std::isnan(value)) << std::hex << all[i];
      ASSERT_TRUE(IsQuietNan(f, back[i])) << std::hex << all[i] << " came back as " << back[i];
      ASSERT_EQ(back[i] & 0x8000, all[i] & 0x8000) << std::hex << all[i];
    } else {
      ASSERT_EQ(value, Decode(f, all[i])) << std::hex << all[i];
      ASSERT_EQ(std::signbit(value), (all[i] & 0x8000) != 0) << std::hex << all[i];
      ASSERT_EQ(back[i], all[i]) << std::hex << all[i];
    }
  }
}

TEST(DtypeCastTest, EveryBf16PatternWidensExactlyAndComesBack) {
  ExpectRoundTripThroughWider(kBrain, kF32, 4);
  ExpectRoundTripThroughWider(kBrain, kF64, 8);
}

TEST(DtypeCastTest, EveryF16PatternWidensExactlyAndComesBack) {
  ExpectRoundTripThroughWider(kHalf, kF32, 4);
  ExpectRoundTripThroughWider(kHalf, kF64, 8);
}

TEST(DtypeCastTest, F16AndBf16ConvertIntoEachOtherRoundingOnce) {
  const std::vector<uint16_t> all = AllPatterns();
  std::vector<uint16_t> out(all.size());
  for (const auto& [from, to] : {std::pair{kHalf, kBrain}, std::pair{kBrain, kHalf}}) {
    CastElements(from.dtype, to.dtype, all.data(), out.data(), all.size());
    for (size_t i = 0; i < all.size(); ++i) {
      if (IsNan(from, all[i])) {
        ASSERT_TRUE(IsQuietNan(to, out[i])) << std::hex << all[i] << " -> " << out[i];
      } else {
        ASSERT_EQ(out[i], Nearest(to, Decode(from, all[i]))) << std::hex << from.dtype << ": " << all[i];
      }
    }
  }
}

// For every pair of neighbouring finite 16-bit values: the F32 at their midpoint (a tie) and its F32 neighbours,
// which decide every rounding of the format.
std::vector<float> RoundingBoundaries(const Format16& f) {
  std::vector<float> values;
  for (uint32_t bits = 0; bits < f.infinity(); ++bits) {
    const double low = Decode(f, static_cast<uint16_t>(bits));
    const double high = bits + 1 == f.infinity() ? 2 * low - Decode(f, static_cast<uint16_t>(bits - 1))
                                                 : Decode(f, static_cast<uint16_t>(bits + 1));
    const float mid = static_cast<float>((low + high) / 2);  // exact: 16-bit midpoints have few significant bits
    if (std::isinf(mid)) continue;                           // BF16's last midpoint lies beyond F32
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY), static_cast<float>(low)}) {
      values.push_back(v);
      values.push_back(-v);
    }
  }
  return values;
}

void ExpectF32RoundsToNearest(const Format16& f) {
  std::vector<float> values = RoundingBoundaries(f);
  std::mt19937 random(7);
  for (int i = 0; i < 1000000; ++i) values.push_back(Bits<float>(static_cast<uint32_t>(random())));
  std::vector<uint16_t> out(values.size());
  CastElements(kF32, f.dtype, values.data(), out.data(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) {
      ASSERT_TRUE(IsQuietNan(f, out[i])) << std::hexfloat << values[i];
    } else {
      ASSERT_EQ(out[i], Nearest(f, values[i])) << std::hexfloat << values[i];
    }
  }
}

TEST(DtypeCastTest, F32ToBf16RoundsToNearestEvenAtEveryBoundary) { ExpectF32RoundsToNearest(kBrain); }

TEST(DtypeCastTest, F32ToF16RoundsToNearestEvenAtEveryBoundary) { ExpectF32RoundsToNearest(kHalf); }

#ifdef __FLT16_MAX__
TEST(DtypeCastTest, F32AndF64ToF16MatchTheCompilersFloat16) {
  std::vector<float> values = RoundingBoundaries(kHalf);
  std::mt19937_64 random(11);
  for (int i = 0; i < 1000000; ++i) values.push_back(Bits<float>(static_cast<uint32_t>(random())));
  for (float v : values) {
    if (std::isnan(v)) continue;
    ASSERT_EQ(Cast<uint16_t>(kF32, kF16, v), Bits<uint16_t>(static_cast<_Float16>(v))) << std::hexfloat << v;
  }
  for (int i = 0; i < 1000000; ++i) {
    const double v = Bits<double>(static_cast<uint64_t>(random()));
    if (std::isnan(v)) continue;
    ASSERT_EQ(Cast<uint16_t>(kF64, kF16, v), Bits<uint16_t>(static_cast<_Float16>(v))) << std::hexfloat << v;
  }
}
#endif

TEST(DtypeCastTest, TiesGoToTheEvenNeighbour) {
  EXPECT_EQ(Cast<uint16_t>(kF32, kBF16, Bits<float>(0x3F808000u)), 0x3F80);  // 1 + 2^-8: between 1 and 1 + 2^-7
  EXPECT_EQ(Cast<uint16_t>(kF32, kBF16, Bits<float>(0x3F818000u)), 0x3F82);
  EXPECT_EQ(Cast<uint16_t>(kF32, kBF16, Bits<float>(0x3F808001u)), 0x3F81);  // just past the tie
  EXPECT_EQ(Cast<uint16_t>(kF32, kBF16, Bits<float>(0x3F807FFFu)), 0x3F80);  // just before it
  EXPECT_EQ(Cast<uint16_t>(kF32, kF16, 1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(Cast<uint16_t>(kF32, kF16, 1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(Cast<float>(kF64, kF32, 1.0 + std::ldexp(1.0, -24)), 1.0f);
  EXPECT_EQ(Cast<float>(kF64, kF32, 1.0 + 3 * std::ldexp(1.0, -24)), 1.0f + std::ldexp(1.0f, -22));
}

TEST(DtypeCastTest, F64ToBf16AndF16RoundOnceNotThroughF32) {
  // Just above the tie between 1 and 1 + 2^-7: F32 would round it onto the tie, then to even (1).
  EXPECT_EQ(Cast<uint16_t>(kF64, kBF16, 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)), 0x3F81);
  EXPECT_EQ(Cast<uint16_t>(kF64, kF16, 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)), 0x3C01);
}

TEST(DtypeCastTest, OverflowGoesToInfinityOfTheSameSign) {
  EXPECT_EQ(Cast<uint16_t>(kF32, kBF16, FLT_MAX), 0x7F80);
  EXPECT_EQ(Cast<uint16_t>(kF32, kBF16, -FLT_MAX), 0xFF80);
  EXPECT_EQ(Cast<uint16_t>(kF32, kBF16, Bits<float>(0x7F7F7FFFu)), 0x7F7F);  // below the tie: the largest finite
  EXPECT_EQ(Cast<uint16_t>(kF32, kF16, 65504.0f), 0x7BFF);
  EXPECT_EQ(Cast<uint16_t>(kF32, kF16, 65519.99f), 0x7BFF);
  EXPECT_EQ(Cast<uint16_t>(kF32, kF16, 65520.0f), 0x7C00);  // the tie past the largest finite: infinity
  EXPECT_EQ(Cast<uint16_t>(kF32, kF16, -1e10f), 0xFC00);
  EXPECT_EQ(Cast<float>(kF64, kF32, 1e300), INFINITY);
  EXPECT_EQ(Cast<float>(kF64, kF32, -DBL_MAX), -INFINITY);
  EXPECT_EQ(Cast<uint16_t>(kF64, kF16, 70000.0), 0x7C00);
  EXPECT_EQ(Cast<uint16_t>(kF64, kBF16, DBL_MAX), 0x7F80);
  EXPECT_EQ(Cast<uint16_t>(kBF16, kF16, uint16_t{0x4780}), 0x7C00);  // 65536
}

TEST(DtypeCastTest, SubnormalsRoundLikeAnyValue) {
  const float tiny = std::ldexp(1.0f, -24);  // F16's least subnormal
  EXPECT_EQ(Cast<uint16_t>(kF32, kF16, tiny), 0x0001);
  EXPECT_EQ(Cast<uint16_t>(kF32, kF16, tiny / 2), 0x0000);  // a tie with zero
  EXPECT_EQ(Cast<uint16_t>(kF32, kF16, -tiny / 2), 0x8000);
  EXPECT_EQ(Cast<uint16_t>(kF32, kF16, 1.5f * tiny), 0x0002);
  EXPECT_EQ(Cast<uint16_t>(kF32, kF16, 2.5f * tiny), 0x0002);
  EXPECT_EQ(Cast<uint16_t>(kF32, kF16, std::ldexp(1.0f, -14) - tiny / 2), 0x0400);  // rounds up to the least normal
  EXPECT_EQ(Cast<uint16_t>(kF32, kF16, std::ldexp(1.0f, -14) - tiny), 0x03FF);
  EXPECT_EQ(Cast<uint16_t>(kF32, kF16, FLT_TRUE_MIN), 0x0000);
  EXPECT_EQ(Cast<uint16_t>(kF32, kBF16, Bits<float>(0x00010000u)), 0x0001);  // F32 subnormals into BF16's
  EXPECT_EQ(Cast<uint16_t>(kF32, kBF16, Bits<float>(0x00018000u)), 0x0002);
  EXPECT_EQ(Cast<uint16_t>(kF32, kBF16, FLT_TRUE_MIN), 0x0000);
  EXPECT_EQ(Cast<float>(kF64, kF32, std::ldexp(1.0, -149)), FLT_TRUE_MIN);
  EXPECT_EQ(Cast<float>(kF64, kF32, std::ldexp(1.0, -150)), 0.0f);
  EXPECT_EQ(Cast<float>(kF64, kF32, std::ldexp(1.0, -150) + std::ldexp(1.0, -170)), FLT_TRUE_MIN);
  EXPECT_EQ(Cast<float>(kF64, kF32, DBL_TRUE_MIN), 0.0f);
  EXPECT_EQ(Cast<double>(kF32, kF64, FLT_TRUE_MIN), std::ldexp(1.0, -149));
  EXPECT_EQ(Cast<float>(kF16, kF32, uint16_t{0x0001}), tiny);
  EXPECT_EQ(Cast<float>(kF16, kF32, uint16_t{0x83FF}), -1023 * tiny);
}

TEST(DtypeCastTest, F64ToF32MatchesTheHardwareConversion) {
  std::mt19937_64 random(3);
  std::vector<double> values;
  for (int i = 0; i < 1000000; ++i) values.push_back(Bits<double>(static_cast<uint64_t>(random())));
  for (int i = 0; i < 1000000; ++i) values.push_back(std::ldexp(static_cast<double>(random()), -(i % 300) - 64));
  std::vector<float> out(values.size());
  CastElements(kF64, kF32, values.data(), out.data(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) {
      ASSERT_TRUE(std::isnan(out[i]));
    } else {
      ASSERT_EQ(Bits<uint32_t>(out[i]), Bits<uint32_t>(static_cast<float>(values[i]))) << std::hexfloat << values[i];
    }
  }
}

TEST(DtypeCastTest, NanStaysAQuietNanOfTheSameSign) {
  // A signalling F32 NaN whose payload lies in the bits BF16 drops would become infinity if merely truncated.
  EXPECT_EQ(Cast<uint16_t>(kF32, kBF16, Bits<float>(0x7F800001u)), 0x7FC0);
  EXPECT_EQ(Cast<uint16_t>(kF32, kBF16, Bits<float>(0xFF800001u)), 0xFFC0);
  EXPECT_EQ(Cast<uint16_t>(kF32, kBF16, Bits<float>(0x7FA00000u)), 0x7FE0);  // the payload's top bits are kept
  EXPECT_EQ(Cast<uint16_t>(kF32, kF16, Bits<float>(0x7F800001u)), 0x7E00);
  EXPECT_EQ(Cast<uint16_t>(kF64, kF16, -std::nan("")), 0xFE00);
  EXPECT_EQ(Cast<uint32_t>(kF16, kF32, uint16_t{0x7C01}), 0x7FC02000u);
  EXPECT_EQ(Cast<uint32_t>(kBF16, kF32, uint16_t{0xFF81}), 0xFFC10000u);
  EXPECT_EQ(Cast<uint64_t>(kF32, kF64, Bits<float>(0x7F800001u)), 0x7FF8000020000000u);
  EXPECT_EQ(Cast<uint32_t>(kF64, kF32, Bits<double>(0x7FF0000000000001u)), 0x7FC00000u);
  EXPECT_EQ(Cast<uint16_t>(kBF16, kF16, uint16_t{0x7F81}), 0x7E08);  // payload bit 0 of 7 is bit 3 of 10
}

TEST(DtypeCastTest, InfinitiesAndZerosKeepTheirSignThroughEveryPair) {
  for (int32_t from : {kF16, kBF16, kF32, kF64}) {
    for (int32_t to : {kF16, kBF16, kF32, kF64}) {
      for (double value : {0.0, -0.0, double{INFINITY}, -double{INFINITY}, 1.0, -2.0}) {
        char in[8], mid[8], out[8];
        const float single = static_cast<float>(value);
        std::memcpy(in, &value, 8);
        int32_t source = kF64;
        if (from != kF64) {  // the value in `from`, made from an exact F32
          CastElements(kF32, from, &single, in, 1);
          source = from;
        }
        CastElements(source, to, in, mid, 1);
        CastElements(to, kF64, mid, out, 1);
        double got;
        std::memcpy(&got, out, 8);
        EXPECT_EQ(got, value) << from << " -> " << to;
        EXPECT_EQ(std::signbit(got), std::signbit(value)) << from << " -> " << to;
      }
    }
  }
}

TEST(DtypeCastTest, RoundsToNearestWhateverTheThreadsRoundingMode) {
  ASSERT_EQ(std::fesetround(FE_UPWARD), 0);
  const uint16_t half = Cast<uint16_t>(kF32, kF16, std::ldexp(1.0f, -24) * 1.25f);  // subnormal path
  const float single = Cast<float>(kF64, kF32, std::ldexp(1.0, -149) * 1.25);
  const int mode = std::fegetround();
  std::fesetround(FE_TONEAREST);
  EXPECT_EQ(half, 0x0001);
  EXPECT_EQ(single, FLT_TRUE_MIN);
  EXPECT_EQ(mode, FE_UPWARD) << "the caller's rounding mode was not restored";
}

TEST(DtypeCastTest, BuffersNeedNoAlignment) {
  const float values[3] = {1.5f, -2.25f, 3.0f};
  std::vector<char> src(1 + sizeof values), dst(1 + 3 * 8);
  std::memcpy(src.data() + 1, values, sizeof values);
  CastElements(kF32, kF64, src.data() + 1, dst.data() + 1, 3);
  double got[3];
  std::memcpy(got, dst.data() + 1, sizeof got);
  EXPECT_EQ(got[0], 1.5);
  EXPECT_EQ(got[1], -2.25);
  EXPECT_EQ(got[2], 3.0);
}

TEST(DtypeCastTest, OnlyFloatingTypesAreCastable) {
  for (int32_t from : {kF16, kBF16, kF32, kF64}) {
    for (int32_t to : {kF16, kBF16, kF32, kF64}) EXPECT_TRUE(IsCastable(from, to)) << from << " " << to;
  }
  for (DType other : {DType::kI32, DType::kU8, DType::kBool, DType::kC64, DType::kF8E4M3, DType::kF8E5M2}) {
    EXPECT_FALSE(IsCastable(static_cast<int32_t>(other), kF32)) << DTypeName(static_cast<int32_t>(other));
    EXPECT_FALSE(IsCastable(kBF16, static_cast<int32_t>(other))) << DTypeName(static_cast<int32_t>(other));
  }
  EXPECT_FALSE(IsCastable(0, kF32));
}

}  // namespace
}  // namespace ckpt::runtime

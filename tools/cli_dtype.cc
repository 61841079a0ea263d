// Elements of every dtype, decoded from their bits (tools/cli_dtype.h). The tool uses only the public C API, which
// does not convert single elements, so the formats are restated here.
#include "tools/cli_dtype.h"

#include <ckpt.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

namespace ckpt_cli {
namespace {

template <typename T>
T Load(const unsigned char* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

// A binary floating format narrower than float, by its bit layout and by what its top codes mean.
struct MiniFloat {
  enum Specials {
    kIeee,          // the top exponent holds infinities and NaNs
    kFiniteNan,     // "fn": no infinities; all exponent and mantissa bits set is NaN
    kUnsignedZero,  // "fnuz": no infinities, no negative zero; the sign bit alone is NaN
    kNone,          // every code is a finite number
  };
  int exponent_bits;
  int mantissa_bits;
  int bias;
  Specials specials;
};

// The layouts of ml_dtypes (and of IEEE binary16), whose names the CKPT_DTYPE_* comments give.
std::optional<MiniFloat> MiniFloatOf(int32_t dtype) {
  switch (dtype) {
    case CKPT_DTYPE_F16:
      return MiniFloat{5, 10, 15, MiniFloat::kIeee};
    case CKPT_DTYPE_F8_E4M3:
      return MiniFloat{4, 3, 7, MiniFloat::kFiniteNan};
    case CKPT_DTYPE_F8_E5M2:
      return MiniFloat{5, 2, 15, MiniFloat::kIeee};
    case CKPT_DTYPE_F8_E4M3FNUZ:
      return MiniFloat{4, 3, 8, MiniFloat::kUnsignedZero};
    case CKPT_DTYPE_F8_E5M2FNUZ:
      return MiniFloat{5, 2, 16, MiniFloat::kUnsignedZero};
    case CKPT_DTYPE_F8_E4M3B11FNUZ:
      return MiniFloat{4, 3, 11, MiniFloat::kUnsignedZero};
    case CKPT_DTYPE_F8_E3M4:
      return MiniFloat{3, 4, 3, MiniFloat::kIeee};
    case CKPT_DTYPE_F8_E4M3_IEEE:
      return MiniFloat{4, 3, 7, MiniFloat::kIeee};
    case CKPT_DTYPE_F4_E2M1:
      return MiniFloat{2, 1, 1, MiniFloat::kNone};
    default:
      return std::nullopt;
  }
}

double DecodeMiniFloat(const MiniFloat& format, uint32_t bits) {
  const int mantissa_bits = format.mantissa_bits;
  const uint32_t max_exponent = (1u << format.exponent_bits) - 1;
  const uint32_t max_mantissa = (1u << mantissa_bits) - 1;
  const bool negative = (bits >> (format.exponent_bits + mantissa_bits)) & 1;
  const uint32_t exponent = (bits >> mantissa_bits) & max_exponent;
  const uint32_t mantissa = bits & max_mantissa;
  constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
  switch (format.specials) {
    case MiniFloat::kIeee:
      if (exponent == max_exponent) {
        return mantissa ? kNan : negative ? -HUGE_VAL : HUGE_VAL;
      }
      break;
    case MiniFloat::kFiniteNan:
      if (exponent == max_exponent && mantissa == max_mantissa) return kNan;
      break;
    case MiniFloat::kUnsignedZero:
      if (negative && exponent == 0 && mantissa == 0) return kNan;
      break;
    case MiniFloat::kNone:
      break;
  }
  const double magnitude = exponent == 0 ? std::ldexp(mantissa, 1 - format.bias - mantissa_bits)
                                         : std::ldexp(mantissa + (1u << mantissa_bits),
                                                      static_cast<int>(exponent) - format.bias - mantissa_bits);
  return negative ? -magnitude : magnitude;
}

template <typename T>
std::string FormatNumber(T value) {
  char text[64];
  const auto result = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, result.ptr);
}

}  // namespace

ElementKind KindOf(int32_t dtype) {
  switch (dtype) {
    case CKPT_DTYPE_BOOL:
    case CKPT_DTYPE_U8:
    case CKPT_DTYPE_U16:
    case CKPT_DTYPE_U32:
    case CKPT_DTYPE_U64:
    case CKPT_DTYPE_U4:
    case CKPT_DTYPE_U2:
      return ElementKind::kUnsigned;
    case CKPT_DTYPE_I8:
    case CKPT_DTYPE_I16:
    case CKPT_DTYPE_I32:
    case CKPT_DTYPE_I64:
    case CKPT_DTYPE_I4:
    case CKPT_DTYPE_I2:
      return ElementKind::kSigned;
    case CKPT_DTYPE_C64:
    case CKPT_DTYPE_C128:
      return ElementKind::kComplex;
    default:
      return ElementKind::kFloating;
  }
}

uint64_t LoadUnsigned(int32_t dtype, const unsigned char* at) {
  switch (dtype) {
    case CKPT_DTYPE_BOOL:
      return at[0] != 0;
    case CKPT_DTYPE_U16:
      return Load<uint16_t>(at);
    case CKPT_DTYPE_U32:
      return Load<uint32_t>(at);
    case CKPT_DTYPE_U64:
      return Load<uint64_t>(at);
    case CKPT_DTYPE_U4:  // sub-byte integers: the low bits of their byte
      return at[0] & 0xF;
    case CKPT_DTYPE_U2:
      return at[0] & 0x3;
    default:
      return at[0];
  }
}

int64_t LoadSigned(int32_t dtype, const unsigned char* at) {
  switch (dtype) {
    case CKPT_DTYPE_I16:
      return Load<int16_t>(at);
    case CKPT_DTYPE_I32:
      return Load<int32_t>(at);
    case CKPT_DTYPE_I64:
      return Load<int64_t>(at);
    case CKPT_DTYPE_I4:  // the low bits of their byte, sign-extended
      return static_cast<int8_t>(at[0] << 4) >> 4;
    case CKPT_DTYPE_I2:
      return static_cast<int8_t>(at[0] << 6) >> 6;
    default:
      return Load<int8_t>(at);
  }
}

double LoadFloating(int32_t dtype, const unsigned char* at) {
  switch (dtype) {
    case CKPT_DTYPE_F32:
      return Load<float>(at);
    case CKPT_DTYPE_F64:
      return Load<double>(at);
    case CKPT_DTYPE_BF16: {  // the top half of a float
      const uint32_t bits = uint32_t{Load<uint16_t>(at)} << 16;
      float value;
      std::memcpy(&value, &bits, sizeof value);
      return value;
    }
    case CKPT_DTYPE_F8_E8M0:  // a power of two, unsigned; all ones is NaN
      return at[0] == 0xFF ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, at[0] - 127);
    default:
      break;
  }
  if (const auto format = MiniFloatOf(dtype)) {
    return DecodeMiniFloat(*format, dtype == CKPT_DTYPE_F16 ? Load<uint16_t>(at) : at[0]);
  }
  return std::numeric_limits<double>::quiet_NaN();
}

std::pair<double, double> LoadComplex(int32_t dtype, const unsigned char* at) {
  if (dtype == CKPT_DTYPE_C64) return {Load<float>(at), Load<float>(at + 4)};
  return {Load<double>(at), Load<double>(at + 8)};
}

std::string FormatDouble(double value) { return FormatNumber(value); }

std::string FormatElement(int32_t dtype, const unsigned char* at) {
  switch (KindOf(dtype)) {
    case ElementKind::kUnsigned:
      if (dtype == CKPT_DTYPE_BOOL) return at[0] ? "true" : "false";
      return FormatNumber(LoadUnsigned(dtype, at));
    case ElementKind::kSigned:
      return FormatNumber(LoadSigned(dtype, at));
    case ElementKind::kComplex: {
      const auto [re, im] = LoadComplex(dtype, at);
      // As stored: C64's parts print as floats, so that 0.1f reads "0.1", not its double expansion.
      if (dtype == CKPT_DTYPE_C64) {
        return "(" + FormatNumber(static_cast<float>(re)) + "," + FormatNumber(static_cast<float>(im)) + ")";
      }
      return "(" + FormatNumber(re) + "," + FormatNumber(im) + ")";
    }
    case ElementKind::kFloating:
      break;
  }
  const double value = LoadFloating(dtype, at);
  // Every floating dtype but F64 fits in a float, whose shortest text is the one to show.
  return dtype == CKPT_DTYPE_F64 ? FormatNumber(value) : FormatNumber(static_cast<float>(value));
}

std::optional<std::string> NpyDescr(int32_t dtype) {
  switch (dtype) {
    case CKPT_DTYPE_BOOL:
      return "|b1";
    case CKPT_DTYPE_U8:
      return "|u1";
    case CKPT_DTYPE_I8:
      return "|i1";
    case CKPT_DTYPE_I16:
      return "<i2";
    case CKPT_DTYPE_U16:
      return "<u2";
    case CKPT_DTYPE_I32:
      return "<i4";
    case CKPT_DTYPE_U32:
      return "<u4";
    case CKPT_DTYPE_I64:
      return "<i8";
    case CKPT_DTYPE_U64:
      return "<u8";
    case CKPT_DTYPE_F16:
      return "<f2";
    case CKPT_DTYPE_F32:
      return "<f4";
    case CKPT_DTYPE_F64:
      return "<f8";
    case CKPT_DTYPE_C64:
      return "<c8";
    case CKPT_DTYPE_C128:
      return "<c16";
    default:
      return std::nullopt;
  }
}

}  // namespace ckpt_cli

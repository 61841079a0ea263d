// Elements of every CKPT_DTYPE_*, as the `ckpt` tool prints and compares them, and their numpy names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace ckpt_cli {

// How a dtype's elements are read: as unsigned or signed integers (bool and the sub-byte ones included), as one
// real number (every floating dtype), or as a pair of them.
enum class ElementKind { kUnsigned, kSigned, kFloating, kComplex };
ElementKind KindOf(int32_t dtype);

// The element at `at`, for a dtype of the matching kind.
uint64_t LoadUnsigned(int32_t dtype, const unsigned char* at);
int64_t LoadSigned(int32_t dtype, const unsigned char* at);
double LoadFloating(int32_t dtype, const unsigned char* at);  // exact: every floating dtype fits in a double
std::pair<double, double> LoadComplex(int32_t dtype, const unsigned char* at);

// The element as text: "true", "-3", "0.5", "(1,-2)".
std::string FormatElement(int32_t dtype, const unsigned char* at);
// Shortest text that reads back as `value`.
std::string FormatDouble(double value);

// numpy's array-protocol name of the dtype ("<f4", "|b1"), or nothing where numpy has none (bfloat16, the float8
// and float4 formats, the sub-byte integers: ml_dtypes' types, which a .npy file cannot name).
std::optional<std::string> NpyDescr(int32_t dtype);

}  // namespace ckpt_cli

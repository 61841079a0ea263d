// Element types, numbered as CKPT_DTYPE_* in ckpt.h.
#pragma once

#include <cstdint>

namespace ckpt::runtime {

enum class DType : int32_t {
  kBool = 1,
  kU8,
  kI8,
  kI16,
  kU16,
  kI32,
  kU32,
  kI64,
  kU64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kC64,
  kF8E4M3,
  kF8E5M2,
  kC128,
  kF8E4M3Fnuz,
  kF8E5M2Fnuz,
  kF8E4M3B11Fnuz,
  kF8E3M4,
  kF8E4M3Ieee,
  kF8E8M0,
  kF4E2M1,
  kI4,
  kU4,
  kI2,
  kU2,
};

// 0 for a value that is not a dtype.
uint32_t DTypeSize(int32_t dtype);
// "?" for a value that is not a dtype.
const char* DTypeName(int32_t dtype);
inline bool IsValidDType(int32_t dtype) { return DTypeSize(dtype) != 0; }

}  // namespace ckpt::runtime

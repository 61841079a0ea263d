#include "runtime/core/dtype.h"

namespace ckpt::runtime {
namespace {

struct DTypeEntry {
  const char* name;
  uint32_t size;
};

// Indexed by CKPT_DTYPE_* value.
constexpr DTypeEntry kDTypes[] = {
    {"?", 0},           {"BOOL", 1},         {"U8", 1},
    {"I8", 1},          {"I16", 2},          {"U16", 2},
    {"I32", 4},         {"U32", 4},          {"I64", 8},
    {"U64", 8},         {"F16", 2},          {"BF16", 2},
    {"F32", 4},         {"F64", 8},          {"C64", 8},
    {"F8_E4M3", 1},     {"F8_E5M2", 1},      {"C128", 16},
    {"F8_E4M3FNUZ", 1}, {"F8_E5M2FNUZ", 1},  {"F8_E4M3B11FNUZ", 1},
    {"F8_E3M4", 1},     {"F8_E4M3_IEEE", 1}, {"F8_E8M0", 1},
    {"F4_E2M1", 1},     {"I4", 1},           {"U4", 1},
    {"I2", 1},          {"U2", 1},
};
constexpr int32_t kDTypeCount = sizeof(kDTypes) / sizeof(kDTypes[0]);

const DTypeEntry& Lookup(int32_t dtype) { return kDTypes[(dtype > 0 && dtype < kDTypeCount) ? dtype : 0]; }

}  // namespace

uint32_t DTypeSize(int32_t dtype) { return Lookup(dtype).size; }
const char* DTypeName(int32_t dtype) { return Lookup(dtype).name; }

}  // namespace ckpt::runtime

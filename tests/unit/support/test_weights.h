// Bytes that compress as a model's weights do: small normally distributed values in the element type that a byte
// grouping of the block codec stands for (io/block_codec.h): BF16 for 2, F32 for 4, F64 for 8, and for 1 (integers,
// float8) bytes of a few small values. A length that is not a whole number of elements ends in zeros.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>

namespace ckpt::testing {

inline std::string Weights(uint64_t length, uint32_t element_bytes, uint32_t seed = 1) {
  std::mt19937 random(seed);
  std::normal_distribution<double> normal(0.0, 0.02);
  std::string bytes(length, '\0');
  for (uint64_t at = 0; at + element_bytes <= length; at += element_bytes) {
    const double value = normal(random);
    if (element_bytes == 1) {
      bytes[at] = static_cast<char>(static_cast<int>(std::lround(value * 200)));
    } else if (element_bytes == 2) {
      const float f = static_cast<float>(value);
      uint32_t word;
      std::memcpy(&word, &f, sizeof word);
      const uint16_t bf16 = static_cast<uint16_t>(word >> 16);
      std::memcpy(&bytes[at], &bf16, sizeof bf16);
    } else if (element_bytes == 4) {
      const float f = static_cast<float>(value);
      std::memcpy(&bytes[at], &f, sizeof f);
    } else {
      std::memcpy(&bytes[at], &value, sizeof value);
    }
  }
  return bytes;
}

}  // namespace ckpt::testing

// Test bytes that differ from position to position and from seed to seed (a linear congruential sequence), so that
// a piece written at a wrong offset, twice, or from another file shows.
#pragma once

#include <cstdint>
#include <string>

namespace ckpt::testing {

inline std::string Pattern(uint64_t size, uint32_t seed) {
  std::string bytes(size, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (char& c : bytes) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  return bytes;
}

}  // namespace ckpt::testing

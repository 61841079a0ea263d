// libFuzzer entry for the safetensors header and Hugging Face index parsers. Each input is a whole safetensors file
// (its size is the file's, so the tensors must tile what follows the header) and, the same bytes, an index. What
// either accepts must come back unchanged through its encoder: the parsers and encoders agree on the format.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/format/safetensors.h"

namespace {

using namespace ckpt::runtime;

bool SameTensors(const std::vector<SafetensorsTensor>& a, const std::vector<SafetensorsTensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].key != b[i].key || a[i].dtype != b[i].dtype || a[i].shape != b[i].shape || a[i].begin != b[i].begin ||
        a[i].end != b[i].end) {
      return false;
    }
  }
  return true;
}

void RoundTripHeader(std::string_view input) {
  auto header = ParseSafetensorsHeader(input, input.size(), "fuzz");
  if (!header.ok()) return;
  const uint64_t data_length = input.size() - header->data_start;
  // Whatever the parser accepts can be encoded again.
  const auto encoded_or = EncodeSafetensorsHeader(header->tensors, header->metadata, 8);
  if (!encoded_or.ok()) abort();
  const std::string& encoded = encoded_or.value();
  auto again = ParseSafetensorsHeader(encoded, encoded.size() + data_length, "fuzz");
  if (!again.ok() || !SameTensors(again->tensors, header->tensors) || again->metadata != header->metadata) abort();
}

void RoundTripIndex(std::string_view input) {
  auto index = ParseHfIndex(input, "fuzz");
  if (!index.ok()) return;
  auto again = ParseHfIndex(EncodeHfIndex(*index), "fuzz");
  if (!again.ok() || again->total_size != index->total_size || again->weight_map != index->weight_map) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  RoundTripHeader(input);
  RoundTripIndex(input);
  return 0;
}

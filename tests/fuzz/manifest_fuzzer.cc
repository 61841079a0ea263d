// libFuzzer entry for the MANIFEST decoder. Each input is decoded twice: as a whole file, which exercises the header
// checks, and as a message behind a correct header, so that mutations reach the Cap'n Proto parser and the semantic
// validation instead of stopping at the checksum.
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/checksum.h"
#include "runtime/format/manifest.h"

namespace {

void PutLittleEndian(std::string* out, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out->push_back(static_cast<char>(value >> (8 * i)));
}

std::string WithValidHeader(const std::string& message) {
  std::string file = "CKPTMNFS";
  PutLittleEndian(&file, ckpt::runtime::kFormatMajor, 4);
  PutLittleEndian(&file, ckpt::runtime::kFormatMinor, 4);
  PutLittleEndian(&file, message.size(), 8);
  PutLittleEndian(&file, ckpt::io::Checksum(message.data(), message.size()), 8);
  return file + message;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  (void)ckpt::runtime::DecodeManifest(input, "fuzz");
  (void)ckpt::runtime::DecodeManifest(WithValidHeader(input), "fuzz");
  return 0;
}

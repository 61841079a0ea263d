// The safetensors format and the Hugging Face sharded layout around it, parsed defensively and written so that
// the data begins at an aligned offset.
//
// A safetensors file: an 8-byte little-endian header length N, N bytes of JSON (UTF-8, may end in spaces), then
// the data. The JSON maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the
// data, which starts at 8 + N), and the optional "__metadata__" to an object of string values.
// A sharded checkpoint: files such as model-00001-of-00004.safetensors beside model.safetensors.index.json, whose
// "weight_map" maps every tensor name to the file that holds it and whose "metadata" has "total_size".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "runtime/core/box.h"

namespace ckpt::runtime {

// A header longer than this is refused as hostile: the reference implementation's cap (MAX_HEADER_SIZE in
// huggingface/safetensors), so no file that it reads is refused here.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
inline constexpr char kHfIndexName[] = "model.safetensors.index.json";
// The one file of an unsharded Hugging Face directory.
inline constexpr char kHfSingleFileName[] = "model.safetensors";
inline constexpr char kSafetensorsSuffix[] = ".safetensors";
// An index file longer than this is refused as hostile.
inline constexpr uint64_t kMaxHfIndexBytes = 256ull << 20;

struct SafetensorsTensor {
  std::string key;
  int32_t dtype = 0;   // CKPT_DTYPE_*
  Shape shape;         // empty for a scalar
  uint64_t begin = 0;  // data_offsets, relative to the start of the data
  uint64_t end = 0;
};

struct SafetensorsHeader {
  uint64_t data_start = 0;                                    // 8 + N: where the data begins in the file
  std::vector<SafetensorsTensor> tensors;                     // sorted by key
  std::vector<std::pair<std::string, std::string>> metadata;  // "__metadata__", in key order
};

// Whether a file name ends in ".safetensors", and in ".index.json" (an index, whatever its prefix).
bool IsSafetensorsFileName(std::string_view name);
bool IsIndexFileName(std::string_view name);

// The safetensors name of a dtype ("F32", "BF16", ...); empty when safetensors has none for it. Only layouts that
// match exactly are named: safetensors' F4 (two elements a byte) and F6 types are not ckpt's F4_E2M1 (one a byte).
std::string_view SafetensorsDTypeName(int32_t dtype);
// The dtype of a safetensors name; 0 when unknown.
int32_t DTypeOfSafetensorsName(std::string_view name);

// Parses a whole file's first bytes: `prefix` holds at least the 8-byte length and the header it announces (more
// is ignored; less is kInvalidArgument, the caller's mistake); `file_size` is the file's size. Refuses with
// kCorrupt, naming `origin` and what is wrong: a file shorter than 8 bytes; a header length over
// kMaxSafetensorsHeaderBytes or past the end of the file; a header that does not begin with '{' (spaces may follow
// the JSON); JSON that is invalid, not an object, or with a duplicate key anywhere; an entry that is not an object
// with exactly dtype (a string), shape (an array of at most CKPT_MAX_NDIM integers in [0, 2^64)) and data_offsets
// (two such integers); a dtype without a ckpt equivalent; a shape whose byte size reaches 2^64; data_offsets with
// end < begin or a length other than the element count times the dtype's size; offsets beyond the data (which is
// file_size - data_start bytes); tensors that overlap or leave a hole (sorted by begin they must tile
// [0, data length) exactly, as the format requires; a tensor of no elements has begin == end); a "__metadata__"
// that is not an object of strings; a tensor name, metadata key or value that is not a key's text
// (common/key_text.h): JSON refuses bytes that are not UTF-8 and lone surrogates ("\ud800"), this a NUL
// ("\u0000"), which a C string would cut short. Memory: the header's text while it is parsed, and a tensor's entry
// (80 bytes, up to twice that while the vector grows) and shape; duplicate names are found once the tensors are
// sorted, without a set of them (which would cost more than the tensors).
Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view prefix, uint64_t file_size,
                                                 const std::string& origin);

// Reads and parses the header of the safetensors file `name` beneath directory `dir` (opened as a checkpoint's
// files are: io::File::OpenBeneath). Reads the length and the header only, the length checked against the cap and
// the file's size before anything is allocated for it; errors name the file's path. The tensors' vector is trimmed
// to their number once the text is freed.
Result<SafetensorsHeader> ReadSafetensorsHeader(const std::string& dir, const std::string& name);

// The 8-byte length and JSON header for `tensors` (their begin/end as given, in the order given) and `metadata`
// (first, when not empty), padded with spaces so that the data starts at a multiple of `alignment` (a power of two,
// at least 8). Nothing is encoded that ParseSafetensorsHeader would refuse: kInvalidArgument for a name or value
// that is not valid UTF-8 without NUL (common/key_text.h) or a key given twice; kUnsupported for a tensor named
// "__metadata__", a dtype that safetensors does not name, or a header longer than kMaxSafetensorsHeaderBytes.
// ParseSafetensorsHeader gives back what was encoded, the tensors and metadata sorted by key.
Result<std::string> EncodeSafetensorsHeader(const std::vector<SafetensorsTensor>& tensors,
                                            const std::vector<std::pair<std::string, std::string>>& metadata,
                                            uint64_t alignment);

struct HfIndex {
  uint64_t total_size = 0;                                      // metadata.total_size
  std::vector<std::pair<std::string, std::string>> weight_map;  // tensor name -> file name, sorted by name
};

// Parses model.safetensors.index.json's bytes. Refuses with kCorrupt naming `origin`: invalid JSON or not an
// object, duplicate keys anywhere (so a tensor listed twice), JSON nested deeper than 64 levels, a missing or
// non-object weight_map, a tensor name that holds a NUL, a file name that is not a string, not a plain name in the
// same directory (empty, absolute, containing '/', ".." or a NUL) or does not end in ".safetensors", a metadata that
// is not an object, a total_size that is not an integer in [0, 2^64) (it may be absent: 0). Other members, at the
// top or in metadata, are ignored.
Result<HfIndex> ParseHfIndex(std::string_view json, const std::string& origin);
// The index as the Hugging Face libraries write it (indented, metadata first), weight_map in the order given (names
// unique and UTF-8).
std::string EncodeHfIndex(const HfIndex& index);

}  // namespace ckpt::runtime

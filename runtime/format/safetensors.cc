#include "runtime/format/safetensors.h"

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "common/key_text.h"
#include "io/file_io.h"
#include "runtime/core/dtype.h"
#include "runtime/format/json_schema_reader.h"

namespace ckpt::runtime {
namespace {

using json_schema::Frame;
using json_schema::Json;
using json_schema::JsonQuoted;
using json_schema::KindName;
using json_schema::Scalar;
using json_schema::SchemaSax;
// What is written keeps its members in the order given (nlohmann::json would sort them).
using OrderedJson = nlohmann::ordered_json;

constexpr char kMetadataKey[] = "__metadata__";
constexpr uint64_t kLengthBytes = 8;  // the little-endian header length that begins a safetensors file
constexpr char kEntryFields[][13] = {"dtype", "shape", "data_offsets"};

struct NamedDType {
  std::string_view name;
  DType dtype;
};

// safetensors' dtypes whose elements are laid out exactly as a ckpt dtype's. Left out: F4, F6_E2M3 and F6_E3M2,
// packed several to a byte or across bytes, where ckpt's sub-byte dtypes take a whole byte per element.
constexpr NamedDType kNamedDTypes[] = {
    {"BOOL", DType::kBool},
    {"U8", DType::kU8},
    {"I8", DType::kI8},
    {"I16", DType::kI16},
    {"U16", DType::kU16},
    {"I32", DType::kI32},
    {"U32", DType::kU32},
    {"I64", DType::kI64},
    {"U64", DType::kU64},
    {"F16", DType::kF16},
    {"BF16", DType::kBF16},
    {"F32", DType::kF32},
    {"F64", DType::kF64},
    {"C64", DType::kC64},
    {"F8_E5M2", DType::kF8E5M2},
    {"F8_E4M3", DType::kF8E4M3},  // e4m3fn, as ml_dtypes' float8_e4m3fn
    {"F8_E8M0", DType::kF8E8M0},
    {"F8_E4M3FNUZ", DType::kF8E4M3Fnuz},
    {"F8_E5M2FNUZ", DType::kF8E5M2Fnuz},
};

std::string ShapeText(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// ---- The safetensors header ------------------------------------------------------------------------------------

// The header's JSON as written: entries and __metadata__. Sizes, offsets and tiling are checked afterwards, on the
// whole set.
class HeaderSax final : public SchemaSax {
 public:
  std::vector<SafetensorsTensor> tensors;  // in the order of the file
  std::vector<std::pair<std::string, std::string>> metadata;

 private:
  enum Role { kEntry = kTop + 1, kShape, kOffsets, kMetadata };

  Result<int> Open(const Frame& parent, bool object) override {
    if (parent.role == kTop && object) {
      if (parent.key == kMetadataKey) {
        if (has_metadata_) return Corrupt("duplicate key " + JsonQuoted(kMetadataKey));
        has_metadata_ = true;
        return kMetadata;
      }
      RETURN_IF_ERROR(CheckKeyText(parent.key, "tensor name", Code::kCorrupt));
      tensors.emplace_back();
      tensors.back().key = parent.key;
      fields_ = 0;
      return kEntry;
    }
    if (parent.role == kEntry) {
      RETURN_IF_ERROR(Field(parent.key));
      if (!object && parent.key == "shape") return kShape;
      if (!object && parent.key == "data_offsets") return kOffsets;
    }
    return Misplaced(parent, object ? "an object" : "an array");
  }

  Status Take(const Frame& parent, Scalar value) override {
    const bool is_unsigned = value.kind == Scalar::kUnsigned;
    const bool is_string = value.kind == Scalar::kString;
    if (parent.role == kEntry) {
      RETURN_IF_ERROR(Field(parent.key));
      if (parent.key == "dtype" && is_string) return SetDType(value.text);
    } else if (parent.role == kShape && is_unsigned) {
      if (parent.elements == kMaxDims) {
        return Corrupt(TensorName() + ": shape has more than " + std::to_string(kMaxDims) + " dimensions");
      }
      tensors.back().shape.push_back(value.number);
      return Status::Ok();
    } else if (parent.role == kOffsets && is_unsigned) {
      if (parent.elements < 2) (parent.elements == 0 ? tensors.back().begin : tensors.back().end) = value.number;
      return Status::Ok();  // a third offset is refused when the array closes
    } else if (parent.role == kMetadata && is_string) {
      RETURN_IF_ERROR(CheckKeyText(parent.key, "__metadata__ key", Code::kCorrupt));
      RETURN_IF_ERROR(
          CheckKeyText(value.text, "value", Code::kCorrupt).WithContext("__metadata__ " + Quoted(parent.key)));
      metadata.emplace_back(parent.key, std::move(value.text));
      return Status::Ok();
    }
    return Misplaced(parent, KindName(value.kind));
  }

  Status Close(const Frame& frame) override {
    if (frame.role == kOffsets && frame.elements != 2) {
      return Corrupt(TensorName() + ": data_offsets has " + std::to_string(frame.elements) + " entries, not 2");
    }
    if (frame.role == kEntry) {
      for (size_t i = 0; i < std::size(kEntryFields); ++i) {
        if (!(fields_ & (1u << i))) return Corrupt(TensorName() + ": no " + kEntryFields[i]);
      }
    }
    return Status::Ok();
  }

  // Notes that the current entry has the member `name`; a duplicate never gets here (SchemaSax refuses it).
  Status Field(const std::string& name) {
    for (size_t i = 0; i < std::size(kEntryFields); ++i) {
      if (name == kEntryFields[i]) {
        fields_ |= 1u << i;
        return Status::Ok();
      }
    }
    return Corrupt(TensorName() + ": unknown member " + JsonQuoted(name) +
                   " (an entry holds exactly dtype, shape and data_offsets)");
  }

  Status SetDType(const std::string& name) {
    tensors.back().dtype = DTypeOfSafetensorsName(name);
    if (tensors.back().dtype != 0) return Status::Ok();
    return Corrupt(TensorName() + ": dtype " + JsonQuoted(name) + " is unknown or has no ckpt equivalent");
  }

  // Why a value that is `got` cannot stand where it is in `parent`.
  Status Misplaced(const Frame& parent, const char* got) const {
    const std::string is = std::string(" is ") + got + ", not ";
    switch (parent.role) {
      case kTop:
        if (parent.key == kMetadataKey) return Corrupt("__metadata__" + is + "an object");
        return Corrupt("tensor " + JsonQuoted(parent.key) + is + "an object");
      case kEntry:
        return Corrupt(TensorName() + ": " + parent.key + is + (parent.key == "dtype" ? "a string" : "an array"));
      case kMetadata:
        return Corrupt("__metadata__ " + JsonQuoted(parent.key) + is + "a string");
      default:  // an element of shape or data_offsets
        return Corrupt(TensorName() + (parent.role == kShape ? ": shape[" : ": data_offsets[") +
                       std::to_string(parent.elements) + "]" + is + "an integer in [0, 2^64)");
    }
  }

  std::string TensorName() const { return "tensor " + JsonQuoted(tensors.back().key); }

  // A tensor named twice is refused once they are sorted (RepeatedName); a value that is neither a tensor nor the
  // metadata is refused as it is read.
  bool ChecksOwnDuplicates(int role) const override { return role == kTop; }

  uint32_t fields_ = 0;  // the entry's members seen so far, bit i for kEntryFields[i]
  bool has_metadata_ = false;
};

std::string OffsetsText(const SafetensorsTensor& t) {
  return "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]";
}

// Checks one tensor against the data section of `data_length` bytes: a byte size that fits in 64 bits and equals
// the length of its data_offsets, which lie within the data.
Status CheckTensor(const SafetensorsTensor& t, uint64_t data_length) {
  const std::string name = "tensor " + JsonQuoted(t.key) + ": ";
  const uint64_t element_size = DTypeSize(t.dtype);
  const std::string layout = "shape " + ShapeText(t.shape) + " of " + std::string(SafetensorsDTypeName(t.dtype));
  if (!VolumeFits(t.shape, element_size)) return Corrupt(name + layout + " holds 2^64 bytes or more");
  if (t.end < t.begin) return Corrupt(name + OffsetsText(t) + " end before they begin");
  const uint64_t bytes = Volume(t.shape) * element_size;
  if (t.end - t.begin != bytes) {
    return Corrupt(name + OffsetsText(t) + " hold " + std::to_string(t.end - t.begin) + " bytes but " + layout +
                   " needs " + std::to_string(bytes));
  }
  if (t.end > data_length) {
    return Corrupt(name + OffsetsText(t) + " reach past the end of the data (" + std::to_string(data_length) +
                   " bytes)");
  }
  return Status::Ok();
}

// Sorted by offset, the tensors must tile [0, data_length) exactly, as the format requires: a hole would be bytes
// that no tensor owns, an overlap bytes that two tensors share.
Status CheckTiling(const std::vector<SafetensorsTensor>& tensors, uint64_t data_length) {
  std::vector<const SafetensorsTensor*> by_offset;
  for (const SafetensorsTensor& t : tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const SafetensorsTensor* a, const SafetensorsTensor* b) {
    return std::make_pair(a->begin, a->end) < std::make_pair(b->begin, b->end);
  });
  const auto hole = [](uint64_t from, uint64_t to) {
    return Corrupt("bytes [" + std::to_string(from) + ", " + std::to_string(to) + ") of the data belong to no tensor");
  };
  uint64_t covered = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const SafetensorsTensor* t : by_offset) {
    if (t->begin < covered) {
      return Corrupt("tensor " + JsonQuoted(t->key) + ": " + OffsetsText(*t) + " overlap tensor " +
                     JsonQuoted(previous->key) + "'s " + OffsetsText(*previous));
    }
    if (t->begin > covered) return hole(covered, t->begin);
    covered = t->end;
    previous = t;
  }
  return covered == data_length ? Status::Ok() : hole(covered, data_length);
}

// The header length N that begins a file of `file_size` bytes whose first bytes are `prefix`, checked against the
// cap and the file before anything is allocated for the header.
Result<uint64_t> HeaderLength(std::string_view prefix, uint64_t file_size, const std::string& origin) {
  if (file_size < kLengthBytes) {
    return Corrupt(origin + ": " + std::to_string(file_size) + " bytes, too short for the 8-byte header length");
  }
  if (prefix.size() < kLengthBytes) {
    return InvalidArgument(origin + ": given " + std::to_string(prefix.size()) + " of the file's first 8 bytes");
  }
  uint64_t length = 0;
  for (size_t i = kLengthBytes; i-- > 0;) length = length << 8 | static_cast<unsigned char>(prefix[i]);
  if (length > kMaxSafetensorsHeaderBytes) {
    return Corrupt(origin + ": header length " + std::to_string(length) + " is over the limit of " +
                   std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  }
  if (length > file_size - kLengthBytes) {
    return Corrupt(origin + ": header length " + std::to_string(length) + " reaches past the end of the " +
                   std::to_string(file_size) + "-byte file");
  }
  return length;
}

// Why `tensors` and `metadata` cannot make a header that ParseSafetensorsHeader accepts: a name or value that is
// not text (common/key_text.h), a tensor named twice or "__metadata__", a dtype that safetensors does not name, a
// metadata key given twice (nlohmann would keep one silently).
Status CheckEncodable(const std::vector<SafetensorsTensor>& tensors,
                      const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::set<std::string_view> keys;
  for (const auto& [key, value] : metadata) {
    RETURN_IF_ERROR(CheckKeyText(key, "__metadata__ key", Code::kInvalidArgument));
    RETURN_IF_ERROR(CheckKeyText(value, "value", Code::kInvalidArgument).WithContext("__metadata__ " + Quoted(key)));
    if (!keys.insert(key).second) return InvalidArgument("__metadata__ key " + Quoted(key) + " given twice");
  }
  std::vector<std::string_view> names;  // sorted to find one given twice: a set would cost 4 times the memory
  for (const SafetensorsTensor& t : tensors) {
    const std::string name = "tensor " + Quoted(t.key);
    RETURN_IF_ERROR(CheckKeyText(t.key, "tensor name", Code::kInvalidArgument));
    if (t.key == kMetadataKey) return Unsupported(name + ": safetensors reserves the name for the file's metadata");
    if (SafetensorsDTypeName(t.dtype).empty()) {
      return Unsupported(name + " is " + DTypeName(t.dtype) + ", which safetensors has no name for");
    }
    names.push_back(t.key);
  }
  std::sort(names.begin(), names.end());
  const auto twice = std::adjacent_find(names.begin(), names.end());
  if (twice != names.end()) return InvalidArgument("tensor " + Quoted(*twice) + " given twice");
  return Status::Ok();
}

// ---- The Hugging Face index ------------------------------------------------------------------------------------

// model.safetensors.index.json: weight_map, and total_size in metadata. Other members, at the top or in metadata
// (writers add their own, such as total_parameters), are skipped.
class IndexSax final : public SchemaSax {
 public:
  HfIndex index;
  bool has_weight_map = false;

 private:
  enum Role { kWeightMap = kTop + 1, kMetadata };

  Result<int> Open(const Frame& parent, bool object) override {
    if (parent.role == kTop && object && parent.key == "weight_map") {
      has_weight_map = true;
      return kWeightMap;
    }
    if (parent.role == kTop && object && parent.key == "metadata") return kMetadata;
    if (!Read(parent)) return kSkip;
    return Misplaced(parent, object ? "an object" : "an array");
  }

  Status Take(const Frame& parent, Scalar value) override {
    if (parent.role == kWeightMap && value.kind == Scalar::kString) {
      RETURN_IF_ERROR(CheckKeyText(parent.key, "weight_map tensor name", Code::kCorrupt));
      RETURN_IF_ERROR(CheckShardName(parent.key, value.text));
      index.weight_map.emplace_back(parent.key, std::move(value.text));
      return Status::Ok();
    }
    if (parent.role == kMetadata && parent.key == "total_size" && value.kind == Scalar::kUnsigned) {
      index.total_size = value.number;
      return Status::Ok();
    }
    return Read(parent) ? Misplaced(parent, KindName(value.kind)) : Status::Ok();
  }

  Status Close(const Frame&) override { return Status::Ok(); }
  // A tensor listed twice is refused once they are sorted (RepeatedName).
  bool ChecksOwnDuplicates(int role) const override { return role == kWeightMap; }

  // Whether the member being read in `parent` is one this schema reads (and so must have the right type).
  static bool Read(const Frame& parent) {
    if (parent.role == kTop) return parent.key == "weight_map" || parent.key == "metadata";
    return parent.role == kWeightMap || (parent.role == kMetadata && parent.key == "total_size");
  }

  static Status Misplaced(const Frame& parent, const char* got) {
    if (parent.role == kTop) return Corrupt(parent.key + " is " + got + ", not an object");
    if (parent.role == kWeightMap) {
      return Corrupt("weight_map " + JsonQuoted(parent.key) + " is " + got + ", not a file name");
    }
    return Corrupt(std::string("metadata.total_size is ") + got + ", not an integer in [0, 2^64)");
  }

  // A shard must be a plain file beside the index: a name that leads elsewhere is refused.
  static Status CheckShardName(const std::string& tensor, const std::string& file) {
    const std::string names = "weight_map " + JsonQuoted(tensor) + " names " + JsonQuoted(file);
    if (file.empty() || file.find('/') != std::string::npos || file.find("..") != std::string::npos ||
        file.find('\0') != std::string::npos) {
      return Corrupt(names + ", not a plain file name in the index's directory");
    }
    if (!IsSafetensorsFileName(file)) return Corrupt(names + ", which does not end in " + kSafetensorsSuffix);
    return Status::Ok();
  }
};

bool ByKey(const std::pair<std::string, std::string>& a, const std::pair<std::string, std::string>& b) {
  return a.first < b.first;
}

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// The first name that `sorted` (sorted by name(element)) holds twice; null if none.
template <typename Element, typename Name>
const std::string* RepeatedName(const std::vector<Element>& sorted, Name&& name) {
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (name(sorted[i]) == name(sorted[i - 1])) return &name(sorted[i]);
  }
  return nullptr;
}

}  // namespace

bool IsSafetensorsFileName(std::string_view name) { return EndsWith(name, kSafetensorsSuffix); }
bool IsIndexFileName(std::string_view name) { return EndsWith(name, ".index.json"); }

std::string_view SafetensorsDTypeName(int32_t dtype) {
  for (const NamedDType& named : kNamedDTypes) {
    if (static_cast<int32_t>(named.dtype) == dtype) return named.name;
  }
  return {};
}

int32_t DTypeOfSafetensorsName(std::string_view name) {
  for (const NamedDType& named : kNamedDTypes) {
    if (named.name == name) return static_cast<int32_t>(named.dtype);
  }
  return 0;
}

Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view prefix, uint64_t file_size,
                                                 const std::string& origin) {
  ASSIGN_OR_RETURN(const uint64_t length, HeaderLength(prefix, file_size, origin));
  if (prefix.size() - kLengthBytes < length) {
    return InvalidArgument(origin + ": given " + std::to_string(prefix.size()) + " bytes of the file, short of the " +
                           std::to_string(kLengthBytes + length) + " that hold its header");
  }
  const std::string_view json = prefix.substr(kLengthBytes, length);
  if (json.empty() || json.front() != '{') return Corrupt(origin + ": the header does not begin with '{'");
  HeaderSax sax;
  RETURN_IF_ERROR(sax.Parse(json, origin));

  SafetensorsHeader header;
  header.data_start = kLengthBytes + length;
  header.tensors = std::move(sax.tensors);
  header.metadata = std::move(sax.metadata);
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) { return a.key < b.key; });
  std::sort(header.metadata.begin(), header.metadata.end(), ByKey);
  const auto tensor_name = [](const SafetensorsTensor& t) -> const std::string& { return t.key; };
  if (const std::string* twice = RepeatedName(header.tensors, tensor_name)) {
    return Corrupt(origin + ": duplicate key " + JsonQuoted(*twice));
  }
  const uint64_t data_length = file_size - header.data_start;
  for (const SafetensorsTensor& t : header.tensors) RETURN_IF_ERROR(CheckTensor(t, data_length).WithContext(origin));
  RETURN_IF_ERROR(CheckTiling(header.tensors, data_length).WithContext(origin));
  return header;
}

Result<SafetensorsHeader> ReadSafetensorsHeader(const std::string& dir, const std::string& name) {
  ASSIGN_OR_RETURN(io::File file, io::File::OpenBeneath(dir, name));
  ASSIGN_OR_RETURN(const uint64_t file_size, file.Size());
  std::string prefix(kLengthBytes, '\0');
  if (file_size >= kLengthBytes) RETURN_IF_ERROR(file.ReadAt(prefix.data(), kLengthBytes, 0));
  ASSIGN_OR_RETURN(const uint64_t length, HeaderLength(prefix, file_size, file.path()));
  prefix.resize(kLengthBytes + length);
  RETURN_IF_ERROR(file.ReadAt(prefix.data() + kLengthBytes, length, kLengthBytes));
  ASSIGN_OR_RETURN(SafetensorsHeader header, ParseSafetensorsHeader(prefix, file_size, file.path()));
  // The tensors' vector grew by doubling: up to twice their size, kept by whoever holds the header (a checkpoint
  // source, while it builds its records) unless trimmed now, once the header's text is freed.
  std::string().swap(prefix);
  header.tensors.shrink_to_fit();
  return header;
}

Result<std::string> EncodeSafetensorsHeader(const std::vector<SafetensorsTensor>& tensors,
                                            const std::vector<std::pair<std::string, std::string>>& metadata,
                                            uint64_t alignment) {
  RETURN_IF_ERROR(CheckEncodable(tensors, metadata));
  OrderedJson json = OrderedJson::object();
  if (!metadata.empty()) {
    OrderedJson& values = json[kMetadataKey] = OrderedJson::object();
    for (const auto& [key, value] : metadata) values[key] = value;
  }
  for (const SafetensorsTensor& t : tensors) {
    json[t.key] = {{"dtype", SafetensorsDTypeName(t.dtype)}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  }
  std::string text = json.dump();  // cannot throw: every string is valid UTF-8 (CheckEncodable)
  text.append((alignment - (kLengthBytes + text.size()) % alignment) % alignment, ' ');
  if (text.size() > kMaxSafetensorsHeaderBytes) {
    return Unsupported("the safetensors header of " + std::to_string(tensors.size()) + " tensors would be " +
                       std::to_string(text.size()) + " bytes, over the " + std::to_string(kMaxSafetensorsHeaderBytes) +
                       " that readers accept (spread the tensors over more files)");
  }
  std::string out;
  for (size_t i = 0; i < kLengthBytes; ++i) out.push_back(static_cast<char>(uint64_t{text.size()} >> (8 * i)));
  return out + text;
}

Result<HfIndex> ParseHfIndex(std::string_view json, const std::string& origin) {
  IndexSax sax;
  RETURN_IF_ERROR(sax.Parse(json, origin));
  if (!sax.has_weight_map) return Corrupt(origin + ": no weight_map");
  HfIndex index = std::move(sax.index);
  std::sort(index.weight_map.begin(), index.weight_map.end(), ByKey);
  const auto tensor_name = [](const std::pair<std::string, std::string>& e) -> const std::string& { return e.first; };
  if (const std::string* twice = RepeatedName(index.weight_map, tensor_name)) {
    return Corrupt(origin + ": duplicate key " + JsonQuoted(*twice) + " in \"weight_map\"");
  }
  return index;
}

std::string EncodeHfIndex(const HfIndex& index) {
  OrderedJson weight_map = OrderedJson::object();
  for (const auto& [tensor, file] : index.weight_map) weight_map[tensor] = file;
  const OrderedJson json = {{"metadata", {{"total_size", index.total_size}}}, {"weight_map", std::move(weight_map)}};
  // Indented as the Hugging Face libraries write it.
  return json.dump(2, ' ', false, OrderedJson::error_handler_t::replace) + "\n";
}

}  // namespace ckpt::runtime

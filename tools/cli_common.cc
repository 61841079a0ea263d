// The `ckpt` tool's shared helpers (tools/cli_common.h).
#include "tools/cli_common.h"

#include <algorithm>
#include <cstdio>

namespace ckpt_cli {
namespace {

// The length of the well-formed UTF-8 sequence that `text` starts with (no overlong form, no surrogate, nothing past
// U+10FFFF), with its code point in `*code_point`; 0 if it starts with none.
size_t DecodeUtf8(std::string_view text, char32_t* code_point) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  static const struct {
    unsigned char lead_mask, lead_bits;
    size_t length;
    char32_t smallest;
  } kForms[] = {{0x80, 0x00, 1, 0}, {0xe0, 0xc0, 2, 0x80}, {0xf0, 0xe0, 3, 0x800}, {0xf8, 0xf0, 4, 0x10000}};
  for (const auto& form : kForms) {
    if ((byte(0) & form.lead_mask) != form.lead_bits) continue;
    if (text.size() < form.length) return 0;
    char32_t value = byte(0) & static_cast<unsigned char>(~form.lead_mask);
    for (size_t i = 1; i < form.length; ++i) {
      if ((byte(i) & 0xc0) != 0x80) return 0;
      value = (value << 6) | (byte(i) & 0x3f);
    }
    const bool surrogate = value >= 0xd800 && value <= 0xdfff;
    if (value < form.smallest || value > 0x10ffff || surrogate) return 0;
    *code_point = value;
    return form.length;
  }
  return 0;
}

bool IsControl(char32_t code_point) { return code_point < 0x20 || (code_point >= 0x7f && code_point <= 0x9f); }

std::string HexEscape(const char* prefix, unsigned value, int digits) {
  char text[16];
  std::snprintf(text, sizeof(text), "%s%0*x", prefix, digits, value);
  return text;
}

// The escape of one code point that Escaped does not pass through, or nothing if it passes.
std::optional<std::string> EscapeOf(char32_t code_point, bool escape_backslash) {
  switch (code_point) {
    case '\\':
      return escape_backslash ? std::optional<std::string>("\\\\") : std::nullopt;
    case '\n':
      return "\\n";
    case '\t':
      return "\\t";
    case '\r':
      return "\\r";
    default:
      if (!IsControl(code_point)) return std::nullopt;
      return code_point < 0x80 ? HexEscape("\\x", code_point, 2) : HexEscape("\\u", code_point, 4);
  }
}

// `key` as a reference token of a JSON pointer (RFC 6901): '~' as "~0", '/' as "~1".
std::string PointerToken(const std::string& key) {
  std::string token;
  for (const char c : key) token += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return token;
}

// Whether `text` is well-formed UTF-8 throughout.
bool IsUtf8(std::string_view text) {
  char32_t ignored = 0;
  for (size_t at = 0, length = 0; at < text.size(); at += length) {
    if ((length = DecodeUtf8(text.substr(at), &ignored)) == 0) return false;
  }
  return true;
}

// The JSON pointer (RFC 6901) of the first string in `value`, key or value, that is not valid UTF-8.
std::optional<std::string> FirstNonUtf8String(const nlohmann::json& value, const std::string& pointer) {
  if (value.is_string()) return IsUtf8(value.get<std::string>()) ? std::nullopt : std::optional<std::string>(pointer);
  if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) {
      if (auto found = FirstNonUtf8String(value[i], pointer + "/" + std::to_string(i))) return found;
    }
  }
  if (value.is_object()) {
    for (const auto& [key, member] : value.items()) {
      if (!IsUtf8(key)) return pointer + "/" + PointerToken(key);
      if (auto found = FirstNonUtf8String(member, pointer + "/" + PointerToken(key))) return found;
    }
  }
  return std::nullopt;
}

// PrintJson's refusal of a document whose string at `pointer` is not UTF-8.
int RefuseNonUtf8(const std::string& pointer) {
  std::fprintf(stderr,
               "ckpt: cannot write JSON: the string at %s is not valid UTF-8, which JSON cannot hold exactly (the text "
               "output shows its bytes escaped)\n",
               Escaped(pointer).c_str());
  return kExitFailed;
}

constexpr int kJsonIndent = 2;

// `value` as PrintJson writes it `depth` levels deep in a document: its lines after the first indented to match.
// ASCII output escapes every line break inside a string, so each one in the text is one of the layout's.
std::string NestedDump(const nlohmann::json& value, size_t depth) {
  std::string nested;
  for (const char c : value.dump(kJsonIndent, ' ', /*ensure_ascii=*/true)) {
    nested += c;
    if (c == '\n') nested.append(depth * kJsonIndent, ' ');
  }
  return nested;
}

// The names of a streamed document's members in the order in which nlohmann::json keeps an object's.
std::vector<std::string> MemberNames(const nlohmann::json& members,
                                     const std::map<std::string, JsonArrayProducer>& arrays) {
  std::vector<std::string> names;
  for (const auto& member : members.items()) names.push_back(member.key());
  for (const auto& array : arrays) names.push_back(array.first);
  std::sort(names.begin(), names.end());
  return names;
}

// Checks the streamed document's strings in PrintJson's order; kExitFailed after reporting the first that is not
// UTF-8, or an element that could not be made.
int CheckStreamedStrings(const nlohmann::json& members, const std::map<std::string, JsonArrayProducer>& arrays,
                         const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    const std::string pointer = "/" + PointerToken(name);
    if (!IsUtf8(name)) return RefuseNonUtf8(pointer);
    std::optional<std::string> found;
    const auto array = arrays.find(name);
    if (array == arrays.end()) {
      found = FirstNonUtf8String(members.at(name), pointer);
    } else {
      uint64_t index = 0;
      const bool made = array->second([&](const nlohmann::json& element) {
        found = FirstNonUtf8String(element, pointer + "/" + std::to_string(index++));
        return !found;
      });
      if (!made && !found) return kExitFailed;
    }
    if (found) return RefuseNonUtf8(*found);
  }
  return kExitOk;
}

// Prints the streamed document as nlohmann::json would print it whole; false after reporting an element that could
// not be made.
bool PrintStreamed(const nlohmann::json& members, const std::map<std::string, JsonArrayProducer>& arrays,
                   const std::vector<std::string>& names) {
  const char* separator = "{\n";
  for (const std::string& name : names) {
    std::printf("%s  %s: ", separator, nlohmann::json(name).dump(-1, ' ', /*ensure_ascii=*/true).c_str());
    separator = ",\n";
    const auto array = arrays.find(name);
    if (array == arrays.end()) {
      std::fputs(NestedDump(members.at(name), 1).c_str(), stdout);
      continue;
    }
    bool empty = true;
    const bool made = array->second([&](const nlohmann::json& element) {
      std::printf("%s    %s", empty ? "[\n" : ",\n", NestedDump(element, 2).c_str());
      empty = false;
      return true;
    });
    if (!made) return false;
    std::fputs(empty ? "[]" : "\n  ]", stdout);
  }
  std::fputs(names.empty() ? "{}\n" : "\n}\n", stdout);
  return true;
}

// Escaped, or ControlsEscaped without `escape_backslash`.
std::string EscapeText(std::string_view text, bool escape_backslash) {
  std::string out;
  out.reserve(text.size());
  for (size_t at = 0; at < text.size();) {
    char32_t code_point = 0;
    const size_t length = DecodeUtf8(text.substr(at), &code_point);
    if (length == 0) {
      out += HexEscape("\\x", static_cast<unsigned char>(text[at++]), 2);
      continue;
    }
    const std::optional<std::string> escape = EscapeOf(code_point, escape_backslash);
    if (escape) {
      out += *escape;
    } else {
      out.append(text.substr(at, length));
    }
    at += length;
  }
  return out;
}

}  // namespace

std::string Escaped(std::string_view text) { return EscapeText(text, /*escape_backslash=*/true); }

std::string ControlsEscaped(std::string_view message) { return EscapeText(message, /*escape_backslash=*/false); }

bool IsPlainText(std::string_view text) {
  for (size_t at = 0; at < text.size();) {
    char32_t code_point = 0;
    const size_t length = DecodeUtf8(text.substr(at), &code_point);
    if (length == 0 || (IsControl(code_point) && code_point != '\n' && code_point != '\t')) return false;
    at += length;
  }
  return true;
}

int UsageError(const std::string& message) {
  std::fprintf(stderr, "ckpt: %s\nRun with --help for more information.\n", Escaped(message).c_str());
  return kExitUsage;
}

int Report(const std::string& what, int32_t status, const ckpt_error_t* err) {
  return Report(Failure{what, status, err ? ckpt_error_message(err) : ""});
}

int Report(const Failure& failure) {
  std::fprintf(stderr, "ckpt: %s: %s%s%s\n", Escaped(failure.what).c_str(), ckpt_status_string(failure.status),
               failure.message.empty() ? "" : ": ", ControlsEscaped(failure.message).c_str());
  return kExitFailed;
}

std::optional<Checkpoint> TryOpen(const std::string& dir, Failure* failure) {
  Checkpoint checkpoint;
  checkpoint.dir = dir;
  ckpt_error_t* err = nullptr;
  if (const int32_t status = ckpt_error_create(&err); status != CKPT_OK) {
    *failure = {"creating an error object", status, ""};
    return std::nullopt;
  }
  checkpoint.err.reset(err);
  ckpt_reader_t* reader = nullptr;
  if (const int32_t status = ckpt_reader_open(dir.c_str(), &reader, err); status != CKPT_OK) {
    *failure = {"opening " + dir, status, ckpt_error_message(err)};
    return std::nullopt;
  }
  checkpoint.reader.reset(reader);
  return checkpoint;
}

std::optional<Checkpoint> Open(const std::string& dir) {
  Failure failure;
  auto checkpoint = TryOpen(dir, &failure);
  if (!checkpoint) Report(failure);
  return checkpoint;
}

std::optional<ckpt_checkpoint_info> Info(Checkpoint& checkpoint, Failure* failure) {
  ckpt_checkpoint_info info = CKPT_CHECKPOINT_INFO_INIT;
  if (const int32_t status = ckpt_reader_info(checkpoint.reader.get(), &info, checkpoint.err.get());
      status != CKPT_OK) {
    *failure = {"reading " + checkpoint.dir, status, ckpt_error_message(checkpoint.err.get())};
    return std::nullopt;
  }
  return info;
}

std::optional<ckpt_tensor_info> FindTensor(Checkpoint& checkpoint, const std::string& key) {
  Failure ignored;
  const auto info = Info(checkpoint, &ignored);
  for (uint64_t t = 0; info && t < info->tensor_count; ++t) {
    ckpt_tensor_info tensor = CKPT_TENSOR_INFO_INIT;
    if (ckpt_reader_tensor(checkpoint.reader.get(), t, &tensor, checkpoint.err.get()) != CKPT_OK) break;
    if (tensor.key && key == tensor.key) return tensor;
  }
  return std::nullopt;
}

std::optional<uint64_t> ElementCount(uint32_t ndim, const uint64_t* shape) {
  uint64_t count = 1;
  for (uint32_t d = 0; d < ndim; ++d) {
    if (__builtin_mul_overflow(count, shape[d], &count)) return std::nullopt;
  }
  return count;
}

std::optional<uint64_t> BoxBytes(int32_t dtype, uint32_t ndim, const uint64_t* shape) {
  const auto count = ElementCount(ndim, shape);
  uint64_t bytes = 0;
  if (!count || __builtin_mul_overflow(*count, uint64_t{ckpt_dtype_size(dtype)}, &bytes)) return std::nullopt;
  return bytes;
}

std::string FormatShape(uint32_t ndim, const uint64_t* shape) {
  std::string text = "[";
  for (uint32_t d = 0; d < ndim; ++d) text += (d ? ", " : "") + std::to_string(shape[d]);
  return text + "]";
}

std::string FormatBox(uint32_t ndim, const uint64_t* offset, const uint64_t* shape) {
  std::string text = "[";
  for (uint32_t d = 0; d < ndim; ++d) {
    text += (d ? ", " : "") + std::to_string(offset[d]) + ":" + std::to_string(shape[d]);
  }
  return text + "]";
}

std::string FormatBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < sizeof(kUnits) / sizeof(kUnits[0])) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f %s", value, kUnits[unit]);
  return text;
}

std::string Count(uint64_t count, const char* singular, const char* plural) {
  return std::to_string(count) + " " + (count == 1 ? singular : plural);
}

nlohmann::json ShapeJson(uint32_t ndim, const uint64_t* shape) {
  nlohmann::json array = nlohmann::json::array();
  for (uint32_t d = 0; d < ndim; ++d) array.push_back(shape[d]);
  return array;
}

int PrintJson(const nlohmann::json& value) {
  if (const auto pointer = FirstNonUtf8String(value, "")) return RefuseNonUtf8(*pointer);
  std::printf("%s\n", value.dump(kJsonIndent, ' ', /*ensure_ascii=*/true).c_str());
  return kExitOk;
}

int PrintJsonStreamed(const nlohmann::json& members, const std::map<std::string, JsonArrayProducer>& arrays) {
  const std::vector<std::string> names = MemberNames(members, arrays);
  if (const int checked = CheckStreamedStrings(members, arrays, names); checked != kExitOk) return checked;
  return PrintStreamed(members, arrays, names) ? kExitOk : kExitFailed;
}

}  // namespace ckpt_cli

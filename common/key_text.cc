#include "common/key_text.h"

#include <cstdint>
#include <cstdio>

namespace ckpt {
namespace {

// The length of the valid UTF-8 sequence that begins at `text[at]`, or 0 if none does. The ranges of the second
// byte are RFC 3629's table: they exclude the overlong forms (E0 80..9F, F0 80..8F), the surrogates (ED A0..BF)
// and everything above U+10FFFF (F4 90.., F5..FF); C0 and C1 only ever begin overlong forms.
size_t SequenceLength(std::string_view text, size_t at) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(at);
  if (lead < 0x80) return 1;
  size_t length = 0;
  uint8_t second_min = 0x80, second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_min = 0xA0;
    if (lead == 0xED) second_max = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_min = 0x90;
    if (lead == 0xF4) second_max = 0x8F;
  } else {
    return 0;
  }
  if (text.size() - at < length) return 0;
  if (byte(at + 1) < second_min || byte(at + 1) > second_max) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (byte(at + i) < 0x80 || byte(at + i) > 0xBF) return 0;
  }
  return length;
}

// `value` as printf's `format` writes it ("\\x%02x", "0x%02x"): the escapes and byte values of messages.
std::string Hex(const char* format, unsigned value) {
  char out[16];
  std::snprintf(out, sizeof out, format, value);
  return out;
}

// How Quoted writes the ASCII character `c`.
std::string EscapedAscii(char c) {
  switch (c) {
    case '\\':
      return "\\\\";
    case '\'':
      return "\\'";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    default:
      if (c < 0x20 || c == 0x7F) return Hex("\\x%02x", static_cast<unsigned>(c));
      return std::string(1, c);
  }
}

}  // namespace

std::string KeyTextProblem(std::string_view text) {
  for (size_t at = 0; at < text.size();) {
    if (text[at] == '\0') return "contains a NUL byte at offset " + std::to_string(at);
    const size_t length = SequenceLength(text, at);
    if (length == 0) {
      return "is not valid UTF-8 (byte " + Hex("0x%02x", static_cast<uint8_t>(text[at])) + " at offset " +
             std::to_string(at) + ")";
    }
    at += length;
  }
  return {};
}

std::string Quoted(std::string_view text) {
  std::string out = "'";
  for (size_t at = 0; at < text.size();) {
    const size_t length = SequenceLength(text, at);
    if (length == 1) {
      out += EscapedAscii(text[at]);
    } else if (length == 0) {
      out += Hex("\\x%02x", static_cast<uint8_t>(text[at]));
    } else if (length == 2 && static_cast<uint8_t>(text[at]) == 0xC2 && static_cast<uint8_t>(text[at + 1]) < 0xA0) {
      out += Hex("\\u%04x", static_cast<uint8_t>(text[at + 1]));  // C1 controls, U+0080..U+009F: C2 80..9F
    } else {
      out.append(text.substr(at, length));
    }
    at += length == 0 ? 1 : length;
  }
  return out + "'";
}

Status CheckKeyText(std::string_view text, const std::string& what, Code code) {
  const std::string problem = KeyTextProblem(text);
  if (problem.empty()) return Status::Ok();
  return Status(code, what + " " + Quoted(text) + " " + problem);
}

}  // namespace ckpt

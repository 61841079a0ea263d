// Keys are text. Every key (of a tensor, an object, a common entry or a metadata entry) and every metadata value is
// valid UTF-8 without a NUL, wherever it enters: the C API, a MANIFEST, a safetensors header, a Hugging Face index,
// Python. Valid means RFC 3629: no overlong forms, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF. So a key
// prints in JSON exactly as it is (two keys never print alike), survives a C string, and an export writes it into
// a header that every reader accepts. Other control characters are allowed: JSON escapes them, and messages show
// them escaped (Quoted, common/status.h).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace ckpt {

// Why `text` cannot be a key or a metadata value ("is not valid UTF-8 (byte 0xc0 at offset 1)", "contains a NUL
// byte at offset 3"); empty when it can.
std::string KeyTextProblem(std::string_view text);

// Ok when `text` is valid; else a Status of `code` saying "<what> 'a\xffb' is not valid UTF-8 (byte 0xff at
// offset 1)": `what` names the text ("tensor key", "metadata value").
Status CheckKeyText(std::string_view text, const std::string& what, Code code);

}  // namespace ckpt

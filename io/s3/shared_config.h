// The AWS shared files, ~/.aws/credentials and ~/.aws/config: INI sections of "name = value" lines, where a name with
// an empty value followed by indented lines opens a nested block ("s3 =" then "  addressing_style = path", read
// back as "s3.addressing_style").
#pragma once

#include <map>
#include <string>

#include "common/status.h"

namespace ckpt::s3 {

// One profile's values, each with the "file:line" it came from for messages.
struct ProfileValue {
  std::string value;
  std::string origin;
};
using Profile = std::map<std::string, ProfileValue>;

// Section title -> values; a title is "default", "profile NAME" or "NAME" as the file writes it (trimmed).
using SharedFile = std::map<std::string, Profile>;

// An empty SharedFile when `path` does not exist; kInvalidArgument naming path:line for a line that is neither a
// section, a comment nor "name = value"; kIo when the file exists but cannot be read.
Result<SharedFile> ReadSharedFile(const std::string& path);
// Parses `text` as the contents of `path` (for messages).
Result<SharedFile> ParseSharedFile(const std::string& path, const std::string& text);

}  // namespace ckpt::s3

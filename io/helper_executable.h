// The helper programs libckpt starts (ckpt-io-worker, ckpt-agent): found through an environment variable, beside
// the loaded libckpt, or where `cmake --install` puts them.
#pragma once

#include <string>

#include "common/status.h"

namespace ckpt::io {

// The path of executable `name`: the one `env_var` names if set (kNotFound if that is no executable file), else
// the first executable file among <dir of libckpt>/name, <dir of libckpt>/ckpt/name and the installed helper
// directory. kNotFound lists the places tried and ends with `hint` (what the user can do instead).
Result<std::string> FindHelperExecutable(const char* name, const char* env_var, const std::string& hint);

bool IsExecutableFile(const std::string& path);

}  // namespace ckpt::io

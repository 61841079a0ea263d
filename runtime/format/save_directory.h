// Where a save writes before its commit: "<path>.tmp-<save id>", a directory that rank 0 claims
// (io/claimed_directory.h) before any rank writes into it and holds until the save is committed or abandoned. A
// temporary directory nobody claims was left by a save whose rank 0 died; the next save to the same path, and the
// manager, remove such leftovers and leave live ones alone.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "common/unique_fd.h"

namespace ckpt::runtime {

inline constexpr std::string_view kTemporaryInfix = ".tmp-";

// A save's identity: 16 hex digits, fresh for every save (and every persist of a memory checkpoint).
std::string NewSaveId();

std::string TemporaryDirectory(const std::string& path, const std::string& save_id);

// Rank 0, before a save's first collective step: refuses a `path` that already exists (kAlreadyExists), removes
// the unclaimed temporaries of earlier saves to `path`, then creates and claims this save's temporary directory.
// The claim is invalid where the file system cannot lock directories.
Result<UniqueFd> ClaimSaveDirectory(const std::string& path, const std::string& save_id);

}  // namespace ckpt::runtime

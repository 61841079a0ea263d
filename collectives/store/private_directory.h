// Directories that only this user can enter: where the memory tier's agent listens and keeps a job's memory. A
// socket or a directory in a place another user can write may be theirs, so every use checks the directory first:
// opened without following a link, owned by this process's effective user, no permission for group or others.
#pragma once

#include <string>

#include "common/status.h"
#include "common/unique_fd.h"

namespace ckpt::coll {

// This user's private directory for what only the user's own processes may reach (job secrets, agent sockets):
// "$XDG_RUNTIME_DIR/ckpt" when XDG_RUNTIME_DIR is the user's own with mode 0700, else "/tmp/ckpt-<euid>". It may
// not exist yet: MakePrivateDirectory creates it.
std::string UserPrivateDirectory();

// Opens the directory `path` (`what` names it in messages) and checks that it is private to this user. kNotFound
// when it does not exist; kInvalidArgument, naming its owner or its mode, when it is a link, not a directory,
// another user's, or open to group or others.
Result<UniqueFd> OpenPrivateDirectory(const std::string& path, const std::string& what);

// Creates `path` with mode 0700 when it is missing (its parent must exist), then OpenPrivateDirectory. A directory
// that exists is checked, never repaired: one another user made first is theirs.
Result<UniqueFd> MakePrivateDirectory(const std::string& path, const std::string& what);

// OpenPrivateDirectory for `path`, which must be an entry directly beneath the directory `root` ("<root>/<name>",
// spelled either way with or without trailing slashes), opened relative to it. kInvalidArgument when it lies
// elsewhere.
Result<UniqueFd> OpenPrivateDirectoryBeneath(const std::string& root, const std::string& path, const std::string& what);

}  // namespace ckpt::coll

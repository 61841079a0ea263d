// A directory claimed by a live process: an flock(2) held on the directory for as long as the claim's descriptor
// is open. The kernel drops the lock when its process dies, however it dies, so a save's temporary directory that
// nobody has claimed was left by a dead save and may be removed, while one that is claimed is still being written.
#pragma once

#include <string>

#include "common/status.h"
#include "io/claim.h"

namespace ckpt::io {

// Creates `path` (and its parents) if missing and claims it. No claim (an invalid one) if the file system cannot lock
// a directory (NFS, for one): the directory exists but is unclaimed, and IsClaimed then answers true for everyone,
// so nothing is removed that cannot be known dead. kAlreadyExists if another process holds the claim.
Result<Claim> ClaimDirectory(const std::string& path);

// Whether some process holds a claim on `path`, or whether that cannot be known; false for a directory whose claim
// was released or never taken, and for a path that is not a directory.
bool IsClaimed(const std::string& path);

}  // namespace ckpt::io

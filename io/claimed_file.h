// A file claimed by one live process at a time, naming its holder: an flock(2) held on the file for as long as the
// claim's descriptor is open, which the kernel drops when the process dies, however it dies (the mechanism of
// claimed_directory.h, on a file so that it can say who holds it). The holder writes a one-line note about itself
// into the file, which a process refused the claim reads back to name it.
//
// The file stays when the claim is released: removing it would let a process that opened it just before lock the
// removed file while another locks a new one, and both would hold "the" claim.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "io/claim.h"

namespace ckpt::io {

// Creates `path` if missing, claims it, and replaces its contents with `note`. kAlreadyExists if another open
// description of the file holds the claim (another process, or another claim in this one), with the holder's note
// in the message; kInvalidArgument if `path` is not a regular file. No claim (an invalid one) if the file system cannot
// lock files (some NFS mounts) or is read-only: the caller decides whether to go on unclaimed.
Result<Claim> ClaimFile(const std::string& path, std::string_view note);

}  // namespace ckpt::io

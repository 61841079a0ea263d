// Opening the files a checkpoint names, which may be hostile: only regular files beneath the checkpoint directory,
// reached without following any symbolic link, and opened without blocking (open() on a FIFO would wait for a writer
// forever). The checkpoint directory itself is the caller's path and may be reached through links.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace ckpt::io {

// Opens `name` (relative, "data/0-0.bin") beneath the directory `root` with `flags` (O_RDONLY, maybe O_DIRECT;
// O_CLOEXEC, O_NOFOLLOW and O_NONBLOCK are added) and returns the descriptor. Uses openat2 with RESOLVE_BENEATH and
// RESOLVE_NO_SYMLINKS where the kernel has it (Linux 5.6), else walks the components with O_NOFOLLOW. Errors:
// kNotFound if something is missing; kCorrupt naming the path if a component is a symbolic link, the name leaves
// `root`, or the file is not a regular file (a FIFO, a device, a directory); kInvalidArgument for an O_DIRECT that
// the file system refuses (EINVAL), so the caller can retry without it; kIo otherwise.
Result<int> OpenBeneath(const std::string& root, const std::string& name, int flags);
// The same through the fallback alone (component by component), which kernels before 5.6 get; for tests.
Result<int> OpenBeneathByWalking(const std::string& root, const std::string& name, int flags);

// The components of a relative name split at '/' ("data/0-0.bin" -> "data", "0-0.bin"), empty ones included.
std::vector<std::string> PathComponents(const std::string& name);
// The first component that is not a plain name (empty, "." or ".."), or null if every one is.
const std::string* FirstNonPlainComponent(const std::vector<std::string>& components);

}  // namespace ckpt::io

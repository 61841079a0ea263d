// The durable-publish recipe, written once for everything that must appear at its path whole or not at all (a
// save's commit, an agent's persist, an export): the content is prepared under a temporary name beside its target
// and its data synced, its directory entries are synced, it is renamed to the target without replacing anything
// there, and the target's parent directory is synced, so that the new entry survives a power loss. Until the rename
// nothing is at the target; once a publish returns Ok the target is there, whole and durable.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace ckpt::io {

// Publishes the directory `staged` as `target`. The files in it must be synced already (File::Sync,
// WriteFileDurably); this syncs `staged`/`s` for each `s` of `subdirectories`, then `staged`, renames `staged` to
// `target` (kAlreadyExists, touching neither, if anything is at `target`), and syncs the parent of `target`. A
// failure before the rename leaves nothing at `target` and `staged` for the caller to remove; a failure of the last
// sync leaves `target` in place, whole, but perhaps not durable (its message says so).
Status PublishDirectory(const std::string& staged, const std::vector<std::string>& subdirectories,
                        const std::string& target);

// Publishes the file `staged`, synced already, as `target` on the same file system: renames it without replacing
// anything (kAlreadyExists if anything is at `target`, which is left untouched) and syncs the parent of `target`.
// If the rename fails, `staged` is removed; a failure of the sync is as for PublishDirectory.
Status PublishFile(const std::string& staged, const std::string& target);

// MakeDirectories (mkdir -p) whose new directories survive a power loss: the parent of each directory it creates is
// synced. A file published into a new directory is durable only once the directory is.
Status MakeDirectoriesDurably(const std::string& path);

}  // namespace ckpt::io

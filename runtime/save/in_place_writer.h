// CKPT_SAVE_IN_PLACE (StagingSettings::in_place): this rank writes its data files itself, from the state's buffers
// where they allow it and through the staging arena where they do not (device memory, a misaligned or short run),
// on the I/O tuning's caller_memory_threads (at most one per file), each with a file job executor of its own in this
// process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "io/staging_arena.h"
#include "runtime/save/save_stager.h"
#include "runtime/save/save_ticket.h"
#include "runtime/save/save_units.h"

namespace ckpt::runtime::staging {

// files[f]: the windows of data file f, written to paths[f] and cut to sizes[f]; a file without windows is not
// written. Records the units' checksums and the bytes staged and written in `ticket`; returns once every file is
// written and durable, leaving nothing pending.
Status WriteInPlace(std::vector<std::vector<Window>>& files, const std::vector<std::string>& paths,
                    const std::vector<uint64_t>& sizes, const StagingSettings& settings, io::StagingArena& arena,
                    SaveTicket& ticket);

}  // namespace ckpt::runtime::staging

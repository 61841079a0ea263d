// Reading stored blocks from an open data file as they are laid out, raw or compressed (StoredBytes::codec), into
// memory, uncompressed. The caller verifies the blocks' checksums.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "io/file_io.h"
#include "runtime/format/manifest.h"

namespace ckpt::runtime {

// Reads blocks [first_block, first_block + count) of `stored` from `file` into `out` (their bytes uncompressed,
// which end where the blocks or the stored bytes do). `what` names the bytes in errors.
Status ReadStoredBlocks(const io::File& file, const StoredBytes& stored, uint64_t first_block, uint64_t count,
                        char* out, const std::string& what);

}  // namespace ckpt::runtime

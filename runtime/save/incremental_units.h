// The units of an incremental save (CKPT_SAVE_INCREMENTAL). Every tensor box this rank writes is hashed, SHA-256 per
// block (io/block_digests.h), and its digests go into the manifest for later saves to compare with. Against a base,
// the box's rows (slabs along its first dimension longer than 1, each a run of its row-major bytes) that lie only in
// blocks whose digests equal the base's for the same box are not written: they become chunks that refer to the
// base's file bytes, where those rows start on a 4 KiB boundary of the file, as reads with direct I/O need. The rest
// of the box is written as slabs of its own. Each chunk carries the XXH3 block checksums of its own bytes, hashed
// from memory, so that loads verify the base's bytes as they verify any.
#pragma once

#include <vector>

#include "common/status.h"
#include "runtime/core/state.h"
#include "runtime/save/save_plan.h"
#include "runtime/save/save_stager.h"
#include "runtime/save/save_ticket.h"
#include "runtime/save/save_units.h"

namespace ckpt::runtime::staging {

// Adds the units of tensor item `item`, which this rank writes, with their report entries, and the references and
// digests it reports; settings.record_digests is set.
Status AddIncrementalUnits(const State& state, const WriteItem& item, const StagingSettings& settings,
                           SaveTicket& ticket, std::vector<Unit>& units);

}  // namespace ckpt::runtime::staging

// Rank 0's commit of a save: the manifest from the agreed descriptors and every rank's write report, written into
// the temporary directory, made durable, and renamed into place.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/save/save_ticket.h"
#include "runtime/save/write_report.h"

namespace ckpt::runtime {

// Decodes every rank's report, checks the replicas they carry (runtime/save/replica_check.h), builds the manifest,
// and commits it. On failure the temporary directory remains
// for the caller to remove.
Status CommitSave(const CommitInputs& inputs, const std::vector<std::string>& encoded_reports);

}  // namespace ckpt::runtime

// The commit of a memory-tier save whose ranks span several nodes. Every node keeps its own ranks' data files in its
// own agent's memory, so every node's copy needs the manifest that rank 0 builds:
//   1. rank 0 commits its node's copy as any save commits, and hands the manifest to every rank with the first
//      outcome (CommitChannel, under the save's id);
//   2. each other node's leader writes it into its node's temporary directory and renames that into place, and every
//      rank reports again (under NodesRoundId);
//   3. rank 0 decides from those reports, announces its node's copy to its agent, and posts the final outcome; the
//      other leaders announce theirs once they read it, and a failed save removes every node's renamed copy.
// No agent hears of the checkpoint before every node holds it whole, so none keeps, replicates or persists a
// checkpoint that another node lacks.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/save/commit_channel.h"
#include "runtime/save/save_ticket.h"

namespace ckpt::runtime {

// The id under which the second round's reports and the final outcome travel.
std::string NodesRoundId(const std::string& save_id);

// The names in the data directory of the temporary directory `tmp_dir`: this node's own files, listed before any
// replica of another node's can arrive. None when no rank of the node wrote any.
Result<std::vector<std::string>> OwnDataFiles(const std::string& tmp_dir);

// Rank 0, after CommitSave (`committed`, its outcome): steps 1 to 3 up to the final outcome, which it returns for
// the caller to post under NodesRoundId where the other ranks await it (`*second_awaited`: the first outcome, a
// success, reached them). On failure after the rename, rank 0's copy is removed again.
Status CommitAcrossNodes(CommitChannel& channel, const CommitInputs& commit, Status committed,
                         const std::vector<std::string>& own_files, bool* second_awaited);

// Every other rank, after posting its write report: steps 1 to 3 as seen from its node.
Status FollowCommitAcrossNodes(CommitChannel& channel, const CommitInputs& commit, int rank);

}  // namespace ckpt::runtime

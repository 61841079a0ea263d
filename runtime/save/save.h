// The collective save: agree on the plan (reusing the previous one while the structure is unchanged), stage this rank's
// share, and hand the rest to the background thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "runtime/core/context.h"
#include "runtime/core/progress.h"
#include "runtime/core/state.h"
#include "runtime/memtier/memory_attachment.h"
#include "runtime/memtier/memory_tier.h"
#include "runtime/save/rank_saves.h"
#include "runtime/save/save_plan.h"
#include "runtime/save/save_ticket.h"

namespace ckpt::runtime {

struct SaveSettings {
  std::vector<std::pair<std::string, std::string>> metadata;  // rank 0's are stored
  SavePlanOptions plan;
  uint64_t block_size = 1ull << 20;       // checksum granularity
  uint64_t inline_common_max = 64 << 10;  // larger common entries go to a data file
  std::function<void()> after_commit;     // rank 0, after the commit (see CommitInputs)
  std::function<Status(const std::string& dir)> before_commit;  // rank 0, see CommitInputs
  // kMemory: the checkpoint goes into the node's agent's memory (runtime/memtier/memory_tier.h), standing for `path`;
  // kBoth: there, and the agent then writes it to `path` too, without the trainers.
  Tier tier = Tier::kStorage;
  // CKPT_SAVE_IN_PLACE: this rank writes its bytes from the state's buffers itself, and StartSave returns once they
  // are durable (runtime/save/save_stager.h).
  bool in_place = false;
  // CKPT_SAVE_COPY_ON_WRITE: StartSave returns once this rank's host buffers are write-protected, and they are
  // staged in the background, each page the trainer writes first copied before (runtime/save/cow_snapshot.h). Not
  // with in_place, nor with a memory tier.
  bool copy_on_write = false;
  // CKPT_SAVE_INCREMENTAL: the block digests of every tensor box written go into the manifest, and with `base` (a
  // committed checkpoint beside `path`; empty: none) the rows whose blocks equal the base's are referred to there
  // instead of written (runtime/save/incremental_units.h). Storage on a file system only.
  // Rank 0's base is every rank's: the save's verdict carries it to the others.
  bool incremental = false;
  std::string base;
  // CKPT_SAVE_COMPRESS: every block written is compressed (io/block_codec.h); tensors whose shards ask for it
  // (TensorShard::compress) are in any save. Storage on a file system only, staged (not in_place).
  bool compress = false;
  // Rank 0: held until the save has committed or failed (a manager's pin on its base step, which retention keeps
  // meanwhile). Null: none.
  std::shared_ptr<void> base_pin;
  // A manager's step (memory tiers): the agent publishes it as the root's latest once it is on storage.
  std::string manager_root;
  uint64_t step = 0;
  // This rank's progress: PLANNING and STAGING from the calling thread (WRITING's first report too), the rest from
  // the rank's save thread (rank_saves.h), ending with COMMITTED or FAILED before the ticket finishes. Empty: none.
  ProgressSink progress;
};

// Collective. Returns once this rank's bytes are staged; the ticket reports the outcome, the same on every rank.
// Errors found before staging (a bad global state, an existing target, a dead peer) are returned directly, on
// every rank alike.
// `saves` and `attachment` are this rank's (the C API's context object owns them beside `ctx`).
Result<std::shared_ptr<SaveTicket>> StartSave(Context& ctx, RankSaves& saves, MemoryAttachment& attachment,
                                              const State& state, const std::string& path,
                                              const SaveSettings& settings);

}  // namespace ckpt::runtime

// The load's first collective step: every rank says what it opened and asks for, rank 0 decides (agreement.h's
// DecideAtRoot), so that nothing every rank asks travels to every other rank: which checkpoint each rank read (the
// same everywhere, or the load fails), which manifest entries no rank asked for (judged by rank 0's strictness),
// whether every rank's destinations can be exchanged in device memory, the key of this job's plan (every rank's
// request digested), with whether every rank still holds that plan, and how the tensors are read
// (runtime/load/read_strategy.h: from the ranks' nodes, storage, CKPT_LOAD_READS and what own reads would read).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collectives/control/control_plane.h"
#include "common/status.h"
#include "runtime/format/manifest.h"
#include "runtime/load/read_strategy.h"

namespace ckpt::runtime {

struct LoadAsk {
  std::string checkpoint_id;
  std::string requested;         // one flag byte per manifest tensor, then per object (0 or 1)
  int32_t exchange_device = -1;  // the CUDA device of every destination, where it can be exchanged there
  uint64_t request_digest = 0;   // of this rank's encoded request
  uint64_t cached_plan = 0;      // the key of the plan this rank holds; 0: none
  std::string node_name;
  LoadReadsSetting reads_setting = LoadReadsSetting::kAuto;  // this rank's CKPT_LOAD_READS
  bool exchanges = false;                                    // this rank has a transport
  bool files_everywhere = true;                              // this rank may read every data file
  bool storage_local = false;                                // StorageIsLocal of the checkpoint here
  // OwnReadBytes of this rank's pieces, where AUTO may choose own reads here; else 0.
  uint64_t own_bytes = 0;
};

struct LoadVerdict {
  bool on_devices = false;  // every rank's exchange_device is a device
  uint64_t plan_key = 0;    // never 0
  bool reuse_plan = false;  // every rank holds the plan of plan_key
  LoadReads reads = LoadReads::kOnce;
  std::string reads_note;     // why a forced CKPT_LOAD_READS was not followed; empty where it was
  uint64_t needed_bytes = 0;  // the stored bytes of the tensors any rank asked for
};

// Collective. `local`: this rank's failure so far (then `mine` is not read). `judge_unexpected` runs on rank 0
// with the keys no rank asked for and gives the load's verdict on them (an error fails every rank). Ranks whose
// CKPT_LOAD_READS differ fail with kMismatch.
Result<LoadVerdict> AgreeOnLoad(coll::ControlPlane& control, const Status& local, const LoadAsk& mine,
                                const Manifest* manifest,
                                const std::function<Status(const std::vector<std::string>&)>& judge_unexpected);

}  // namespace ckpt::runtime

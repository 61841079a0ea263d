// The load's first collective step: every rank says what it opened and asks for, rank 0 decides (agreement.h's
// DecideAtRoot), so that nothing every rank asks travels to every other rank: which checkpoint each rank read (the
// same everywhere, or the load fails), which manifest entries no rank asked for (judged by rank 0's strictness),
// whether every rank's destinations can be exchanged in device memory, and the key of this job's plan (every rank's
// request digested), with whether every rank still holds that plan.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collectives/control/control_plane.h"
#include "common/status.h"
#include "runtime/format/manifest.h"

namespace ckpt::runtime {

struct LoadAsk {
  std::string checkpoint_id;
  std::string requested;         // one flag byte per manifest tensor, then per object (0 or 1)
  int32_t exchange_device = -1;  // the CUDA device of every destination, where it can be exchanged there
  uint64_t request_digest = 0;   // of this rank's encoded request
  uint64_t cached_plan = 0;      // the key of the plan this rank holds; 0: none
};

struct LoadVerdict {
  bool on_devices = false;  // every rank's exchange_device is a device
  uint64_t plan_key = 0;    // never 0
  bool reuse_plan = false;  // every rank holds the plan of plan_key
};

// Collective. `local`: this rank's failure so far (then `mine` is not read). `judge_unexpected` runs on rank 0
// with the keys no rank asked for and gives the load's verdict on them (an error fails every rank).
Result<LoadVerdict> AgreeOnLoad(coll::ControlPlane& control, const Status& local, const LoadAsk& mine,
                                const Manifest* manifest,
                                const std::function<Status(const std::vector<std::string>&)>& judge_unexpected);

}  // namespace ckpt::runtime

// bench/scale's load: the read-once load's partitioned planning (runtime/load/load_partition.h) for every rank of a
// job, each rank's share timed on its own, and the busiest rank replayed alone in a child process for its time and
// memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/scale_common.h"
#include "bench/scale_model.h"
#include "runtime/format/manifest.h"

namespace ckpt::bench {

struct LoadFigures {
  double busiest_plan_s = 0;  // the largest sum of one rank's planning steps
  int busiest = 0;
  uint64_t requests_bytes = 0;  // every rank's encoded request
  uint32_t round_count = 0;     // the rounds every rank runs
  // By rank, the ranks it sends tensor data to or receives it from: those its data transport connects to.
  std::vector<uint32_t> exchange_partners;
};

// Plans the load of `manifest` by `target` in `workers` processes (bench/scale_spool.h: RunStep), counting its
// control bytes into `bytes`, and writes what the busiest rank receives to `inputs_path` for ReplayLoad.
LoadFigures SimulateLoad(const ParallelLayout& target, const runtime::Manifest& manifest, int workers,
                         ControlBytes* bytes, const std::string& inputs_path);

// The child: rank `rank`'s load alone, kReplayRuns times: it decodes the manifest (as every rank does), plans what it
// owns from the requests it receives, and merges and cuts its part. Prints the best "decode_s plan_s", then
// "peak_kib tensors_decoded tensors manifest_bytes_read".
int ReplayLoad(const ParallelLayout& target, int rank, uint32_t round_count, const std::string& manifest_path,
               const std::string& inputs_path);

}  // namespace ckpt::bench

// The MANIFEST of a step that holds nothing, as retention reads it (for the steps it refers to); with `refers_to`,
// one that lists a data file of each of those steps, as an incremental save's does.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/format/manifest.h"
#include "runtime/manager/manager.h"

namespace ckpt::runtime {

inline Manifest StepManifest(const std::vector<uint64_t>& refers_to = {}) {
  Manifest m;
  m.world_size = 1;
  for (const uint64_t step : refers_to) m.files.push_back(DataFileRecord{"data/0-0.bin", 0, StepDirectoryName(step)});
  m.format_major = FormatMajorFor(m);
  return m;
}

}  // namespace ckpt::runtime

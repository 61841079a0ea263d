// The cores this process may run on: its CPU affinity, which a container's or a job scheduler's CPU set narrows,
// rather than the cores the machine has.
#pragma once

namespace ckpt {

// The CPUs in the calling thread's affinity mask (sched_getaffinity); where the kernel does not say, the online
// CPUs; at least 1.
unsigned UsableCores();

}  // namespace ckpt

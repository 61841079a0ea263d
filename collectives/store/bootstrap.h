// Who this process is in the job: from explicit values or from the launcher's environment.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace ckpt::coll {

// -1 / empty fields mean "not given: look in the environment".
struct ProcessIdentityRequest {
  int rank = -1;
  int world_size = -1;
  int local_rank = -1;
  std::string store_host;
  int store_port = -1;
  std::string node_name;
};

struct ProcessIdentity {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string store_host;  // default 127.0.0.1
  int store_port = 29501;
  std::string node_name;   // default: CKPT_NODE_NAME, else gethostname()
  std::string source;      // where rank and world came from: "options", "torchrun", "openmpi", "mpich", "slurm",
                           // "default"
  std::string job_secret;  // CKPT_JOB_SECRET; empty if unset
};

// Explicit values win; otherwise torchrun (RANK, WORLD_SIZE, LOCAL_RANK), then OpenMPI (OMPI_COMM_WORLD_RANK,
// OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK), then MPICH and Intel MPI (PMI_RANK, PMI_SIZE,
// MPI_LOCALRANKID), then SLURM (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID); none: rank 0 of 1.
// The store's host: MASTER_ADDR, else under SLURM the first node of the step, else 127.0.0.1. Its port:
// CKPT_STORE_PORT, else MASTER_PORT + 1 (MASTER_PORT itself is the launcher's own store's), else under SLURM
// 20000 + job id mod 10000, else 29501. The job's secret: CKPT_JOB_SECRET. kInvalidArgument for values that do
// not parse or are out of range (rank >= world, port outside 1..65535, a secret too short), naming the variable.
Result<ProcessIdentity> ResolveProcessIdentity(const ProcessIdentityRequest& request);

// The first host of a SLURM node list (SLURM_JOB_NODELIST's compressed form).
Result<std::string> FirstHostOfSlurmNodeList(const std::string& list);

}  // namespace ckpt::coll

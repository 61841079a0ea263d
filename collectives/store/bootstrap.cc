#include "collectives/store/bootstrap.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <optional>
#include <utility>

#include "collectives/store/store_auth.h"
#include "common/os_error.h"

namespace ckpt::coll {
namespace {

// The environment variables of one launcher; it counts as present when its rank or world variable is set.
struct LauncherVariables {
  const char* source;
  const char* rank;
  const char* world_size;
  const char* local_rank;
};

// In precedence order.
constexpr LauncherVariables kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    // MPICH's Hydra and Intel MPI (also srun --mpi=pmi2).
    {"mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

constexpr char kDefaultStoreHost[] = "127.0.0.1";
// torchrun's default MASTER_PORT; ckpt's store takes the port after it (see ResolveStorePort).
constexpr int kDefaultMasterPort = 29500;
constexpr int kMaxPort = 65535;
constexpr int kFirstUnprivilegedPort = 1024;
// Under SLURM without MASTER_PORT, the store's port is derived from the job id within this range, so that jobs
// sharing a node rarely meet.
constexpr int kSlurmPortBase = 20000;
constexpr int kSlurmPortSpan = 10000;

// A variable set to the empty string counts as unset: `VAR= command` is a common way to clear one.
std::optional<std::string> GetEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || value[0] == '\0') return std::nullopt;
  return std::string(value);
}

// Whole-string decimal parse: no sign other than '-', no whitespace, no trailing characters.
Result<int> ParseInt(const char* name, const std::string& text) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc::result_out_of_range) {
    return InvalidArgument(std::string(name) + "='" + text + "' is out of range");
  }
  if (ec != std::errc() || ptr != end) {
    return InvalidArgument(std::string(name) + "='" + text + "' is not an integer");
  }
  return value;
}

Result<std::optional<int>> ParseIntEnv(const char* name) {
  std::optional<std::string> text = GetEnv(name);
  if (!text) return std::optional<int>();
  ASSIGN_OR_RETURN(int value, ParseInt(name, *text));
  return std::optional<int>(value);
}

// Checks rank/world/local rank together; `rank_name` etc. say where each value came from, for the message.
Status ValidateRanks(int rank, const std::string& rank_name, int world_size, const std::string& world_name,
                     int local_rank, const std::string& local_name) {
  if (world_size < 1) {
    return InvalidArgument(world_name + "=" + std::to_string(world_size) + " must be at least 1");
  }
  if (rank < 0 || rank >= world_size) {
    return InvalidArgument(rank_name + "=" + std::to_string(rank) + " is out of range for " + world_name + "=" +
                           std::to_string(world_size));
  }
  if (local_rank < 0 || local_rank >= world_size) {
    return InvalidArgument(local_name + "=" + std::to_string(local_rank) + " is out of range for " + world_name + "=" +
                           std::to_string(world_size));
  }
  return Status::Ok();
}

// -1 means "from the environment"; anything more negative is a caller bug worth reporting.
Status ValidateRequest(const ProcessIdentityRequest& request) {
  const std::pair<const char*, int> fields[] = {{"rank", request.rank},
                                                {"world_size", request.world_size},
                                                {"local_rank", request.local_rank},
                                                {"store_port", request.store_port}};
  for (const auto& [name, value] : fields) {
    if (value < -1) {
      return InvalidArgument(std::string(name) + "=" + std::to_string(value) +
                             " is invalid (use -1 to take it from the environment)");
    }
  }
  return Status::Ok();
}

Status ResolveFromOptions(const ProcessIdentityRequest& request, ProcessIdentity* identity) {
  if (request.rank < 0) {
    return InvalidArgument("world_size=" + std::to_string(request.world_size) +
                           " was given without rank: give both or neither");
  }
  if (request.world_size < 0) {
    return InvalidArgument("rank=" + std::to_string(request.rank) +
                           " was given without world_size: give both or neither");
  }
  identity->rank = request.rank;
  identity->world_size = request.world_size;
  identity->local_rank = request.local_rank >= 0 ? request.local_rank : 0;
  identity->source = "options";
  return ValidateRanks(identity->rank, "rank", identity->world_size, "world_size", identity->local_rank, "local_rank");
}

// Fills rank, world and local rank from `launcher`; false if none of its variables is set.
Result<bool> ResolveFromLauncher(const LauncherVariables& launcher, const ProcessIdentityRequest& request,
                                 ProcessIdentity* identity) {
  ASSIGN_OR_RETURN(std::optional<int> rank, ParseIntEnv(launcher.rank));
  ASSIGN_OR_RETURN(std::optional<int> world_size, ParseIntEnv(launcher.world_size));
  if (!rank && !world_size) return false;
  if (!rank || !world_size) {
    const char* present = rank ? launcher.rank : launcher.world_size;
    const char* missing = rank ? launcher.world_size : launcher.rank;
    return InvalidArgument(std::string(present) + " is set but " + missing + " is not (" + launcher.source + ")");
  }
  ASSIGN_OR_RETURN(std::optional<int> local_rank, ParseIntEnv(launcher.local_rank));
  identity->rank = *rank;
  identity->world_size = *world_size;
  const bool explicit_local = request.local_rank >= 0;
  identity->local_rank = explicit_local ? request.local_rank : local_rank.value_or(0);
  identity->source = launcher.source;
  RETURN_IF_ERROR(ValidateRanks(identity->rank, launcher.rank, identity->world_size, launcher.world_size,
                                identity->local_rank, explicit_local ? "local_rank" : launcher.local_rank));
  return true;
}

Status ResolveRanks(const ProcessIdentityRequest& request, ProcessIdentity* identity) {
  if (request.rank >= 0 || request.world_size >= 0) return ResolveFromOptions(request, identity);
  for (const LauncherVariables& launcher : kLaunchers) {
    ASSIGN_OR_RETURN(bool found, ResolveFromLauncher(launcher, request, identity));
    if (found) return Status::Ok();
  }
  identity->rank = 0;
  identity->world_size = 1;
  identity->local_rank = request.local_rank >= 0 ? request.local_rank : 0;
  identity->source = "default";
  return ValidateRanks(0, "rank", 1, "world_size", identity->local_rank, "local_rank");
}

Result<std::optional<int>> ParsePortEnv(const char* name) {
  ASSIGN_OR_RETURN(std::optional<int> port, ParseIntEnv(name));
  if (port && (*port < 1 || *port > kMaxPort)) {
    return InvalidArgument(std::string(name) + "=" + std::to_string(*port) + " is outside 1..65535");
  }
  return port;
}

// ckpt's store never takes MASTER_PORT itself: torchrun-style launchers run their own store there. In order:
// the explicit port, CKPT_STORE_PORT, the port after MASTER_PORT, a port derived from SLURM's job id, the port
// after torchrun's default.
Status ResolveStorePort(const ProcessIdentityRequest& request, ProcessIdentity* identity) {
  if (request.store_port >= 0) {
    if (request.store_port < 1 || request.store_port > kMaxPort) {
      return InvalidArgument("store_port=" + std::to_string(request.store_port) + " is outside 1..65535");
    }
    identity->store_port = request.store_port;
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(std::optional<int> store_port, ParsePortEnv("CKPT_STORE_PORT"));
  if (store_port) {
    identity->store_port = *store_port;
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(std::optional<int> master_port, ParsePortEnv("MASTER_PORT"));
  if (!master_port && identity->source == "slurm") {
    ASSIGN_OR_RETURN(std::optional<int> job_id, ParseIntEnv("SLURM_JOB_ID"));
    if (job_id && *job_id >= 0) {
      identity->store_port = kSlurmPortBase + *job_id % kSlurmPortSpan;
      return Status::Ok();
    }
  }
  const int after = master_port.value_or(kDefaultMasterPort) + 1;
  identity->store_port = after > kMaxPort ? kFirstUnprivilegedPort : after;
  return Status::Ok();
}

Status ResolveStoreAddress(const ProcessIdentityRequest& request, ProcessIdentity* identity) {
  if (!request.store_host.empty()) {
    identity->store_host = request.store_host;
  } else if (std::optional<std::string> master = GetEnv("MASTER_ADDR")) {
    identity->store_host = *master;
  } else if (identity->source == "slurm" && identity->world_size > 1) {
    // Task 0 runs on the first node of the step.
    std::optional<std::string> nodes = GetEnv("SLURM_STEP_NODELIST");
    if (!nodes) nodes = GetEnv("SLURM_JOB_NODELIST");
    if (!nodes) nodes = GetEnv("SLURM_NODELIST");
    if (nodes) {
      ASSIGN_OR_RETURN(identity->store_host, FirstHostOfSlurmNodeList(*nodes));
    } else {
      identity->store_host = kDefaultStoreHost;
    }
  } else {
    identity->store_host = kDefaultStoreHost;
  }
  return ResolveStorePort(request, identity);
}

Status ResolveJobSecret(ProcessIdentity* identity) {
  std::optional<std::string> secret = GetEnv("CKPT_JOB_SECRET");
  if (!secret) return Status::Ok();
  RETURN_IF_ERROR(store_auth::ValidateSecret(*secret, "CKPT_JOB_SECRET"));
  identity->job_secret = std::move(*secret);
  return Status::Ok();
}

Status ResolveNodeName(const ProcessIdentityRequest& request, ProcessIdentity* identity) {
  if (!request.node_name.empty()) {
    identity->node_name = request.node_name;
    return Status::Ok();
  }
  if (std::optional<std::string> name = GetEnv("CKPT_NODE_NAME")) {
    identity->node_name = *name;
    return Status::Ok();
  }
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof host - 1) != 0) {
    return OsError("gethostname failed", errno);
  }
  identity->node_name = host;
  return Status::Ok();
}

}  // namespace

Result<ProcessIdentity> ResolveProcessIdentity(const ProcessIdentityRequest& request) {
  RETURN_IF_ERROR(ValidateRequest(request));
  ProcessIdentity identity;
  RETURN_IF_ERROR(ResolveRanks(request, &identity));
  RETURN_IF_ERROR(ResolveStoreAddress(request, &identity));
  RETURN_IF_ERROR(ResolveNodeName(request, &identity));
  RETURN_IF_ERROR(ResolveJobSecret(&identity));
  return identity;
}

// "node[07-09,12],gpu-a3" -> "node07"; "n[1-2]-ib[3-4]" -> "n1-ib3"; "host" -> "host". Brackets hold comma-separated
// numbers or ranges; the first number of each bracket is taken with its zero padding as written.
Result<std::string> FirstHostOfSlurmNodeList(const std::string& list) {
  std::string host;
  size_t i = 0;
  while (i < list.size() && list[i] != ',') {
    if (list[i] != '[') {
      host += list[i++];
      continue;
    }
    const size_t close = list.find(']', i);
    if (close == std::string::npos) return InvalidArgument("SLURM node list '" + list + "' has an unclosed '['");
    const std::string ranges = list.substr(i + 1, close - i - 1);
    const size_t end = ranges.find_first_of(",-");
    const std::string first = ranges.substr(0, end);
    if (first.empty() || first.find_first_not_of("0123456789") != std::string::npos) {
      return InvalidArgument("SLURM node list '" + list + "' has a range that does not start with a number");
    }
    host += first;
    i = close + 1;
  }
  if (host.empty()) return InvalidArgument("SLURM node list '" + list + "' names no host");
  return host;
}

}  // namespace ckpt::coll

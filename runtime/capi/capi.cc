// The implementation of include/ckpt.h, with capi_options.cc (the init functions) and capi_reader.cc (the reader):
// converts C arguments into the C++ core's types, and the core's Status into status codes and error objects
// (capi_internal.h). No exception crosses this boundary.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "ckpt.h"
#include "common/key_text.h"
#include "runtime/capi/capi_internal.h"
#include "runtime/core/context.h"
#include "runtime/core/dtype.h"
#include "runtime/core/state.h"
#include "runtime/load/load.h"
#include "runtime/manager/manager_session.h"
#include "runtime/rank/rank.h"
#include "runtime/save/save.h"

using ckpt::Status;
using ckpt::capi::CopyOptions;
using ckpt::capi::FillInfo;
using ckpt::capi::Guard;
using ckpt::capi::NullArgument;
using ckpt::capi::ToShape;
namespace rt = ckpt::runtime;

struct ckpt_context {
  std::unique_ptr<rt::Rank> rank;
  rt::Context& impl() const { return *rank->context; }
};

struct ckpt_state {
  rt::State impl;
};

struct ckpt_request {
  std::shared_ptr<rt::SaveTicket> ticket;
};

struct ckpt_manager {
  std::unique_ptr<rt::ManagerSession> impl;
};

static_assert(ckpt::runtime::kMaxDims == CKPT_MAX_NDIM, "the core's limit on dimensions is the C API's");

namespace {

constexpr uint32_t kMaxReplicaNdim = 16;
constexpr uint32_t kKnownShardFlags =
    CKPT_SHARD_FLATTENED | CKPT_SHARD_ALLOW_SHAPE_MISMATCH | CKPT_SHARD_ALLOW_DTYPE_CAST | CKPT_SHARD_COMPRESS;

Status ConvertShard(const ckpt_tensor_shard& c, rt::TensorShard* out) {
  if (c.key == nullptr) return NullArgument("shard key");
  const std::string key = c.key;
  const std::string name = "tensor " + ckpt::Quoted(key);  // escaped: the key is checked later (State)
  if (c.ndim > CKPT_MAX_NDIM) {
    return ckpt::InvalidArgument(name + ": ndim " + std::to_string(c.ndim) + " exceeds 8");
  }
  if (c.ndim > 0 && (c.global_shape == nullptr || c.local_shape == nullptr || c.global_offset == nullptr)) {
    return ckpt::InvalidArgument(name + ": global_shape, local_shape and global_offset are required");
  }
  if (c.replica_ndim > kMaxReplicaNdim || (c.replica_ndim > 0 && c.replica_id == nullptr)) {
    return ckpt::InvalidArgument(name + ": replica_id must hold replica_ndim (at most 16) values");
  }
  if ((c.flags & ~kKnownShardFlags) != 0) {
    return ckpt::InvalidArgument(name + ": unknown flags " + std::to_string(c.flags));
  }
  if (c.memory_kind != CKPT_MEMORY_HOST && c.memory_kind != CKPT_MEMORY_CUDA) {
    return ckpt::InvalidArgument(name + ": unknown memory_kind " + std::to_string(c.memory_kind));
  }
  out->key = key;
  out->dtype = c.dtype;
  out->global_shape = ToShape(c.global_shape, c.ndim);
  out->box = rt::Box{ToShape(c.global_offset, c.ndim), ToShape(c.local_shape, c.ndim)};
  if (c.replica_ndim > 0) out->replica_id.assign(c.replica_id, c.replica_id + c.replica_ndim);
  out->flattened = (c.flags & CKPT_SHARD_FLATTENED) != 0;
  out->allow_shape_mismatch = (c.flags & CKPT_SHARD_ALLOW_SHAPE_MISMATCH) != 0;
  out->allow_dtype_cast = (c.flags & CKPT_SHARD_ALLOW_DTYPE_CAST) != 0;
  out->compress = (c.flags & CKPT_SHARD_COMPRESS) != 0;
  out->flat_start = c.flat_start;
  out->flat_end = c.flat_end;
  out->data = c.data;
  out->data_size = c.data_size;
  out->device = c.memory_kind == CKPT_MEMORY_CUDA ? c.device : -1;
  return Status::Ok();
}

Status ToStrictness(int32_t value, const char* name, rt::Strictness* out) {
  if (value < CKPT_STRICT_FAIL || value > CKPT_STRICT_IGNORE) {
    return ckpt::InvalidArgument(std::string(name) + " is " + std::to_string(value) + ", not a CKPT_STRICT_* value");
  }
  *out = static_cast<rt::Strictness>(value);
  return Status::Ok();
}

Status CheckGrid(const char* key, uint32_t grid_ndim, const uint64_t* grid_shape, const uint64_t* grid_index) {
  if (key == nullptr) return NullArgument("object key");
  const std::string name = "object " + ckpt::Quoted(key);  // escaped: the key is checked later (State)
  if (grid_ndim > CKPT_MAX_NDIM) return ckpt::InvalidArgument(name + ": grid_ndim exceeds 8");
  if (grid_ndim > 0 && (grid_shape == nullptr || grid_index == nullptr)) {
    return ckpt::InvalidArgument(name + ": grid_shape and grid_index are required");
  }
  return Status::Ok();
}

// The caller's progress callback, if any, as the core's sink.
rt::ProgressSink ToProgressSink(ckpt_progress_fn fn, void* user) {
  if (fn == nullptr) return {};
  return [fn, user](rt::Phase phase, uint64_t done, uint64_t total) {
    fn(user, static_cast<int32_t>(phase), done, total);
  };
}

static_assert(static_cast<int32_t>(rt::Tier::kStorage) == CKPT_TIER_STORAGE &&
              static_cast<int32_t>(rt::Tier::kMemory) == CKPT_TIER_MEMORY &&
              static_cast<int32_t>(rt::Tier::kBoth) == CKPT_TIER_BOTH);

// The save settings the options describe.
// What a manager's save stores with its step; `annotations` is null for ckpt_save, which stores none.
Status ToStepAnnotations(const ckpt_save_options& opts, rt::StepAnnotations* annotations) {
  const bool any = opts.metrics != nullptr || opts.has_best_value != 0;
  if (annotations == nullptr) {
    return any ? ckpt::InvalidArgument("metrics and best_value are stored by ckpt_manager_save only, with a step")
               : Status::Ok();
  }
  if (opts.has_best_value > 1) return ckpt::InvalidArgument("has_best_value must be 0 or 1");
  if (opts.has_best_value == 1) {
    if (!std::isfinite(opts.best_value)) {
      return ckpt::InvalidArgument("best_value " + std::to_string(opts.best_value) + " is not a finite number");
    }
    annotations->score = opts.best_value;
  }
  if (opts.metrics != nullptr) {
    annotations->metrics = opts.metrics;
    if (annotations->metrics.empty()) return ckpt::InvalidArgument("metrics is empty: pass NULL for none");
  }
  return Status::Ok();
}

Status ToSaveSettings(const ckpt_save_options* user_opts, rt::SaveSettings* settings,
                      rt::StepAnnotations* annotations = nullptr) {
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  RETURN_IF_ERROR(CopyOptions(user_opts, &opts, "ckpt_save_options"));
  RETURN_IF_ERROR(ToStepAnnotations(opts, annotations));
  if (opts.metadata_count > 0 && (opts.metadata_keys == nullptr || opts.metadata_values == nullptr)) {
    return ckpt::InvalidArgument("metadata_keys and metadata_values are required when metadata_count > 0");
  }
  for (uint32_t i = 0; i < opts.metadata_count; ++i) {
    if (opts.metadata_keys[i] == nullptr || opts.metadata_values[i] == nullptr) {
      return ckpt::InvalidArgument("metadata entry " + std::to_string(i) + " has a NULL key or value");
    }
    RETURN_IF_ERROR(ckpt::CheckKeyText(opts.metadata_keys[i], "metadata key", ckpt::Code::kInvalidArgument));
    RETURN_IF_ERROR(ckpt::CheckKeyText(opts.metadata_values[i], "value", ckpt::Code::kInvalidArgument)
                        .WithContext("metadata " + ckpt::Quoted(opts.metadata_keys[i])));
    settings->metadata.emplace_back(opts.metadata_keys[i], opts.metadata_values[i]);
  }
  settings->progress = ToProgressSink(opts.progress, opts.progress_user);
  if (opts.tier > CKPT_TIER_BOTH) {
    return ckpt::InvalidArgument("tier " + std::to_string(opts.tier) +
                                 " is none of CKPT_TIER_STORAGE, CKPT_TIER_MEMORY and CKPT_TIER_BOTH");
  }
  settings->tier = static_cast<rt::Tier>(opts.tier);
  constexpr uint64_t kKnownFlags = CKPT_SAVE_IN_PLACE | CKPT_SAVE_COPY_ON_WRITE | CKPT_SAVE_CHECK_REPLICAS |
                                   CKPT_SAVE_INCREMENTAL | CKPT_SAVE_COMPRESS;
  if ((opts.flags & ~kKnownFlags) != 0) {
    return ckpt::InvalidArgument("save flags " + std::to_string(opts.flags) +
                                 " hold bits other than CKPT_SAVE_IN_PLACE, CKPT_SAVE_COPY_ON_WRITE, "
                                 "CKPT_SAVE_CHECK_REPLICAS, CKPT_SAVE_INCREMENTAL and CKPT_SAVE_COMPRESS");
  }
  settings->in_place = (opts.flags & CKPT_SAVE_IN_PLACE) != 0;
  settings->copy_on_write = (opts.flags & CKPT_SAVE_COPY_ON_WRITE) != 0;
  settings->plan.replica_checks = (opts.flags & CKPT_SAVE_CHECK_REPLICAS) != 0;
  settings->incremental = (opts.flags & CKPT_SAVE_INCREMENTAL) != 0;
  settings->compress = (opts.flags & CKPT_SAVE_COMPRESS) != 0;
  if (opts.base != nullptr) {
    settings->base = opts.base;
    if (settings->base.empty()) return ckpt::InvalidArgument("base is empty: pass NULL for none");
  }
  return Status::Ok();
}

// The load options' key_map pairs, checked.
ckpt::Result<rt::KeyMap> ToKeyMap(const ckpt_load_options& opts) {
  if (opts.key_map_count > 0 && opts.key_map == nullptr) {
    return ckpt::InvalidArgument("key_map is required when key_map_count > 0");
  }
  std::vector<std::pair<std::string, std::string>> pairs;
  for (uint64_t i = 0; i < opts.key_map_count; ++i) {
    const char* key = opts.key_map[2 * i];
    const char* saved = opts.key_map[2 * i + 1];
    if (key == nullptr || saved == nullptr) {
      return ckpt::InvalidArgument("key_map pair " + std::to_string(i) + " has a NULL key");
    }
    RETURN_IF_ERROR(ckpt::CheckKeyText(key, "key_map key", ckpt::Code::kInvalidArgument));
    RETURN_IF_ERROR(ckpt::CheckKeyText(saved, "key_map key", ckpt::Code::kInvalidArgument));
    pairs.emplace_back(key, saved);
  }
  return rt::KeyMap::Make(pairs);
}

Status ToLoadSettings(const ckpt_load_options* user_opts, rt::LoadSettings* settings) {
  ckpt_load_options opts = CKPT_LOAD_OPTIONS_INIT;
  RETURN_IF_ERROR(CopyOptions(user_opts, &opts, "ckpt_load_options"));
  RETURN_IF_ERROR(ToStrictness(opts.missing_keys, "missing_keys", &settings->missing_keys));
  ASSIGN_OR_RETURN(settings->key_map, ToKeyMap(opts));
  settings->progress = ToProgressSink(opts.progress, opts.progress_user);
  return ToStrictness(opts.unexpected_keys, "unexpected_keys", &settings->unexpected_keys);
}

}  // namespace

extern "C" {

/* Version ------------------------------------------------------------------------------------------------------ */

uint32_t ckpt_version_number(void) { return CKPT_VERSION_NUMBER; }

const char* ckpt_version_string(void) { return CKPT_LIBRARY_VERSION; }

/* Status and errors -------------------------------------------------------------------------------------------- */

const char* ckpt_status_string(int32_t status) {
  switch (status) {
    case CKPT_OK:
      return "CKPT_OK: success";
    case CKPT_E_INVALID_ARGUMENT:
      return "CKPT_E_INVALID_ARGUMENT: invalid argument or state";
    case CKPT_E_NOT_FOUND:
      return "CKPT_E_NOT_FOUND: not found";
    case CKPT_E_ALREADY_EXISTS:
      return "CKPT_E_ALREADY_EXISTS: already exists";
    case CKPT_E_MISMATCH:
      return "CKPT_E_MISMATCH: ranks or checkpoint disagree";
    case CKPT_E_CORRUPT:
      return "CKPT_E_CORRUPT: corrupt or truncated data";
    case CKPT_E_VERSION:
      return "CKPT_E_VERSION: unsupported format version";
    case CKPT_E_IO:
      return "CKPT_E_IO: I/O error";
    case CKPT_E_NO_SPACE:
      return "CKPT_E_NO_SPACE: no space left on the file system";
    case CKPT_E_TIMEOUT:
      return "CKPT_E_TIMEOUT: timed out waiting for a peer";
    case CKPT_E_PEER_FAILED:
      return "CKPT_E_PEER_FAILED: another rank failed";
    case CKPT_E_UNSUPPORTED:
      return "CKPT_E_UNSUPPORTED: not supported";
    case CKPT_E_NO_MEMORY:
      return "CKPT_E_NO_MEMORY: out of memory";
    case CKPT_E_IN_PROGRESS:
      return "CKPT_E_IN_PROGRESS: still in progress";
    case CKPT_E_INTERNAL:
      return "CKPT_E_INTERNAL: internal error";
    default:
      return "unknown ckpt status";
  }
}

int32_t ckpt_error_create(ckpt_error_t** out) {
  if (out == nullptr) return CKPT_E_INVALID_ARGUMENT;
  *out = new (std::nothrow) ckpt_error();
  return *out ? CKPT_OK : CKPT_E_NO_MEMORY;
}

void ckpt_error_free(ckpt_error_t* err) { delete err; }

int32_t ckpt_error_status(const ckpt_error_t* err) { return err ? err->status : CKPT_E_INVALID_ARGUMENT; }

const char* ckpt_error_message(const ckpt_error_t* err) { return err ? err->message.c_str() : ""; }

/* Context ------------------------------------------------------------------------------------------------------ */

namespace {

// The job's functions, checked: every one must be set, since ckpt cannot tell in advance which it will need.
ckpt::Result<ckpt::coll::CollectiveTable> CollectiveTableFrom(const ckpt_collectives* user) {
  ckpt_collectives c = CKPT_COLLECTIVES_INIT;
  RETURN_IF_ERROR(CopyOptions(user, &c, "ckpt_collectives"));
  for (const auto& [set, name] : {std::pair<bool, const char*>{c.allgatherv != nullptr, "allgatherv"},
                                  {c.alltoallv != nullptr, "alltoallv"},
                                  {c.broadcast != nullptr, "broadcast"},
                                  {c.barrier != nullptr, "barrier"}}) {
    if (!set) return ckpt::InvalidArgument(std::string("ckpt_collectives.") + name + " is NULL: set every function");
  }
  void* user_data = c.user;
  ckpt::coll::CollectiveTable table;
  table.allgatherv = [fn = c.allgatherv, user_data](const void* send, uint64_t size, void* recv, const uint64_t* sizes,
                                                    const uint64_t* offsets) {
    return fn(user_data, send, size, recv, sizes, offsets);
  };
  table.alltoallv = [fn = c.alltoallv, user_data](const void* send, const uint64_t* send_sizes,
                                                  const uint64_t* send_offsets, void* recv, const uint64_t* recv_sizes,
                                                  const uint64_t* recv_offsets) {
    return fn(user_data, send, send_sizes, send_offsets, recv, recv_sizes, recv_offsets);
  };
  table.broadcast = [fn = c.broadcast, user_data](void* buffer, uint64_t size, int32_t root) {
    return fn(user_data, buffer, size, root);
  };
  table.barrier = [fn = c.barrier, user_data] { return fn(user_data); };
  return table;
}

}  // namespace

int32_t ckpt_context_create(const ckpt_context_options* user_opts, ckpt_context_t** out, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (out == nullptr) return NullArgument("out");
    *out = nullptr;
    ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
    RETURN_IF_ERROR(CopyOptions(user_opts, &opts, "ckpt_context_options"));
    rt::ContextConfig config;
    config.identity.rank = opts.rank;
    config.identity.world_size = opts.world_size;
    config.identity.local_rank = opts.local_rank;
    config.identity.store_host = opts.store_host ? opts.store_host : "";
    config.identity.store_port = opts.store_port;
    config.identity.node_name = opts.node_name ? opts.node_name : "";
    config.timeout = std::chrono::milliseconds(opts.timeout_ms);
    config.io_workers = opts.io_workers;
    config.arena_bytes = opts.arena_bytes;
    if (opts.transport < CKPT_TRANSPORT_DEFAULT || opts.transport > CKPT_TRANSPORT_NCCL) {
      return ckpt::InvalidArgument("transport " + std::to_string(opts.transport) + " is not a CKPT_TRANSPORT_* value");
    }
    config.transport = static_cast<rt::TransportKind>(opts.transport);
    if (opts.allgather) {
      ckpt_allgather_fn fn = opts.allgather;
      void* user = opts.allgather_user;
      config.allgather = [fn, user](const void* send, uint64_t size, void* recv) { return fn(user, send, size, recv); };
    }
    if (opts.collectives) {
      ASSIGN_OR_RETURN(config.collectives, CollectiveTableFrom(opts.collectives));
    }
    if (opts.log) {
      ckpt_log_fn fn = opts.log;
      void* user = opts.log_user;
      config.log = [fn, user](rt::LogLevel level, const std::string& message) {
        fn(user, static_cast<int32_t>(level), message.c_str());
      };
    }
    ASSIGN_OR_RETURN(std::unique_ptr<rt::Rank> rank, rt::Rank::Create(std::move(config)));
    *out = new ckpt_context{std::move(rank)};
    return Status::Ok();
  });
}

void ckpt_context_free(ckpt_context_t* ctx) { delete ctx; }

int32_t ckpt_context_rank(const ckpt_context_t* ctx) { return ctx ? ctx->impl().rank() : -1; }

int32_t ckpt_context_world_size(const ckpt_context_t* ctx) { return ctx ? ctx->impl().world_size() : -1; }

int32_t ckpt_context_local_rank(const ckpt_context_t* ctx) { return ctx ? ctx->impl().local_rank() : -1; }

int32_t ckpt_context_stats_get(const ckpt_context_t* ctx, ckpt_context_stats* stats, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (ctx == nullptr || stats == nullptr) return NullArgument("ctx or stats");
    const rt::ContextStats& s = ctx->impl().stats();
    ckpt_context_stats full = CKPT_CONTEXT_STATS_INIT;
    full.io_workers = static_cast<uint32_t>(ctx->impl().io_workers());
    full.arena_bytes = ctx->impl().arena().capacity();
    full.saves_committed = s.saves_committed;
    full.plans_computed = s.plans_computed;
    full.plans_reused = s.plans_reused;
    full.bytes_staged = s.bytes_staged;
    full.bytes_written = s.bytes_written;
    full.bytes_read = s.bytes_read;
    full.bytes_sent = s.bytes_sent;
    full.bytes_received = s.bytes_received;
    full.transport = static_cast<int32_t>(ctx->impl().transport_kind());
    full.exchange_ns = s.exchange_ns;
    const ckpt::coll::ControlPlaneCounters control = ctx->impl().control_counters();
    full.control_bytes_sent = control.sent;
    full.control_bytes_received = control.received;
    full.store_collectives = ctx->impl().store_collectives();
    full.last_load_reads = s.last_load_reads;
    full.last_load_read_amplification_milli = s.last_load_read_amplification_milli;
    return FillInfo(full, stats, "ckpt_context_stats");
  });
}

/* State -------------------------------------------------------------------------------------------------------- */

uint32_t ckpt_dtype_size(int32_t dtype) { return rt::DTypeSize(dtype); }

const char* ckpt_dtype_name(int32_t dtype) { return rt::DTypeName(dtype); }

int32_t ckpt_state_create(ckpt_state_t** out, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (out == nullptr) return NullArgument("out");
    *out = new ckpt_state();
    return Status::Ok();
  });
}

void ckpt_state_free(ckpt_state_t* state) { delete state; }

int32_t ckpt_state_add_tensor(ckpt_state_t* state, const ckpt_tensor_shard* user_shard, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (state == nullptr) return NullArgument("state");
    if (user_shard == nullptr) return NullArgument("shard");
    ckpt_tensor_shard c = CKPT_TENSOR_SHARD_INIT;
    RETURN_IF_ERROR(CopyOptions(user_shard, &c, "ckpt_tensor_shard"));
    rt::TensorShard shard;
    RETURN_IF_ERROR(ConvertShard(c, &shard));
    return state->impl.AddTensor(std::move(shard));
  });
}

int32_t ckpt_state_add_object(ckpt_state_t* state, const char* key, uint32_t grid_ndim, const uint64_t* grid_shape,
                              const uint64_t* grid_index, void* data, uint64_t size, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (state == nullptr) return NullArgument("state");
    RETURN_IF_ERROR(CheckGrid(key, grid_ndim, grid_shape, grid_index));
    rt::ObjectShard object;
    object.key = key;
    object.grid_shape = ToShape(grid_shape, grid_ndim);
    object.index = ToShape(grid_index, grid_ndim);
    object.data = data;
    object.size = size;
    return state->impl.AddObject(std::move(object));
  });
}

int32_t ckpt_state_add_common(ckpt_state_t* state, const char* key, const void* data, uint64_t size,
                              ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (state == nullptr) return NullArgument("state");
    if (key == nullptr) return NullArgument("common key");
    if (data == nullptr && size != 0) return NullArgument("common data");
    return state->impl.AddCommon(key, std::string(static_cast<const char*>(data), size));
  });
}

int32_t ckpt_state_common(const ckpt_state_t* state, const char* key, const void** data, uint64_t* size,
                          ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (state == nullptr || key == nullptr || data == nullptr || size == nullptr) {
      return NullArgument("state, key, data or size");
    }
    auto it = state->impl.common().find(key);
    if (it == state->impl.common().end()) return ckpt::NotFound(std::string("common entry '") + key + "' not found");
    *data = it->second.data();
    *size = it->second.size();
    return Status::Ok();
  });
}

int32_t ckpt_state_object(const ckpt_state_t* state, const char* key, const uint64_t* grid_index, const void** data,
                          uint64_t* size, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (state == nullptr || key == nullptr || data == nullptr || size == nullptr) {
      return NullArgument("state, key, data or size");
    }
    for (const rt::ObjectShard& o : state->impl.objects()) {
      if (o.key != key || (!o.index.empty() && grid_index == nullptr)) continue;
      if (!std::equal(o.index.begin(), o.index.end(), grid_index)) continue;
      *data = o.data ? o.data : o.loaded.data();
      *size = o.data ? o.size : o.loaded.size();
      return Status::Ok();
    }
    return ckpt::NotFound(std::string("object '") + key + "' is not registered in this state");
  });
}

/* Save --------------------------------------------------------------------------------------------------------- */

int32_t ckpt_save(ckpt_context_t* ctx, ckpt_state_t* state, const char* path, const ckpt_save_options* user_opts,
                  ckpt_request_t** request, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (ctx == nullptr || state == nullptr || path == nullptr || request == nullptr) {
      return NullArgument("ctx, state, path or request");
    }
    *request = nullptr;
    rt::SaveSettings settings;
    RETURN_IF_ERROR(ToSaveSettings(user_opts, &settings));
    ASSIGN_OR_RETURN(std::shared_ptr<rt::SaveTicket> ticket,
                     rt::StartSave(ctx->impl(), *ctx->rank->saves, ctx->rank->memory, state->impl, path, settings));
    *request = new ckpt_request{std::move(ticket)};
    return Status::Ok();
  });
}

int32_t ckpt_request_test(ckpt_request_t* request, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status { return request ? request->ticket->Test() : NullArgument("request"); });
}

int32_t ckpt_request_wait(ckpt_request_t* request, uint32_t timeout_ms, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    return request ? request->ticket->Wait(std::chrono::milliseconds(timeout_ms)) : NullArgument("request");
  });
}

int32_t ckpt_request_stats_get(const ckpt_request_t* request, ckpt_request_stats* stats, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (request == nullptr || stats == nullptr) return NullArgument("request or stats");
    const rt::SaveStats s = request->ticket->Stats();
    ckpt_request_stats full = CKPT_REQUEST_STATS_INIT;
    full.committed = s.committed ? 1 : 0;
    full.state_bytes = s.state_bytes;
    full.bytes_to_write = s.bytes_to_write;
    full.bytes_staged = s.bytes_staged;
    full.bytes_written = s.bytes_written;
    full.bytes_committed = s.bytes_committed;
    full.files_written = s.files_written;
    full.planning_ns = s.planning_ns;
    full.staging_ns = s.staging_ns;
    full.blocking_ns = s.blocking_ns;
    full.writing_ns = s.writing_ns;
    full.committing_ns = s.committing_ns;
    full.total_ns = s.total_ns;
    return FillInfo(full, stats, "ckpt_request_stats");
  });
}

void ckpt_request_free(ckpt_request_t* request) {
  if (request != nullptr) (void)request->ticket->Wait(std::chrono::milliseconds(0));
  delete request;
}

/* Load --------------------------------------------------------------------------------------------------------- */

int32_t ckpt_load(ckpt_context_t* ctx, ckpt_state_t* state, const char* path, const ckpt_load_options* user_opts,
                  ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (ctx == nullptr || state == nullptr || path == nullptr) return NullArgument("ctx, state or path");
    rt::LoadSettings settings;
    RETURN_IF_ERROR(ToLoadSettings(user_opts, &settings));
    return rt::Load(ctx->impl(), ctx->rank->load_plans, ctx->rank->memory, state->impl, path, settings);
  });
}

/* Manager ------------------------------------------------------------------------------------------------------ */

int32_t ckpt_manager_open(ckpt_context_t* ctx, const char* root, const ckpt_manager_options* user_opts,
                          ckpt_manager_t** out, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (ctx == nullptr || root == nullptr || out == nullptr) return NullArgument("ctx, root or out");
    *out = nullptr;
    ckpt_manager_options opts = CKPT_MANAGER_OPTIONS_INIT;
    RETURN_IF_ERROR(CopyOptions(user_opts, &opts, "ckpt_manager_options"));
    rt::RetentionPolicy policy;
    policy.keep_last = opts.keep_last;
    policy.keep_every = opts.keep_every;
    policy.keep_best = opts.keep_best;
    if (opts.best_mode != CKPT_BEST_MAX && opts.best_mode != CKPT_BEST_MIN) {
      return ckpt::InvalidArgument("best_mode " + std::to_string(opts.best_mode) +
                                   " is neither CKPT_BEST_MAX nor CKPT_BEST_MIN");
    }
    policy.best_mode = opts.best_mode == CKPT_BEST_MAX ? rt::BestMode::kMax : rt::BestMode::kMin;
    policy.keep_for_seconds = opts.keep_for_seconds;
    if (opts.memory_tier > 1) return ckpt::InvalidArgument("memory_tier must be 0 or 1");
    rt::MemoryPolicy memory;
    memory.enabled = opts.memory_tier == 1;
    memory.storage_every = opts.storage_every;
    ASSIGN_OR_RETURN(std::unique_ptr<rt::ManagerSession> impl,
                     rt::ManagerSession::Open(*ctx->rank, root, policy, memory));
    *out = new ckpt_manager{std::move(impl)};
    return Status::Ok();
  });
}

void ckpt_manager_free(ckpt_manager_t* manager) { delete manager; }

int32_t ckpt_manager_close(ckpt_manager_t* manager, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (manager == nullptr) return NullArgument("manager");
    manager->impl->Close();
    return Status::Ok();
  });
}

int32_t ckpt_manager_wait(ckpt_manager_t* manager, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (manager == nullptr) return NullArgument("manager");
    manager->impl->Wait();
    return Status::Ok();
  });
}

int32_t ckpt_manager_save(ckpt_manager_t* manager, ckpt_state_t* state, uint64_t step, const ckpt_save_options* opts,
                          ckpt_request_t** request, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (manager == nullptr || state == nullptr || request == nullptr) return NullArgument("manager, state or request");
    *request = nullptr;
    rt::SaveSettings settings;
    rt::StepAnnotations annotations;
    RETURN_IF_ERROR(ToSaveSettings(opts, &settings, &annotations));
    ASSIGN_OR_RETURN(std::shared_ptr<rt::SaveTicket> ticket,
                     manager->impl->Save(state->impl, step, settings, std::move(annotations)));
    *request = new ckpt_request{std::move(ticket)};
    return Status::Ok();
  });
}

int32_t ckpt_manager_latest(const ckpt_manager_t* manager, uint64_t* step, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (manager == nullptr || step == nullptr) return NullArgument("manager or step");
    ASSIGN_OR_RETURN(std::optional<uint64_t> latest, manager->impl->Latest());
    if (!latest) return ckpt::NotFound("no committed step yet");
    *step = *latest;
    return Status::Ok();
  });
}

int32_t ckpt_manager_load_latest(ckpt_manager_t* manager, ckpt_state_t* state, const ckpt_load_options* opts,
                                 uint64_t* step, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (manager == nullptr || state == nullptr || step == nullptr) return NullArgument("manager, state or step");
    rt::LoadSettings settings;
    RETURN_IF_ERROR(ToLoadSettings(opts, &settings));
    ASSIGN_OR_RETURN(*step, manager->impl->LoadLatest(state->impl, settings));
    return Status::Ok();
  });
}

int32_t ckpt_manager_resume_step(ckpt_manager_t* manager, uint64_t* step, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (manager == nullptr || step == nullptr) return NullArgument("manager or step");
    ASSIGN_OR_RETURN(*step, manager->impl->ResumeStep());
    return Status::Ok();
  });
}

int32_t ckpt_manager_steps(const ckpt_manager_t* manager, uint64_t* steps, uint64_t capacity, uint64_t* count,
                           ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (manager == nullptr || count == nullptr) return NullArgument("manager or count");
    if (steps == nullptr && capacity != 0) return NullArgument("steps");
    ASSIGN_OR_RETURN(std::vector<uint64_t> committed, manager->impl->CommittedSteps());
    *count = committed.size();
    std::copy_n(committed.begin(), std::min<uint64_t>(capacity, committed.size()), steps);
    return Status::Ok();
  });
}

int32_t ckpt_manager_step_path(const ckpt_manager_t* manager, uint64_t step, char* buffer, uint64_t buffer_size,
                               ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (manager == nullptr || buffer == nullptr) return NullArgument("manager or buffer");
    const std::string path = manager->impl->StepPath(step);
    if (path.size() + 1 > buffer_size) {
      return ckpt::InvalidArgument("the buffer holds " + std::to_string(buffer_size) + " bytes, the path needs " +
                                   std::to_string(path.size() + 1));
    }
    std::memcpy(buffer, path.c_str(), path.size() + 1);
    return Status::Ok();
  });
}

int32_t ckpt_manager_metrics(const ckpt_manager_t* manager, uint64_t step, char* buffer, uint64_t capacity,
                             uint64_t* length, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (manager == nullptr || length == nullptr) return NullArgument("manager or length");
    if (buffer == nullptr && capacity != 0) return NullArgument("buffer");
    ASSIGN_OR_RETURN(std::optional<std::string> metrics, manager->impl->Metrics(step));
    if (!metrics) return ckpt::NotFound("step " + std::to_string(step) + " was saved without metrics");
    *length = metrics->size();
    if (capacity > metrics->size()) std::memcpy(buffer, metrics->c_str(), metrics->size() + 1);
    return Status::Ok();
  });
}

}  // extern "C"

"""
    LibCkpt

The raw C API of libckpt, one Julia function per function of `include/ckpt.h`, with the same name, the same
arguments in the same order, and the C types spelled out in every `@ccall`. Nothing here checks statuses or
manages lifetimes: that is the job of the `Ckpt` module around it.

The library is opened on first use from `ENV["CKPT_LIB"]` (a path or a name the dynamic loader can find), else
from `"libckpt"`, so setting `CKPT_LIB` after `using Ckpt` but before the first call works, and the precompiled
module never bakes in a path. Each call looks its symbol up with dlsym: a hash lookup, negligible beside what
these functions do.

The *_init functions take the struct's size and write no more than that (the tests use them to check the ABI). The
zero-argument constructors below give the same defaults without a call, as the header's *_INIT macros do.
`tools/check_julia_layouts.py` checks every struct and constant here against the ABI table the C build generates.

`tools/check_julia_signatures.py` compares every `@ccall` below with the header: keep the form
`@ccall \$(ckptsym(:name))(arg::Type, ...)::ReturnType`, one per C function.
"""
module LibCkpt

const Libdl = Base.Libc.Libdl

# ---------------------------------------------------------------------------------------------------------------
# Loading the library
# ---------------------------------------------------------------------------------------------------------------

const LIBRARY_LOCK = ReentrantLock()
const LIBRARY_HANDLE = Ref{Ptr{Cvoid}}(C_NULL)

"""The library `ckptsym` opens: `ENV["CKPT_LIB"]`, else `"libckpt"`."""
library_path() = get(ENV, "CKPT_LIB", "libckpt")

function open_library()
    path = library_path()
    try
        return Libdl.dlopen(path)
    catch failure
        error("cannot load libckpt from \"$path\" (set CKPT_LIB to the path of libckpt.so): ",
              sprint(showerror, failure))
    end
end

# The handle is set once and never changes, so reading it needs no lock. That matters: finalizers call ckptsym
# (to free handles), and a finalizer must never wait on a lock. Any handle exists only after the library is open.
function library()
    handle = LIBRARY_HANDLE[]
    handle != C_NULL && return handle
    lock(LIBRARY_LOCK) do
        LIBRARY_HANDLE[] == C_NULL && (LIBRARY_HANDLE[] = open_library())
        LIBRARY_HANDLE[]
    end
end

"""The address of the exported C function `name`, opening the library on first use."""
ckptsym(name::Symbol) = Libdl.dlsym(library(), name)

# A precompiled image may carry a handle from the process that built it; it is only valid in that process.
__init__() = (LIBRARY_HANDLE[] = C_NULL; nothing)

# ---------------------------------------------------------------------------------------------------------------
# Constants (pinned numbers of the header)
# ---------------------------------------------------------------------------------------------------------------

const CKPT_VERSION_MAJOR = 0
const CKPT_VERSION_MINOR = 1
const CKPT_VERSION_PATCH = 0
const CKPT_VERSION_NUMBER = UInt32(CKPT_VERSION_MAJOR * 10000 + CKPT_VERSION_MINOR * 100 + CKPT_VERSION_PATCH)

const CKPT_OK = Int32(0)
const CKPT_E_INVALID_ARGUMENT = Int32(1)
const CKPT_E_NOT_FOUND = Int32(2)
const CKPT_E_ALREADY_EXISTS = Int32(3)
const CKPT_E_MISMATCH = Int32(4)
const CKPT_E_CORRUPT = Int32(5)
const CKPT_E_VERSION = Int32(6)
const CKPT_E_IO = Int32(7)
const CKPT_E_NO_SPACE = Int32(8)
const CKPT_E_TIMEOUT = Int32(9)
const CKPT_E_PEER_FAILED = Int32(10)
const CKPT_E_UNSUPPORTED = Int32(11)
const CKPT_E_NO_MEMORY = Int32(12)
const CKPT_E_IN_PROGRESS = Int32(13)
const CKPT_E_INTERNAL = Int32(14)

const CKPT_LOG_ERROR = Int32(0)
const CKPT_LOG_WARNING = Int32(1)
const CKPT_LOG_INFO = Int32(2)

const CKPT_TRANSPORT_DEFAULT = Int32(-1)
const CKPT_TRANSPORT_AUTO = Int32(0)
const CKPT_TRANSPORT_NONE = Int32(1)
const CKPT_TRANSPORT_UCX = Int32(2)
const CKPT_TRANSPORT_NCCL = Int32(3)

const CKPT_LOAD_READS_ONCE = 1
const CKPT_LOAD_READS_OWN = 2

const CKPT_MAX_NDIM = 8

const CKPT_DTYPE_BOOL = Int32(1)
const CKPT_DTYPE_U8 = Int32(2)
const CKPT_DTYPE_I8 = Int32(3)
const CKPT_DTYPE_I16 = Int32(4)
const CKPT_DTYPE_U16 = Int32(5)
const CKPT_DTYPE_I32 = Int32(6)
const CKPT_DTYPE_U32 = Int32(7)
const CKPT_DTYPE_I64 = Int32(8)
const CKPT_DTYPE_U64 = Int32(9)
const CKPT_DTYPE_F16 = Int32(10)
const CKPT_DTYPE_BF16 = Int32(11)
const CKPT_DTYPE_F32 = Int32(12)
const CKPT_DTYPE_F64 = Int32(13)
const CKPT_DTYPE_C64 = Int32(14)
const CKPT_DTYPE_F8_E4M3 = Int32(15)
const CKPT_DTYPE_F8_E5M2 = Int32(16)
const CKPT_DTYPE_C128 = Int32(17)
const CKPT_DTYPE_F8_E4M3FNUZ = Int32(18)
const CKPT_DTYPE_F8_E5M2FNUZ = Int32(19)
const CKPT_DTYPE_F8_E4M3B11FNUZ = Int32(20)
const CKPT_DTYPE_F8_E3M4 = Int32(21)
const CKPT_DTYPE_F8_E4M3_IEEE = Int32(22)
const CKPT_DTYPE_F8_E8M0 = Int32(23)
const CKPT_DTYPE_F4_E2M1 = Int32(24)
const CKPT_DTYPE_I4 = Int32(25)
const CKPT_DTYPE_U4 = Int32(26)
const CKPT_DTYPE_I2 = Int32(27)
const CKPT_DTYPE_U2 = Int32(28)

const CKPT_MEMORY_HOST = Int32(0)
const CKPT_MEMORY_CUDA = Int32(1)

const CKPT_SHARD_FLATTENED = UInt32(0x1)
const CKPT_SHARD_ALLOW_SHAPE_MISMATCH = UInt32(0x2)
const CKPT_SHARD_ALLOW_DTYPE_CAST = UInt32(0x4)
const CKPT_SHARD_COMPRESS = UInt32(0x8)

const CKPT_PHASE_PLANNING = Int32(0)
const CKPT_PHASE_STAGING = Int32(1)
const CKPT_PHASE_WRITING = Int32(2)
const CKPT_PHASE_COMMITTING = Int32(3)
const CKPT_PHASE_COMMITTED = Int32(4)
const CKPT_PHASE_READING = Int32(5)
const CKPT_PHASE_LOADED = Int32(6)
const CKPT_PHASE_FAILED = Int32(7)

const CKPT_TIER_STORAGE = UInt64(0)
const CKPT_TIER_MEMORY = UInt64(1)
const CKPT_TIER_BOTH = UInt64(2)

const CKPT_SAVE_IN_PLACE = UInt64(0x1)
const CKPT_SAVE_COPY_ON_WRITE = UInt64(0x2)
const CKPT_SAVE_CHECK_REPLICAS = UInt64(0x4)
const CKPT_SAVE_INCREMENTAL = UInt64(0x8)
const CKPT_SAVE_COMPRESS = UInt64(0x10)

const CKPT_BEST_MAX = Int32(0)
const CKPT_BEST_MIN = Int32(1)

const CKPT_STRICT_FAIL = Int32(0)
const CKPT_STRICT_LOG = Int32(1)
const CKPT_STRICT_IGNORE = Int32(2)

# Typed null pointers, for struct fields (conversion between pointer types is not implicit).
const NULL_CHARS = Ptr{Cchar}(C_NULL)
const NULL_DIMS = Ptr{UInt64}(C_NULL)

# ---------------------------------------------------------------------------------------------------------------
# Structs: isbits mirrors of the C structs, field for field (Julia lays isbits structs out as C does). Each
# zero-argument constructor is the header's *_INIT macro.
# ---------------------------------------------------------------------------------------------------------------

# The job's own collectives (ckpt_collectives_init fills the header's defaults). `Context` does not take them yet,
# so `collectives` stays NULL from Julia; the functions would be @cfunction pointers, called with `user`.
struct ckpt_collectives
    struct_size::UInt32
    user::Ptr{Cvoid}
    allgatherv::Ptr{Cvoid}
    alltoallv::Ptr{Cvoid}
    broadcast::Ptr{Cvoid}
    barrier::Ptr{Cvoid}
end
ckpt_collectives() = ckpt_collectives(sizeof(ckpt_collectives), C_NULL, C_NULL, C_NULL, C_NULL, C_NULL)

const NULL_COLLECTIVES = Ptr{ckpt_collectives}(C_NULL)

struct ckpt_context_options
    struct_size::UInt32
    rank::Int32
    world_size::Int32
    local_rank::Int32
    store_host::Ptr{Cchar}
    store_port::Int32
    timeout_ms::UInt32
    allgather::Ptr{Cvoid}
    allgather_user::Ptr{Cvoid}
    node_name::Ptr{Cchar}
    log::Ptr{Cvoid}
    log_user::Ptr{Cvoid}
    io_workers::Int32
    arena_bytes::UInt64
    transport::Int32
    collectives::Ptr{ckpt_collectives}
end
ckpt_context_options() = ckpt_context_options(sizeof(ckpt_context_options), -1, -1, -1, NULL_CHARS, -1, 0,
                                              C_NULL, C_NULL, NULL_CHARS, C_NULL, C_NULL, -1, 0,
                                              CKPT_TRANSPORT_DEFAULT, NULL_COLLECTIVES)

struct ckpt_context_stats
    struct_size::UInt32
    io_workers::UInt32
    arena_bytes::UInt64
    saves_committed::UInt64
    plans_computed::UInt64
    plans_reused::UInt64
    bytes_staged::UInt64
    bytes_written::UInt64
    bytes_read::UInt64
    bytes_sent::UInt64
    bytes_received::UInt64
    transport::Int32
    exchange_ns::UInt64
    control_bytes_sent::UInt64
    control_bytes_received::UInt64
    store_collectives::UInt64
    last_load_reads::UInt64
    last_load_read_amplification_milli::UInt64
end
ckpt_context_stats() = ckpt_context_stats(sizeof(ckpt_context_stats), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                          CKPT_TRANSPORT_NONE, 0, 0, 0, 0, 0, 0)

struct ckpt_tensor_shard
    struct_size::UInt32
    key::Ptr{Cchar}
    dtype::Int32
    ndim::UInt32
    global_shape::Ptr{UInt64}
    local_shape::Ptr{UInt64}
    global_offset::Ptr{UInt64}
    replica_ndim::UInt32
    replica_id::Ptr{UInt32}
    flags::UInt32
    flat_start::UInt64
    flat_end::UInt64
    memory_kind::Int32
    device::Int32
    data::Ptr{Cvoid}
    data_size::UInt64
end
ckpt_tensor_shard() = ckpt_tensor_shard(sizeof(ckpt_tensor_shard), NULL_CHARS, 0, 0, NULL_DIMS, NULL_DIMS, NULL_DIMS,
                                        0, Ptr{UInt32}(C_NULL), 0, 0, 0, CKPT_MEMORY_HOST, 0, C_NULL, 0)

# `progress` stays NULL from Julia: the library calls it from its own save thread, where a Julia callback cannot
# safely run (and the binding cannot be tested on the build machines).
struct ckpt_save_options
    struct_size::UInt32
    metadata_count::UInt32
    metadata_keys::Ptr{Ptr{Cchar}}
    metadata_values::Ptr{Ptr{Cchar}}
    progress::Ptr{Cvoid}
    progress_user::Ptr{Cvoid}
    tier::UInt64
    flags::UInt64
    metrics::Ptr{Cchar}
    best_value::Float64
    has_best_value::UInt64
    base::Ptr{Cchar}
end
ckpt_save_options() = ckpt_save_options(sizeof(ckpt_save_options), 0, Ptr{Ptr{Cchar}}(C_NULL), Ptr{Ptr{Cchar}}(C_NULL),
                                        C_NULL, C_NULL, CKPT_TIER_STORAGE, 0, NULL_CHARS, 0.0, 0, NULL_CHARS)

struct ckpt_request_stats
    struct_size::UInt32
    committed::UInt32
    state_bytes::UInt64
    bytes_to_write::UInt64
    bytes_staged::UInt64
    bytes_written::UInt64
    bytes_committed::UInt64
    files_written::UInt64
    planning_ns::UInt64
    staging_ns::UInt64
    blocking_ns::UInt64
    writing_ns::UInt64
    committing_ns::UInt64
    total_ns::UInt64
end
ckpt_request_stats() = ckpt_request_stats(sizeof(ckpt_request_stats), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)

struct ckpt_load_options
    struct_size::UInt32
    missing_keys::Int32
    unexpected_keys::Int32
    progress::Ptr{Cvoid}
    progress_user::Ptr{Cvoid}
    key_map::Ptr{Cstring}
    key_map_count::UInt64
end
ckpt_load_options() =
    ckpt_load_options(sizeof(ckpt_load_options), CKPT_STRICT_FAIL, CKPT_STRICT_LOG, C_NULL, C_NULL, C_NULL, 0)

struct ckpt_manager_options
    struct_size::UInt32
    keep_last::UInt32
    keep_every::UInt64
    memory_tier::UInt32
    storage_every::UInt64
    keep_best::UInt32
    best_mode::Int32
    keep_for_seconds::UInt64
end
ckpt_manager_options() = ckpt_manager_options(sizeof(ckpt_manager_options), 0, 0, 0, 0, 0, CKPT_BEST_MAX, 0)

struct ckpt_checkpoint_info
    struct_size::UInt32
    format_major::UInt32
    format_minor::UInt32
    world_size::UInt32
    node_count::UInt32
    tensor_count::UInt64
    object_count::UInt64
    common_count::UInt64
    metadata_count::UInt64
    file_count::UInt64
    total_bytes::UInt64
end
ckpt_checkpoint_info() = ckpt_checkpoint_info(sizeof(ckpt_checkpoint_info), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)

const ZERO_DIMS = ntuple(_ -> UInt64(0), CKPT_MAX_NDIM)

struct ckpt_tensor_info
    struct_size::UInt32
    key::Ptr{Cchar}
    dtype::Int32
    ndim::UInt32
    shape::NTuple{CKPT_MAX_NDIM,UInt64}
    chunk_count::UInt64
end
ckpt_tensor_info() = ckpt_tensor_info(sizeof(ckpt_tensor_info), NULL_CHARS, 0, 0, ZERO_DIMS, 0)

struct ckpt_chunk_info
    struct_size::UInt32
    ndim::UInt32
    offset::NTuple{CKPT_MAX_NDIM,UInt64}
    shape::NTuple{CKPT_MAX_NDIM,UInt64}
    file::Ptr{Cchar}
    file_offset::UInt64
    byte_length::UInt64
end
ckpt_chunk_info() = ckpt_chunk_info(sizeof(ckpt_chunk_info), 0, ZERO_DIMS, ZERO_DIMS, NULL_CHARS, 0, 0)

struct ckpt_export_options
    struct_size::UInt32
    max_shard_bytes::UInt64
    keys::Ptr{Ptr{Cchar}}
    key_count::UInt64
    part_index::UInt32
    part_count::UInt32
    dtype::Int32
end
ckpt_export_options() = ckpt_export_options(sizeof(ckpt_export_options), 5_000_000_000, Ptr{Ptr{Cchar}}(C_NULL), 0,
                                            0, 1, 0)

# ---------------------------------------------------------------------------------------------------------------
# Functions, in the order of the header. Handles are Ptr{Cvoid}; `err` is a ckpt_error_t* or C_NULL.
# ---------------------------------------------------------------------------------------------------------------

# Version
ckpt_version_number() = @ccall $(ckptsym(:ckpt_version_number))()::UInt32
ckpt_version_string() = @ccall $(ckptsym(:ckpt_version_string))()::Ptr{Cchar}

# Status codes and error objects
ckpt_status_string(status) = @ccall $(ckptsym(:ckpt_status_string))(status::Int32)::Ptr{Cchar}
ckpt_error_create(out) = @ccall $(ckptsym(:ckpt_error_create))(out::Ptr{Ptr{Cvoid}})::Int32
ckpt_error_free(err) = @ccall $(ckptsym(:ckpt_error_free))(err::Ptr{Cvoid})::Cvoid
ckpt_error_status(err) = @ccall $(ckptsym(:ckpt_error_status))(err::Ptr{Cvoid})::Int32
ckpt_error_message(err) = @ccall $(ckptsym(:ckpt_error_message))(err::Ptr{Cvoid})::Ptr{Cchar}

# Context
ckpt_collectives_init(collectives, struct_size) =
    @ccall $(ckptsym(:ckpt_collectives_init))(collectives::Ptr{ckpt_collectives}, struct_size::UInt32)::Int32
ckpt_context_options_init(opts, struct_size) =
    @ccall $(ckptsym(:ckpt_context_options_init))(opts::Ptr{ckpt_context_options}, struct_size::UInt32)::Int32
ckpt_context_create(opts, out, err) =
    @ccall $(ckptsym(:ckpt_context_create))(opts::Ptr{ckpt_context_options}, out::Ptr{Ptr{Cvoid}},
                                            err::Ptr{Cvoid})::Int32
ckpt_context_free(ctx) = @ccall $(ckptsym(:ckpt_context_free))(ctx::Ptr{Cvoid})::Cvoid
ckpt_context_rank(ctx) = @ccall $(ckptsym(:ckpt_context_rank))(ctx::Ptr{Cvoid})::Int32
ckpt_context_world_size(ctx) = @ccall $(ckptsym(:ckpt_context_world_size))(ctx::Ptr{Cvoid})::Int32
ckpt_context_local_rank(ctx) = @ccall $(ckptsym(:ckpt_context_local_rank))(ctx::Ptr{Cvoid})::Int32
ckpt_context_stats_get(ctx, stats, err) =
    @ccall $(ckptsym(:ckpt_context_stats_get))(ctx::Ptr{Cvoid}, stats::Ptr{ckpt_context_stats}, err::Ptr{Cvoid})::Int32

# State
ckpt_dtype_size(dtype) = @ccall $(ckptsym(:ckpt_dtype_size))(dtype::Int32)::UInt32
ckpt_dtype_name(dtype) = @ccall $(ckptsym(:ckpt_dtype_name))(dtype::Int32)::Ptr{Cchar}
ckpt_tensor_shard_init(shard, struct_size) =
    @ccall $(ckptsym(:ckpt_tensor_shard_init))(shard::Ptr{ckpt_tensor_shard}, struct_size::UInt32)::Int32
ckpt_state_create(out, err) = @ccall $(ckptsym(:ckpt_state_create))(out::Ptr{Ptr{Cvoid}}, err::Ptr{Cvoid})::Int32
ckpt_state_free(state) = @ccall $(ckptsym(:ckpt_state_free))(state::Ptr{Cvoid})::Cvoid
ckpt_state_add_tensor(state, shard, err) =
    @ccall $(ckptsym(:ckpt_state_add_tensor))(state::Ptr{Cvoid}, shard::Ptr{ckpt_tensor_shard}, err::Ptr{Cvoid})::Int32
ckpt_state_add_object(state, key, grid_ndim, grid_shape, grid_index, data, size, err) =
    @ccall $(ckptsym(:ckpt_state_add_object))(state::Ptr{Cvoid}, key::Cstring, grid_ndim::UInt32,
                                              grid_shape::Ptr{UInt64}, grid_index::Ptr{UInt64}, data::Ptr{Cvoid},
                                              size::UInt64, err::Ptr{Cvoid})::Int32
ckpt_state_add_common(state, key, data, size, err) =
    @ccall $(ckptsym(:ckpt_state_add_common))(state::Ptr{Cvoid}, key::Cstring, data::Ptr{Cvoid}, size::UInt64,
                                              err::Ptr{Cvoid})::Int32
ckpt_state_common(state, key, data, size, err) =
    @ccall $(ckptsym(:ckpt_state_common))(state::Ptr{Cvoid}, key::Cstring, data::Ptr{Ptr{Cvoid}}, size::Ptr{UInt64},
                                          err::Ptr{Cvoid})::Int32
ckpt_state_object(state, key, grid_index, data, size, err) =
    @ccall $(ckptsym(:ckpt_state_object))(state::Ptr{Cvoid}, key::Cstring, grid_index::Ptr{UInt64},
                                          data::Ptr{Ptr{Cvoid}}, size::Ptr{UInt64}, err::Ptr{Cvoid})::Int32

# Save
ckpt_save_options_init(opts, struct_size) =
    @ccall $(ckptsym(:ckpt_save_options_init))(opts::Ptr{ckpt_save_options}, struct_size::UInt32)::Int32
ckpt_save(ctx, state, path, opts, request, err) =
    @ccall $(ckptsym(:ckpt_save))(ctx::Ptr{Cvoid}, state::Ptr{Cvoid}, path::Cstring, opts::Ptr{ckpt_save_options},
                                  request::Ptr{Ptr{Cvoid}}, err::Ptr{Cvoid})::Int32
ckpt_request_test(request, err) =
    @ccall $(ckptsym(:ckpt_request_test))(request::Ptr{Cvoid}, err::Ptr{Cvoid})::Int32
ckpt_request_wait(request, timeout_ms, err) =
    @ccall $(ckptsym(:ckpt_request_wait))(request::Ptr{Cvoid}, timeout_ms::UInt32, err::Ptr{Cvoid})::Int32
ckpt_request_free(request) = @ccall $(ckptsym(:ckpt_request_free))(request::Ptr{Cvoid})::Cvoid
ckpt_request_stats_get(request, stats, err) =
    @ccall $(ckptsym(:ckpt_request_stats_get))(request::Ptr{Cvoid}, stats::Ptr{ckpt_request_stats},
                                               err::Ptr{Cvoid})::Int32

# Load
ckpt_load_options_init(opts, struct_size) =
    @ccall $(ckptsym(:ckpt_load_options_init))(opts::Ptr{ckpt_load_options}, struct_size::UInt32)::Int32
ckpt_load(ctx, state, path, opts, err) =
    @ccall $(ckptsym(:ckpt_load))(ctx::Ptr{Cvoid}, state::Ptr{Cvoid}, path::Cstring, opts::Ptr{ckpt_load_options},
                                  err::Ptr{Cvoid})::Int32

# Manager
ckpt_manager_options_init(opts, struct_size) =
    @ccall $(ckptsym(:ckpt_manager_options_init))(opts::Ptr{ckpt_manager_options}, struct_size::UInt32)::Int32
ckpt_manager_open(ctx, root, opts, out, err) =
    @ccall $(ckptsym(:ckpt_manager_open))(ctx::Ptr{Cvoid}, root::Cstring, opts::Ptr{ckpt_manager_options},
                                          out::Ptr{Ptr{Cvoid}}, err::Ptr{Cvoid})::Int32
ckpt_manager_free(manager) = @ccall $(ckptsym(:ckpt_manager_free))(manager::Ptr{Cvoid})::Cvoid
ckpt_manager_close(manager, err) =
    @ccall $(ckptsym(:ckpt_manager_close))(manager::Ptr{Cvoid}, err::Ptr{Cvoid})::Int32
ckpt_manager_save(manager, state, step, opts, request, err) =
    @ccall $(ckptsym(:ckpt_manager_save))(manager::Ptr{Cvoid}, state::Ptr{Cvoid}, step::UInt64,
                                          opts::Ptr{ckpt_save_options}, request::Ptr{Ptr{Cvoid}},
                                          err::Ptr{Cvoid})::Int32
ckpt_manager_latest(manager, step, err) =
    @ccall $(ckptsym(:ckpt_manager_latest))(manager::Ptr{Cvoid}, step::Ptr{UInt64}, err::Ptr{Cvoid})::Int32
ckpt_manager_resume_step(manager, step, err) =
    @ccall $(ckptsym(:ckpt_manager_resume_step))(manager::Ptr{Cvoid}, step::Ptr{UInt64}, err::Ptr{Cvoid})::Int32
ckpt_manager_load_latest(manager, state, opts, step, err) =
    @ccall $(ckptsym(:ckpt_manager_load_latest))(manager::Ptr{Cvoid}, state::Ptr{Cvoid},
                                                 opts::Ptr{ckpt_load_options}, step::Ptr{UInt64},
                                                 err::Ptr{Cvoid})::Int32
ckpt_manager_steps(manager, steps, capacity, count, err) =
    @ccall $(ckptsym(:ckpt_manager_steps))(manager::Ptr{Cvoid}, steps::Ptr{UInt64}, capacity::UInt64,
                                           count::Ptr{UInt64}, err::Ptr{Cvoid})::Int32
ckpt_manager_step_path(manager, step, buffer, buffer_size, err) =
    @ccall $(ckptsym(:ckpt_manager_step_path))(manager::Ptr{Cvoid}, step::UInt64, buffer::Ptr{Cchar},
                                               buffer_size::UInt64, err::Ptr{Cvoid})::Int32
ckpt_manager_wait(manager, err) = @ccall $(ckptsym(:ckpt_manager_wait))(manager::Ptr{Cvoid}, err::Ptr{Cvoid})::Int32
ckpt_manager_metrics(manager, step, buffer, capacity, length, err) =
    @ccall $(ckptsym(:ckpt_manager_metrics))(manager::Ptr{Cvoid}, step::UInt64, buffer::Ptr{Cchar}, capacity::UInt64,
                                             length::Ptr{UInt64}, err::Ptr{Cvoid})::Int32

# Reader
ckpt_reader_open(path, out, err) =
    @ccall $(ckptsym(:ckpt_reader_open))(path::Cstring, out::Ptr{Ptr{Cvoid}}, err::Ptr{Cvoid})::Int32
ckpt_reader_free(reader) = @ccall $(ckptsym(:ckpt_reader_free))(reader::Ptr{Cvoid})::Cvoid
ckpt_reader_info(reader, info, err) =
    @ccall $(ckptsym(:ckpt_reader_info))(reader::Ptr{Cvoid}, info::Ptr{ckpt_checkpoint_info}, err::Ptr{Cvoid})::Int32
ckpt_reader_tensor(reader, index, info, err) =
    @ccall $(ckptsym(:ckpt_reader_tensor))(reader::Ptr{Cvoid}, index::UInt64, info::Ptr{ckpt_tensor_info},
                                           err::Ptr{Cvoid})::Int32
ckpt_reader_chunk(reader, tensor_index, chunk_index, info, err) =
    @ccall $(ckptsym(:ckpt_reader_chunk))(reader::Ptr{Cvoid}, tensor_index::UInt64, chunk_index::UInt64,
                                          info::Ptr{ckpt_chunk_info}, err::Ptr{Cvoid})::Int32
ckpt_reader_read(reader, key, ndim, offset, shape, buffer, buffer_size, err) =
    @ccall $(ckptsym(:ckpt_reader_read))(reader::Ptr{Cvoid}, key::Cstring, ndim::UInt32, offset::Ptr{UInt64},
                                         shape::Ptr{UInt64}, buffer::Ptr{Cvoid}, buffer_size::UInt64,
                                         err::Ptr{Cvoid})::Int32
ckpt_reader_object_at(reader, index, key, grid_ndim, grid_shape, bytes, err) =
    @ccall $(ckptsym(:ckpt_reader_object_at))(reader::Ptr{Cvoid}, index::UInt64, key::Ptr{Ptr{Cchar}},
                                              grid_ndim::Ptr{UInt32}, grid_shape::Ptr{Ptr{UInt64}},
                                              bytes::Ptr{UInt64}, err::Ptr{Cvoid})::Int32
ckpt_reader_common_at(reader, index, key, data, size, err) =
    @ccall $(ckptsym(:ckpt_reader_common_at))(reader::Ptr{Cvoid}, index::UInt64, key::Ptr{Ptr{Cchar}},
                                              data::Ptr{Ptr{Cvoid}}, size::Ptr{UInt64}, err::Ptr{Cvoid})::Int32
ckpt_reader_common(reader, key, data, size, err) =
    @ccall $(ckptsym(:ckpt_reader_common))(reader::Ptr{Cvoid}, key::Cstring, data::Ptr{Ptr{Cvoid}},
                                           size::Ptr{UInt64}, err::Ptr{Cvoid})::Int32
ckpt_reader_metadata(reader, key, value, err) =
    @ccall $(ckptsym(:ckpt_reader_metadata))(reader::Ptr{Cvoid}, key::Cstring, value::Ptr{Ptr{Cchar}},
                                             err::Ptr{Cvoid})::Int32
ckpt_reader_metadata_at(reader, index, key, value, err) =
    @ccall $(ckptsym(:ckpt_reader_metadata_at))(reader::Ptr{Cvoid}, index::UInt64, key::Ptr{Ptr{Cchar}},
                                                value::Ptr{Ptr{Cchar}}, err::Ptr{Cvoid})::Int32
ckpt_reader_verify(reader, err) = @ccall $(ckptsym(:ckpt_reader_verify))(reader::Ptr{Cvoid}, err::Ptr{Cvoid})::Int32

# Export to safetensors
ckpt_export_options_init(opts, struct_size) =
    @ccall $(ckptsym(:ckpt_export_options_init))(opts::Ptr{ckpt_export_options}, struct_size::UInt32)::Int32
ckpt_export(checkpoint, out, opts, err) =
    @ccall $(ckptsym(:ckpt_export))(checkpoint::Cstring, out::Cstring, opts::Ptr{ckpt_export_options},
                                    err::Ptr{Cvoid})::Int32

end # module LibCkpt

"""
    Ckpt

Julia bindings of libckpt, the distributed checkpointing runtime.

Every process of a job (a rank) creates a [`Context`](@ref), registers the pieces of the global tensors it holds
in a [`State`](@ref), and calls [`Ckpt.save`](@ref) or [`load!`](@ref) together with the other ranks. A save
returns once the arrays are staged; the [`SaveRequest`](@ref) it returns tells when the checkpoint is committed. A
[`Manager`](@ref) keeps numbered steps under one root directory, with a latest pointer and retention, and resumes
from the latest ([`load_latest!`](@ref)). A [`Reader`](@ref) inspects a checkpoint from any process, and
[`Ckpt.export_safetensors`](@ref) writes one out as safetensors.

# Dimension order

Julia arrays are column-major, libckpt tensors row-major. Every shape, offset and flattened range in this module
is given **in Julia order** and reversed at the C boundary: a Julia array of size `(a, b)` is stored as a
row-major tensor of shape `(b, a)`, which holds exactly the same bytes. A checkpoint saved from Julia therefore
reads back unchanged from Julia, while C, Python or Rust see every tensor with its dimensions reversed (the
transpose), and a tensor saved by them reads into Julia with its dimensions reversed. Offsets are zero-based
element counts, as in the C API. Object grid shapes and indices describe no memory layout and are passed unchanged.

# Errors and lifetimes

A failed call throws [`CkptError`](@ref) with the library's status (`CKPT_E_*`) and message. Misuse detected in
Julia (a closed handle, an unsupported element type) throws `ArgumentError`. Handles are freed by `close` or, failing
that, by the garbage collector; close a `Context` explicitly on every rank at the end of a job. A `State` keeps every
array registered in it alive; do not resize such an array while the state may use it (until the save returns or
the load completes). One handle must not be used by two tasks at once.

The raw C API is `Ckpt.LibCkpt`, one function per function of `ckpt.h`.
"""
module Ckpt

include("LibCkpt.jl")
using .LibCkpt: CKPT_OK, CKPT_E_INVALID_ARGUMENT, CKPT_E_NOT_FOUND, CKPT_E_ALREADY_EXISTS, CKPT_E_MISMATCH,
                CKPT_E_CORRUPT, CKPT_E_VERSION, CKPT_E_IO, CKPT_E_NO_SPACE, CKPT_E_TIMEOUT, CKPT_E_PEER_FAILED,
                CKPT_E_UNSUPPORTED, CKPT_E_NO_MEMORY, CKPT_E_IN_PROGRESS, CKPT_E_INTERNAL,
                CKPT_DTYPE_BOOL, CKPT_DTYPE_U8, CKPT_DTYPE_I8, CKPT_DTYPE_I16, CKPT_DTYPE_U16, CKPT_DTYPE_I32,
                CKPT_DTYPE_U32, CKPT_DTYPE_I64, CKPT_DTYPE_U64, CKPT_DTYPE_F16, CKPT_DTYPE_BF16, CKPT_DTYPE_F32,
                CKPT_DTYPE_F64, CKPT_DTYPE_C64, CKPT_DTYPE_F8_E4M3, CKPT_DTYPE_F8_E5M2, CKPT_DTYPE_C128,
                CKPT_STRICT_FAIL, CKPT_STRICT_LOG, CKPT_STRICT_IGNORE, CKPT_MAX_NDIM, CKPT_SHARD_FLATTENED,
                CKPT_SHARD_ALLOW_SHAPE_MISMATCH, CKPT_SHARD_ALLOW_DTYPE_CAST, CKPT_SHARD_COMPRESS,
                CKPT_TRANSPORT_DEFAULT, CKPT_TRANSPORT_AUTO, CKPT_TRANSPORT_NONE, CKPT_TRANSPORT_UCX,
                CKPT_TRANSPORT_NCCL, CKPT_LOAD_READS_ONCE, CKPT_LOAD_READS_OWN, CKPT_TIER_STORAGE, CKPT_TIER_MEMORY,
                CKPT_TIER_BOTH, CKPT_BEST_MAX, CKPT_BEST_MIN

export CkptError, Context, State, SaveRequest, Manager, Reader
export add_tensor!, add_flattened_tensor!, add_object!, add_common!, load!, load_latest!, isdone
export CKPT_OK, CKPT_E_INVALID_ARGUMENT, CKPT_E_NOT_FOUND, CKPT_E_ALREADY_EXISTS, CKPT_E_MISMATCH, CKPT_E_CORRUPT,
       CKPT_E_VERSION, CKPT_E_IO, CKPT_E_NO_SPACE, CKPT_E_TIMEOUT, CKPT_E_PEER_FAILED, CKPT_E_UNSUPPORTED,
       CKPT_E_NO_MEMORY, CKPT_E_IN_PROGRESS, CKPT_E_INTERNAL
export CKPT_DTYPE_BOOL, CKPT_DTYPE_U8, CKPT_DTYPE_I8, CKPT_DTYPE_I16, CKPT_DTYPE_U16, CKPT_DTYPE_I32, CKPT_DTYPE_U32,
       CKPT_DTYPE_I64, CKPT_DTYPE_U64, CKPT_DTYPE_F16, CKPT_DTYPE_BF16, CKPT_DTYPE_F32, CKPT_DTYPE_F64,
       CKPT_DTYPE_C64, CKPT_DTYPE_F8_E4M3, CKPT_DTYPE_F8_E5M2, CKPT_DTYPE_C128
export CKPT_STRICT_FAIL, CKPT_STRICT_LOG, CKPT_STRICT_IGNORE
export CKPT_TRANSPORT_DEFAULT, CKPT_TRANSPORT_AUTO, CKPT_TRANSPORT_NONE, CKPT_TRANSPORT_UCX, CKPT_TRANSPORT_NCCL
export CKPT_LOAD_READS_ONCE, CKPT_LOAD_READS_OWN
export CKPT_TIER_STORAGE, CKPT_TIER_MEMORY, CKPT_TIER_BOTH
export CKPT_BEST_MAX, CKPT_BEST_MIN

include("errors.jl")
include("dtypes.jl")
include("handles.jl")
include("state.jl")
include("save_load.jl")
include("manager.jl")
include("reader.jl")
include("export.jl")

"""The version of the libckpt actually loaded."""
version() = VersionNumber(unsafe_string(LibCkpt.ckpt_version_string()))

end # module Ckpt

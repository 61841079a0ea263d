# Handles: mutable wrappers of the library's opaque pointers, freed by `close` or by their finalizer.

"""A libckpt handle: `handle` is the C pointer, C_NULL once closed. Subtypes define `release(::Subtype)`."""
abstract type Handle end

Base.isopen(h::Handle) = h.handle != C_NULL

function Base.close(h::Handle)
    if h.handle != C_NULL
        release(h)
        h.handle = C_NULL
    end
    return nothing
end

# Passing a handle itself (not its pointer) to a ccall keeps it rooted for the duration of the call, so a finalizer
# cannot free it underneath the library.
function Base.unsafe_convert(::Type{Ptr{Cvoid}}, h::Handle)
    h.handle == C_NULL && throw(ArgumentError("this $(nameof(typeof(h))) is closed"))
    return h.handle
end

"""Registers `close` as the finalizer of `h` and returns `h`."""
function with_finalizer(h::Handle)
    finalizer(close, h)
    return h
end

"""Calls `create(out, err)` (a ckpt_*_create or *_open) and returns the handle it stored in `out`."""
function create_handle(create)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    checked() do err
        create(out, err)
    end
    return out[]
end

"""Keeps a Julia string alive as a NUL-terminated C string; refuses embedded NULs."""
function c_string(s::AbstractString)
    str = String(s)
    Base.containsnul(str) && throw(ArgumentError("string contains a NUL byte: $(repr(str))"))
    return str
end

"""The address of a string returned by `c_string` (call under GC.@preserve), or NULL for `nothing`."""
chars(s::String) = Ptr{Cchar}(pointer(s))
chars(::Nothing) = Ptr{Cchar}(C_NULL)

"""A copy of `size` bytes at `data`, which the library owns."""
copy_bytes(data::Ptr{Cvoid}, size::Integer) =
    size == 0 ? UInt8[] : copy(unsafe_wrap(Array, Ptr{UInt8}(data), Int(size)))

# ---------------------------------------------------------------------------------------------------------------
# Context
# ---------------------------------------------------------------------------------------------------------------

"""
    Context(; rank=-1, world_size=-1, local_rank=-1, store_host=nothing, store_port=-1, timeout_ms=0,
              node_name=nothing)

Collective: creates this rank's context and connects to the other ranks. `-1` / `nothing` / `0` take the value
from the launcher's environment (torchrun, OpenMPI, SLURM; MASTER_ADDR, MASTER_PORT, CKPT_TIMEOUT_MS,
CKPT_NODE_NAME), or a single-rank job when none is set. `close` it on every rank at the end: a rank that exits
early is seen as dead by the others.
"""
mutable struct Context <: Handle
    handle::Ptr{Cvoid}
    Context(handle::Ptr{Cvoid}) = with_finalizer(new(handle))
end

function Context(; rank::Integer = -1, world_size::Integer = -1, local_rank::Integer = -1,
                 store_host::Union{Nothing,AbstractString} = nothing, store_port::Integer = -1,
                 timeout_ms::Integer = 0, node_name::Union{Nothing,AbstractString} = nothing)
    host = store_host === nothing ? nothing : c_string(store_host)
    node = node_name === nothing ? nothing : c_string(node_name)
    handle = GC.@preserve host node begin
        options = Ref(LibCkpt.ckpt_context_options(
            sizeof(LibCkpt.ckpt_context_options), rank, world_size, local_rank, chars(host), store_port, timeout_ms,
            C_NULL, C_NULL, chars(node), C_NULL, C_NULL))
        create_handle() do out, err
            LibCkpt.ckpt_context_create(options, out, err)
        end
    end
    return Context(handle)
end

release(ctx::Context) = LibCkpt.ckpt_context_free(ctx.handle)

"""This process's rank in the job."""
rank(ctx::Context) = Int(LibCkpt.ckpt_context_rank(ctx))
"""The number of ranks of the job."""
world_size(ctx::Context) = Int(LibCkpt.ckpt_context_world_size(ctx))
"""This process's rank among the ranks of its node."""
local_rank(ctx::Context) = Int(LibCkpt.ckpt_context_local_rank(ctx))

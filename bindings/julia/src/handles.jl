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
              node_name=nothing, io_workers=-1, arena_bytes=0, transport=CKPT_TRANSPORT_DEFAULT)

Collective: creates this rank's context and connects to the other ranks. `-1` / `nothing` / `0` take the value
from the launcher's environment (torchrun, OpenMPI, SLURM; MASTER_ADDR, MASTER_PORT, CKPT_TIMEOUT_MS,
CKPT_NODE_NAME, CKPT_IO_WORKERS, CKPT_ARENA_BYTES, CKPT_TRANSPORT), or a single-rank job when none is set.

`io_workers` I/O worker processes are spawned from the ckpt-io-worker executable beside libckpt; `0` runs the I/O
on threads of this process instead. `arena_bytes` sizes the staging arena, the shared memory every save copies into
before returning. `transport` (`CKPT_TRANSPORT_AUTO`, `_NONE`, `_UCX`, `_NCCL`) is how ranks exchange tensor data
during loads; one named here that cannot load throws CkptError(CKPT_E_UNSUPPORTED).

`close` it on every rank at the end: a rank that exits early is seen as dead by the others. Closing a context
closes its open [`Manager`](@ref)s first.
"""
mutable struct Context <: Handle
    handle::Ptr{Cvoid}
    managers::Vector{WeakRef}  # closed before the context, which they use
    Context(handle::Ptr{Cvoid}) = with_finalizer(new(handle, WeakRef[]))
end

function Context(; rank::Integer = -1, world_size::Integer = -1, local_rank::Integer = -1,
                 store_host::Union{Nothing,AbstractString} = nothing, store_port::Integer = -1,
                 timeout_ms::Integer = 0, node_name::Union{Nothing,AbstractString} = nothing,
                 io_workers::Integer = -1, arena_bytes::Integer = 0,
                 transport::Integer = LibCkpt.CKPT_TRANSPORT_DEFAULT)
    host = store_host === nothing ? nothing : c_string(store_host)
    node = node_name === nothing ? nothing : c_string(node_name)
    handle = GC.@preserve host node begin
        options = Ref(LibCkpt.ckpt_context_options(
            sizeof(LibCkpt.ckpt_context_options), rank, world_size, local_rank, chars(host), store_port, timeout_ms,
            C_NULL, C_NULL, chars(node), C_NULL, C_NULL, io_workers, arena_bytes, transport,
            LibCkpt.NULL_COLLECTIVES))
        create_handle() do out, err
            LibCkpt.ckpt_context_create(options, out, err)
        end
    end
    return Context(handle)
end

function release(ctx::Context)
    for ref in ctx.managers
        manager = ref.value
        manager === nothing || close(manager)
    end
    empty!(ctx.managers)
    LibCkpt.ckpt_context_free(ctx.handle)
end

"""This process's rank in the job."""
rank(ctx::Context) = Int(LibCkpt.ckpt_context_rank(ctx))
"""The number of ranks of the job."""
world_size(ctx::Context) = Int(LibCkpt.ckpt_context_world_size(ctx))
"""This process's rank among the ranks of its node."""
local_rank(ctx::Context) = Int(LibCkpt.ckpt_context_local_rank(ctx))

"""Counters of one rank's work since its context was created, as [`Ckpt.stats`](@ref) reports them."""
struct ContextStats
    io_workers::Int      # I/O worker processes (0: threads of this process)
    arena_bytes::Int     # the staging arena's size
    saves_committed::Int # saves whose request succeeded
    plans_computed::Int  # saves that exchanged and validated the full state
    plans_reused::Int    # saves that reused the previous plan (unchanged structure on every rank)
    bytes_staged::Int    # bytes copied into the arena by saves
    bytes_written::Int   # bytes this rank's workers wrote to data files
    bytes_read::Int      # bytes this rank read from data files during loads
    bytes_sent::Int      # tensor bytes this rank sent to other ranks during loads
    bytes_received::Int  # tensor bytes this rank received from other ranks during loads
    transport::Int32     # the CKPT_TRANSPORT_* in use: NONE, UCX or NCCL
    exchange_ns::Int     # nanoseconds spent moving tensor data between ranks during loads, waits included
    control_bytes_sent::Int     # bytes of ckpt's collective metadata (plans, agreements, addresses) sent
    control_bytes_received::Int # and received, over the TCP store or the job's own collectives
    store_collectives::Int      # collectives that went through the TCP store (0 on one rank)
    last_load_reads::Int        # how the last load read: CKPT_LOAD_READS_ONCE or _OWN; 0 before any load
    last_load_read_amplification_milli::Int # bytes read by all ranks over the tensors' stored bytes, x 1000
end

"""
    Ckpt.stats(ctx) -> ContextStats

This rank's counters since `ctx` was created. Not collective.
"""
function stats(ctx::Context)
    raw = Ref(LibCkpt.ckpt_context_stats())
    checked() do err
        LibCkpt.ckpt_context_stats_get(ctx, raw, err)
    end
    s = raw[]
    return ContextStats(s.io_workers, s.arena_bytes, s.saves_committed, s.plans_computed, s.plans_reused,
                        s.bytes_staged, s.bytes_written, s.bytes_read, s.bytes_sent, s.bytes_received, s.transport,
                        s.exchange_ns, s.control_bytes_sent, s.control_bytes_received, s.store_collectives,
                        s.last_load_reads, s.last_load_read_amplification_milli)
end

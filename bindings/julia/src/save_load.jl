# Save (returning a request to wait on) and load.

"""
    SaveRequest

Tracks a save started by [`Ckpt.save`](@ref): poll it with [`isdone`](@ref), block on it with `wait`, free it with
`close`. It keeps its context alive, and for a copy-on-write save its state, whose arrays the library copies after
the call.
"""
mutable struct SaveRequest <: Handle
    handle::Ptr{Cvoid}
    context::Context
    state::Union{Nothing,State}
    SaveRequest(handle::Ptr{Cvoid}, context::Context, state::Union{Nothing,State} = nothing) =
        with_finalizer(new(handle, context, state))
end

release(request::SaveRequest) = LibCkpt.ckpt_request_free(request.handle)

"""
    Ckpt.save(ctx, state, path; metadata=(), tier=CKPT_TIER_STORAGE, in_place=false, copy_on_write=false,
              check_replicas=false, incremental=false, base=nothing, compress=false) -> SaveRequest

Collective: saves `state` as the checkpoint directory `path`, with `metadata` (pairs of strings, taken from rank 0)
in its manifest. Returns as soon as this rank's arrays are copied into the staging arena: they may be modified from
then on, while the I/O workers write them and the checkpoint is committed in the background. `wait` on the request
for the checkpoint to be complete and durable, and `close` it (closing waits for an unfinished save). Throws
CkptError: CKPT_E_MISMATCH when the ranks' shards do not tile a tensor, CKPT_E_ALREADY_EXISTS when `path` is
already a checkpoint, and so on.

`tier` says where the checkpoint goes: `CKPT_TIER_STORAGE` (the directory `path`), `CKPT_TIER_MEMORY` (the shared
memory of the node's ckpt-agent, which the first save to memory starts and which outlives the trainers; `path`
receives it only if they die) or `CKPT_TIER_BOTH` (memory, then `path`, written by the agent in the background). A
save to memory succeeds once the checkpoint is complete in memory, and [`load!`](@ref) of `path` then reads that
copy. It needs the job's identity, the same on every rank and across restarts: `CKPT_JOB_ID` (or `SLURM_JOB_ID`,
`TORCHELASTIC_RUN_ID`), else CKPT_E_INVALID_ARGUMENT; CKPT_E_NO_SPACE past the agent's budget.

With `in_place = true` (`CKPT_SAVE_IN_PLACE`) this rank's bytes are written straight from its arrays, with no
staging copy: `save` then returns only once they are durable, and the arrays must not change until it returns; the
request still finishes with the commit. It suits a save that is waited for anyway: the last one of a job, or a
blocking checkpoint.

With `copy_on_write = true` (`CKPT_SAVE_COPY_ON_WRITE`, Linux userfaultfd) `save` returns once this rank's arrays
are write-protected, before any copy: the copy runs in the background, and a page written before it was copied is
copied first, so the checkpoint holds the values at the call. The request keeps the state (and its arrays) alive
until it is closed; an array unmapped meanwhile fails the save, naming its tensor. Refused with `in_place` or a
memory tier; where the kernel refuses userfaultfd the save copies at the call.

With `check_replicas = true` (`CKPT_SAVE_CHECK_REPLICAS`) the ranks holding replicas of a box compare their copies'
block checksums before the save commits; a difference fails the save (CKPT_E_CORRUPT) naming the tensor, box, blocks
and ranks. The same on every rank. The replicas' arrays are read after the call (write-protected meanwhile, as with
`copy_on_write`): keep them alive until the request finishes.

With `incremental = true` (`CKPT_SAVE_INCREMENTAL`) every array box the save writes is hashed (SHA-256 per block of
1 MiB, at the call) into the manifest, so that a later save can name this one as its `base`. With `base`, the path of
a committed checkpoint beside `path` saved with `incremental = true`, the rows of each box whose blocks all hash as
the base's are not written: the new checkpoint refers to the base's bytes, and needs it (a load after it was deleted
throws CKPT_E_CORRUPT naming it). Storage tier only (CKPT_E_INVALID_ARGUMENT); a `base` without
`incremental = true` is refused the same way, and CKPT_E_NOT_FOUND says the base holds no checkpoint.

With `compress = true` (`CKPT_SAVE_COMPRESS`) everything the save writes is stored losslessly compressed: each block
of 1 MiB on its own, in the I/O workers, so that ranged and resharded loads decode only the blocks they read;
floating-point arrays with their bytes grouped by significance, then zstd (BF16 weights shrink by about 1.5x). Worth
it on storage slower than about a GiB/s per I/O worker. The checkpoint is format 3
(`Ckpt.checkpoint_info(reader).format_major`). Refused (CKPT_E_INVALID_ARGUMENT) with `in_place = true`, a memory
tier or on object storage. One array alone: [`add_tensor!`](@ref)'s `compress`.
"""
function save(ctx::Context, state::State, path::AbstractString; metadata = (), tier::Integer = CKPT_TIER_STORAGE,
              in_place::Bool = false, copy_on_write::Bool = false, check_replicas::Bool = false,
              incremental::Bool = false, base::Union{Nothing,AbstractString} = nothing, compress::Bool = false)
    target = c_string(path)
    return start_save(ctx, state, metadata, tier, in_place; copy_on_write, check_replicas, incremental, base,
                      compress) do options, out, err
        LibCkpt.ckpt_save(ctx, state, target, options, out, err)
    end
end

"""
Calls `start(options, out, err)`, a C call that starts a save of `state`, with the save options holding `metadata`,
`tier`, the `in_place`, `copy_on_write`, `check_replicas`, `incremental` and `compress` flags and the incremental
save's `base`, and returns the request it stored in `out`.
"""
function start_save(start, ctx::Context, state::State, metadata, tier::Integer, in_place::Bool;
                    copy_on_write::Bool = false, check_replicas::Bool = false, incremental::Bool = false,
                    compress::Bool = false, base::Union{Nothing,AbstractString} = nothing,
                    metrics::Union{Nothing,AbstractString} = nothing, best_value::Union{Nothing,Real} = nothing)
    metadata_keys = String[c_string(k) for (k, _) in metadata]
    metadata_values = String[c_string(v) for (_, v) in metadata]
    key_pointers = Ptr{Cchar}[chars(k) for k in metadata_keys]
    value_pointers = Ptr{Cchar}[chars(v) for v in metadata_values]
    metrics_text = metrics === nothing ? nothing : c_string(metrics)
    base_path = base === nothing ? nothing : c_string(base)
    handle = GC.@preserve metadata_keys metadata_values key_pointers value_pointers metrics_text base_path state begin
        options = Ref(LibCkpt.ckpt_save_options(sizeof(LibCkpt.ckpt_save_options), length(metadata_keys),
                                                pointer(key_pointers), pointer(value_pointers), C_NULL, C_NULL,
                                                tier, (in_place ? LibCkpt.CKPT_SAVE_IN_PLACE : UInt64(0)) |
                                                      (copy_on_write ? LibCkpt.CKPT_SAVE_COPY_ON_WRITE : UInt64(0)) |
                                                      (check_replicas ? LibCkpt.CKPT_SAVE_CHECK_REPLICAS : UInt64(0)) |
                                                      (incremental ? LibCkpt.CKPT_SAVE_INCREMENTAL : UInt64(0)) |
                                                      (compress ? LibCkpt.CKPT_SAVE_COMPRESS : UInt64(0)),
                                                metrics_text === nothing ? LibCkpt.NULL_CHARS : chars(metrics_text),
                                                best_value === nothing ? 0.0 : Float64(best_value),
                                                best_value === nothing ? 0 : 1, chars(base_path)))
        create_handle() do out, err
            start(options, out, err)
        end
    end
    return SaveRequest(handle, ctx, copy_on_write ? state : nothing)
end

"""
    isdone(request::SaveRequest) -> Bool

`true` if the save finished successfully, `false` while it is still running; throws CkptError with the status that
failed it (the same on every rank). Never blocks.
"""
function isdone(request::SaveRequest)
    status = checked((CKPT_OK, CKPT_E_IN_PROGRESS)) do err
        LibCkpt.ckpt_request_test(request, err)
    end
    return status == CKPT_OK
end

"""
    wait(request::SaveRequest; timeout_ms=0) -> Bool

Blocks this thread until the save finishes (`true`) or `timeout_ms` passes with it still running (`false`; 0 means
no limit beyond the context's timeout). Throws CkptError if the save failed. To keep other tasks of this thread
running, poll [`isdone`](@ref) instead.
"""
function Base.wait(request::SaveRequest; timeout_ms::Integer = 0)
    status = checked((CKPT_OK, CKPT_E_IN_PROGRESS)) do err
        LibCkpt.ckpt_request_wait(request, timeout_ms, err)
    end
    return status == CKPT_OK
end

"""What a save has done on this rank, as [`Ckpt.stats`](@ref) reports it for a request. The phases follow one
another: planning and staging (together `blocking_ns`, what `Ckpt.save` cost the caller), writing (until this
rank's data is durable), committing; `total_ns` spans them all. A phase still running counts until now.
`bytes_written / total_ns` is this rank's throughput in GB/s."""
struct RequestStats
    committed::Bool
    state_bytes::Int     # tensor and object bytes this rank registered, replicas included
    bytes_to_write::Int  # this rank's share of the unique bytes
    bytes_staged::Int
    bytes_written::Int
    bytes_committed::Int # bytes_written once committed, else 0
    files_written::Int
    planning_ns::Int
    staging_ns::Int
    blocking_ns::Int
    writing_ns::Int
    committing_ns::Int
    total_ns::Int
end

"""
    Ckpt.stats(request::SaveRequest) -> RequestStats

What the save has done on this rank: a snapshot while it runs, final once it finished. Never blocks.
"""
function stats(request::SaveRequest)
    raw = Ref(LibCkpt.ckpt_request_stats())
    checked() do err
        LibCkpt.ckpt_request_stats_get(request, raw, err)
    end
    s = raw[]
    return RequestStats(s.committed != 0, s.state_bytes, s.bytes_to_write, s.bytes_staged, s.bytes_written,
                        s.bytes_committed, s.files_written, s.planning_ns, s.staging_ns, s.blocking_ns,
                        s.writing_ns, s.committing_ns, s.total_ns)
end

"""
    load!(ctx, state, path; missing_keys=CKPT_STRICT_FAIL, unexpected_keys=CKPT_STRICT_LOG) -> state

Collective: fills every array registered in `state` from the checkpoint at `path`, whatever layout and number of
ranks saved it. `missing_keys` (keys this rank asks for that the checkpoint lacks) and `unexpected_keys` (keys of
the checkpoint no rank asks for) are each `CKPT_STRICT_FAIL`, `CKPT_STRICT_LOG` or `CKPT_STRICT_IGNORE`. On failure
(a CkptError), arrays may be partly filled.
"""
function load!(ctx::Context, state::State, path::AbstractString; missing_keys::Integer = CKPT_STRICT_FAIL,
               unexpected_keys::Integer = CKPT_STRICT_LOG)
    source = c_string(path)
    options = load_options(missing_keys, unexpected_keys)
    GC.@preserve source state begin
        checked() do err
            LibCkpt.ckpt_load(ctx, state, source, options, err)
        end
    end
    return state
end

load_options(missing_keys::Integer, unexpected_keys::Integer) =
    Ref(LibCkpt.ckpt_load_options(sizeof(LibCkpt.ckpt_load_options), missing_keys, unexpected_keys, C_NULL, C_NULL,
                                  C_NULL, 0))

# Manager: a root directory of numbered steps, with a latest pointer and retention.

"""
    Manager(ctx, root; keep_last=0, keep_every=0, keep_best=0, best_mode=CKPT_BEST_MAX, keep_for=0,
            memory_tier=false, storage_every=0)
    Manager(f, ctx, root; ...)

Collective: opens `root` (creating it) as a directory of steps, `root/step-<12 digits>`; rank 0 first removes the
uncommitted step directories that crashed runs left behind. Once a save through the manager commits, rank 0 moves
the latest pointer to it and, on a thread of its own, removes the steps that retention no longer keeps. A step is
kept if any rule keeps it: the newest `keep_last`; every step divisible by `keep_every` (Orbax's keep_period); the
`keep_best` steps of best `best_value` (see [`Ckpt.save`](@ref)) by `best_mode` (`CKPT_BEST_MAX` or
`CKPT_BEST_MIN`); those committed within the last `keep_for` seconds. With none of keep_last, keep_best and
keep_for (0: no such rule), every step is kept; the newest step always is. The second form calls `f(manager)` and
closes the manager afterwards.

With `memory_tier`, every step goes to the node's memory tier (`CKPT_TIER_MEMORY`, see [`Ckpt.save`](@ref)), and
the steps divisible by `storage_every` to storage as well (`CKPT_TIER_BOTH`, written there by the agent in the
background; 0: a step reaches storage only when the trainers die). [`load_latest!`](@ref) resumes from the newest
step of either tier. The job needs an identity: `CKPT_JOB_ID`.

`close` waits for the manager's saves in flight, then frees it; closing its context closes it too.
"""
mutable struct Manager <: Handle
    handle::Ptr{Cvoid}
    context::Context
    Manager(handle::Ptr{Cvoid}, context::Context) = with_finalizer(new(handle, context))
end

function Manager(ctx::Context, root::AbstractString; keep_last::Integer = 0, keep_every::Integer = 0,
                 keep_best::Integer = 0, best_mode::Integer = CKPT_BEST_MAX, keep_for::Real = 0,
                 memory_tier::Bool = false, storage_every::Integer = 0)
    storage_every == 0 || memory_tier ||
        throw(ArgumentError("storage_every applies to the memory tier: pass memory_tier = true with it"))
    keep_for >= 0 || throw(ArgumentError("keep_for must be a number of seconds, not $keep_for"))
    directory = c_string(root)
    options = Ref(LibCkpt.ckpt_manager_options(sizeof(LibCkpt.ckpt_manager_options), keep_last, keep_every,
                                               memory_tier, storage_every, keep_best, best_mode,
                                               ceil(UInt64, keep_for)))
    handle = GC.@preserve directory begin
        create_handle() do out, err
            LibCkpt.ckpt_manager_open(ctx, directory, options, out, err)
        end
    end
    manager = Manager(handle, ctx)
    filter!(ref -> ref.value !== nothing && isopen(ref.value), ctx.managers)
    push!(ctx.managers, WeakRef(manager))
    return manager
end

function Manager(f::Function, ctx::Context, root::AbstractString; kwargs...)
    manager = Manager(ctx, root; kwargs...)
    try
        return f(manager)
    finally
        close(manager)
    end
end

release(manager::Manager) = LibCkpt.ckpt_manager_free(manager.handle)

"""
    Ckpt.save(manager, state, step; metadata=(), tier=CKPT_TIER_STORAGE, in_place=false, copy_on_write=false,
              check_replicas=false, incremental=false, base=nothing, compress=false, metrics=nothing,
              best_value=nothing)
        -> SaveRequest

Collective: saves `state` as step `step`, as `Ckpt.save(ctx, state, path)` does: returns once the arrays are
staged. The step becomes the latest only if the request succeeds; a failed save leaves the latest pointer and the
kept steps untouched. `tier` overrides the manager's memory tier policy for this step when it is
`CKPT_TIER_MEMORY` or `CKPT_TIER_BOTH`; `CKPT_TIER_STORAGE` follows it. `in_place` is as for a save to a path:
the arrays are written with no staging copy, and `save` returns once they are durable; so is `copy_on_write`: `save`
returns once the arrays are write-protected; so is `check_replicas`: the ranks holding replicas of a box compare
their copies' block checksums before the step commits, and a difference fails the save (CKPT_E_CORRUPT) naming the
tensor, box, blocks and ranks; so is `incremental`: the step records its blocks' digests and writes only the rows
that changed since `base`, by default the latest committed step (a `step_path` of this root otherwise), and
retention keeps every step a kept step refers to; so is `compress`: the step's blocks are stored losslessly
compressed, a format 3 checkpoint. `metrics`, the text of a JSON object (at most 1 MiB), is stored with the step
([`Ckpt.metrics`](@ref) reads it back); `best_value` is the step's score for keep_best; rank 0's are stored.
"""
function save(manager::Manager, state::State, step::Integer; metadata = (), tier::Integer = CKPT_TIER_STORAGE,
              in_place::Bool = false, copy_on_write::Bool = false, check_replicas::Bool = false,
              incremental::Bool = false, base::Union{Nothing,AbstractString} = nothing, compress::Bool = false,
              metrics::Union{Nothing,AbstractString} = nothing, best_value::Union{Nothing,Real} = nothing)
    return start_save(manager.context, state, metadata, tier, in_place; copy_on_write, check_replicas, incremental,
                      base, compress, metrics, best_value) do options, out, err
        LibCkpt.ckpt_manager_save(manager, state, step, options, out, err)
    end
end

"""
    wait(manager::Manager)

Waits for the manager's saves in flight and, on rank 0, for the removals of old steps their commits asked for,
which otherwise go on in the background. Not collective.
"""
function Base.wait(manager::Manager)
    checked() do err
        LibCkpt.ckpt_manager_wait(manager, err)
    end
    return nothing
end

"""
    Ckpt.metrics(manager, step) -> Union{String,Nothing}

The metrics saved with `step` (`Ckpt.save(manager, ...; metrics)`), the text of a JSON object; `nothing` if the
step was saved without any or is not committed. Not collective.
"""
function metrics(manager::Manager, step::Integer)
    text_length = Ref{UInt64}(0)
    status = checked((CKPT_OK, CKPT_E_NOT_FOUND)) do err
        LibCkpt.ckpt_manager_metrics(manager, step, LibCkpt.NULL_CHARS, 0, text_length, err)
    end
    status == CKPT_OK || return nothing
    buffer = zeros(UInt8, text_length[] + 1)
    GC.@preserve buffer begin
        checked() do err
            LibCkpt.ckpt_manager_metrics(manager, step, pointer(buffer), UInt64(sizeof(buffer)), text_length, err)
        end
    end
    return String(buffer[1:text_length[]])
end

"""
    Ckpt.latest(manager) -> Union{Int,Nothing}

The newest committed step, or `nothing` if there is none yet. Not collective.
"""
function latest(manager::Manager)
    step = Ref{UInt64}(0)
    status = checked((CKPT_OK, CKPT_E_NOT_FOUND)) do err
        LibCkpt.ckpt_manager_latest(manager, step, err)
    end
    return status == CKPT_OK ? Int(step[]) : nothing
end

"""
    Ckpt.steps(manager) -> Vector{Int}

Every committed step under the manager's root, ascending. Not collective.
"""
function steps(manager::Manager)
    count = Ref{UInt64}(0)
    checked() do err
        LibCkpt.ckpt_manager_steps(manager, Ptr{UInt64}(C_NULL), 0, count, err)
    end
    while true
        found = zeros(UInt64, count[])
        capacity = count[]
        GC.@preserve found begin
            checked() do err
                LibCkpt.ckpt_manager_steps(manager, pointer(found), capacity, count, err)
            end
        end
        count[] <= capacity && return Int.(found[1:count[]])
    end
end

"""
    Ckpt.resume_step(manager) -> Union{Int,Nothing}

Collective: the step [`load_latest!`](@ref) would load, the same on every rank, without loading it: the latest on
storage (as rank 0 sees it), or the newest step the job's node agents hold in memory when it is at least as new,
which [`Ckpt.latest`](@ref) does not see; `nothing` on every rank if there is none (a fresh start).
"""
function resume_step(manager::Manager)
    step = Ref{UInt64}(0)
    status = checked((CKPT_OK, CKPT_E_NOT_FOUND)) do err
        LibCkpt.ckpt_manager_resume_step(manager, step, err)
    end
    return status == CKPT_OK ? Int(step[]) : nothing
end

"""
    load_latest!(manager, state; missing_keys=CKPT_STRICT_FAIL, unexpected_keys=CKPT_STRICT_LOG) -> Union{Int,Nothing}

Collective: loads the latest step (as rank 0 sees it) into `state`, as [`load!`](@ref) does, and returns it; returns
`nothing` on every rank if there is no committed step yet (a fresh start). The newest step the node's agent holds in
memory counts too, and is read from memory when it is at least as new as the latest on storage.
"""
function load_latest!(manager::Manager, state::State; missing_keys::Integer = CKPT_STRICT_FAIL,
                      unexpected_keys::Integer = CKPT_STRICT_LOG)
    options = load_options(missing_keys, unexpected_keys)
    step = Ref{UInt64}(0)
    status = GC.@preserve state begin
        checked((CKPT_OK, CKPT_E_NOT_FOUND)) do err
            LibCkpt.ckpt_manager_load_latest(manager, state, options, step, err)
        end
    end
    return status == CKPT_OK ? Int(step[]) : nothing
end

# The first buffer size tried for a step's path, and the largest: a longer path is refused.
const STEP_PATH_FIRST_BUFFER = 256
const STEP_PATH_MAX_BUFFER = 1 << 20

"""
    Ckpt.step_path(manager, step) -> String

The directory of step `step`, whether or not it exists.
"""
function step_path(manager::Manager, step::Integer)
    size = STEP_PATH_FIRST_BUFFER
    while true
        buffer = zeros(Cchar, size)
        # The only argument that can be wrong is the buffer's size: below the limit, retry with a larger one.
        accepted = size < STEP_PATH_MAX_BUFFER ? (CKPT_OK, CKPT_E_INVALID_ARGUMENT) : (CKPT_OK,)
        status = checked(accepted) do err
            LibCkpt.ckpt_manager_step_path(manager, step, buffer, size, err)
        end
        status == CKPT_OK && return GC.@preserve buffer unsafe_string(pointer(buffer))
        size *= 2
    end
end

# State: what this rank holds (for a save) or wants (for a load).

"""
    State()

What this rank holds (for a save) or wants (for a load): tensor shards, objects and common bytes. The library keeps
raw pointers to the registered arrays, so the state keeps a reference to each of them: they stay alive as long as
the state does. Do not resize a registered array.
"""
mutable struct State <: Handle
    handle::Ptr{Cvoid}
    roots::Vector{Any}
    State(handle::Ptr{Cvoid}) = with_finalizer(new(handle, Any[]))
end

State() = State(create_handle(LibCkpt.ckpt_state_create))

release(state::State) = LibCkpt.ckpt_state_free(state.handle)

"""Where a shard sits in its tensor, in Julia order; `flat_range` is set for a flattened shard."""
struct ShardLayout
    local_shape::Tuple
    global_shape::Any
    global_offset::Any
    replica_id::Any
    allow_shape_mismatch::Bool
    compress::Bool
    flat_range::Union{Nothing,AbstractUnitRange}
end

function shard_flags(layout::ShardLayout)
    flags = layout.flat_range === nothing ? UInt32(0) : CKPT_SHARD_FLATTENED
    flags = layout.allow_shape_mismatch ? flags | CKPT_SHARD_ALLOW_SHAPE_MISMATCH : flags
    return layout.compress ? flags | CKPT_SHARD_COMPRESS : flags
end

# The flattened range as the C API counts it: [start, end) in zero-based elements of the box.
flat_bounds(range::AbstractUnitRange) = (UInt64(first(range) - 1), UInt64(last(range)))
flat_bounds(::Nothing) = (UInt64(0), UInt64(0))

"""
    add_tensor!(state, key, data::Array; global_shape=size(data), global_offset=zeros, replica_id=(),
                dtype=dtype_of(eltype(data)), allow_shape_mismatch=false, compress=false) -> state

Registers `data` as the box of tensor `key` starting at `global_offset` (zero-based, Julia order) of a tensor of
`global_shape` (Julia order); see the module documentation for the dimension order. For a save, `replica_id` tells
apart the ranks holding the same box (all zeros: the main replica, which is the one written). For a load,
`allow_shape_mismatch` accepts a checkpoint whose global shape differs (missing elements are zeroed). For a save,
`compress` (`CKPT_SHARD_COMPRESS`) stores this tensor's bytes compressed, as `Ckpt.save(...; compress = true)` stores
every tensor's, in any staged save to a file system (a save in place, to a memory tier or to object storage stores
them as they are); the rank that writes a box decides by its own shard's flag.
"""
function add_tensor!(state::State, key::AbstractString, data::Array{T,N}; global_shape = size(data),
                     global_offset = ntuple(_ -> 0, N), replica_id = (), dtype::Integer = dtype_of(T),
                     allow_shape_mismatch::Bool = false, compress::Bool = false) where {T,N}
    layout = ShardLayout(size(data), global_shape, global_offset, replica_id, allow_shape_mismatch, compress, nothing)
    return register_tensor!(state, key, data, Int32(dtype), layout)
end

"""
    add_flattened_tensor!(state, key, data::Vector, box_shape, range; global_shape=box_shape, global_offset=zeros,
                          replica_id=(), dtype=dtype_of(eltype(data)), allow_shape_mismatch=false,
                          compress=false) -> state

Registers the elements `range` (Julia linear indices, 1-based, inclusive) of the box `box_shape` at `global_offset`
of tensor `key`, as a distributed optimizer holds them: `data` holds just those `length(range)` elements. Julia's
column-major linear order of the box is exactly the row-major order of the reversed box libckpt sees.
"""
function add_flattened_tensor!(state::State, key::AbstractString, data::Vector{T}, box_shape, range::AbstractUnitRange;
                               global_shape = box_shape, global_offset = ntuple(_ -> 0, length(box_shape)),
                               replica_id = (), dtype::Integer = dtype_of(T),
                               allow_shape_mismatch::Bool = false, compress::Bool = false) where {T}
    length(data) == length(range) || throw(ArgumentError(
        "tensor '$key': data holds $(length(data)) elements but the range $range has $(length(range))"))
    first(range) >= 1 || throw(ArgumentError("tensor '$key': the range $range starts before element 1"))
    layout = ShardLayout(Tuple(box_shape), global_shape, global_offset, replica_id, allow_shape_mismatch, compress,
                         range)
    return register_tensor!(state, key, data, Int32(dtype), layout)
end

function register_tensor!(state::State, key::AbstractString, data::Array{T}, dtype::Int32,
                          layout::ShardLayout) where {T}
    name = c_string(key)
    ndim = length(layout.local_shape)
    ndim <= CKPT_MAX_NDIM || throw(ArgumentError("tensor '$name' has $ndim dimensions; at most $CKPT_MAX_NDIM"))
    check_element_type(T, dtype, "tensor '$name'")
    local_dims = c_dims(layout.local_shape, ndim, "tensor '$name': local shape")
    global_dims = c_dims(layout.global_shape, ndim, "tensor '$name': global_shape")
    offset_dims = c_dims(layout.global_offset, ndim, "tensor '$name': global_offset")
    replica = UInt32[r for r in layout.replica_id]
    flat_start, flat_end = flat_bounds(layout.flat_range)
    GC.@preserve name data local_dims global_dims offset_dims replica begin
        shard = Ref(LibCkpt.ckpt_tensor_shard(
            sizeof(LibCkpt.ckpt_tensor_shard), chars(name), dtype, ndim, pointer(global_dims), pointer(local_dims),
            pointer(offset_dims), length(replica), isempty(replica) ? Ptr{UInt32}(C_NULL) : pointer(replica),
            shard_flags(layout), flat_start, flat_end, LibCkpt.CKPT_MEMORY_HOST, 0, Ptr{Cvoid}(pointer(data)),
            sizeof(data)))
        checked() do err
            LibCkpt.ckpt_state_add_tensor(state, shard, err)
        end
    end
    push!(state.roots, data)
    return state
end

"""
    add_object!(state, key, data; grid_shape=(), grid_index=()) -> state

Registers opaque bytes sharded over an object grid (zero-based `grid_index` in `grid_shape`, passed unchanged). For
a save, `data` holds the bytes (read at save time, not now). For a load, `data` is a buffer of exactly the saved
size, or `nothing` to have the state keep the bytes (read them with [`Ckpt.object`](@ref)).
"""
function add_object!(state::State, key::AbstractString, data::Union{Vector{UInt8},Nothing};
                     grid_shape = (), grid_index = ())
    name = c_string(key)
    length(grid_index) == length(grid_shape) || throw(ArgumentError(
        "object '$name': grid_index has $(length(grid_index)) entries but grid_shape has $(length(grid_shape))"))
    shape = UInt64[d for d in grid_shape]
    index = UInt64[i for i in grid_index]
    GC.@preserve name data shape index begin
        bytes = data === nothing ? C_NULL : Ptr{Cvoid}(pointer(data))
        byte_count = data === nothing ? 0 : length(data)
        checked() do err
            LibCkpt.ckpt_state_add_object(state, name, length(shape), grid_pointer(shape), grid_pointer(index), bytes,
                                          byte_count, err)
        end
    end
    data === nothing || push!(state.roots, data)
    return state
end

grid_pointer(dims::Vector{UInt64}) = isempty(dims) ? Ptr{UInt64}(C_NULL) : pointer(dims)

"""
    add_common!(state, key, data::Union{Vector{UInt8},String}) -> state

Registers replicated bytes (config, step, RNG state), copied now. Saved once, from rank 0; every load gives every
rank all the common entries of the checkpoint (read them with [`Ckpt.common`](@ref)).
"""
function add_common!(state::State, key::AbstractString, data::Union{Vector{UInt8},String})
    name = c_string(key)
    GC.@preserve name data begin
        checked() do err
            LibCkpt.ckpt_state_add_common(state, name, Ptr{Cvoid}(pointer(data)), sizeof(data), err)
        end
    end
    return state
end

"""
    Ckpt.common(state, key) -> Vector{UInt8}

After a load: a copy of the common bytes stored under `key`. Throws CkptError(CKPT_E_NOT_FOUND) if absent.
"""
function common(state::State, key::AbstractString)
    name = c_string(key)
    data = Ref{Ptr{Cvoid}}(C_NULL)
    byte_count = Ref{UInt64}(0)
    GC.@preserve name begin
        checked() do err
            LibCkpt.ckpt_state_common(state, name, data, byte_count, err)
        end
    end
    return copy_bytes(data[], byte_count[])
end

"""
    Ckpt.object(state, key; grid_index=()) -> Vector{UInt8}

After a load: a copy of the bytes of an object registered with `data = nothing`.
"""
function object(state::State, key::AbstractString; grid_index = ())
    name = c_string(key)
    index = UInt64[i for i in grid_index]
    data = Ref{Ptr{Cvoid}}(C_NULL)
    byte_count = Ref{UInt64}(0)
    GC.@preserve name index begin
        checked() do err
            LibCkpt.ckpt_state_object(state, name, grid_pointer(index), data, byte_count, err)
        end
    end
    return copy_bytes(data[], byte_count[])
end

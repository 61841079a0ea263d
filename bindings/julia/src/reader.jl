# Reader: any process, no collective. Shapes and offsets it returns are in Julia order (reversed).

"""
    Reader(path)
    Reader(f, path)

Opens the committed checkpoint at `path` and validates its manifest (CkptError: CKPT_E_NOT_FOUND, CKPT_E_CORRUPT,
CKPT_E_VERSION). The second form calls `f(reader)` and closes the reader afterwards.
"""
mutable struct Reader <: Handle
    handle::Ptr{Cvoid}
    path::String
    Reader(handle::Ptr{Cvoid}, path::String) = with_finalizer(new(handle, path))
end

function Reader(path::AbstractString)
    source = c_string(path)
    handle = GC.@preserve source begin
        create_handle() do out, err
            LibCkpt.ckpt_reader_open(source, out, err)
        end
    end
    return Reader(handle, source)
end

function Reader(f::Function, path::AbstractString)
    reader = Reader(path)
    try
        return f(reader)
    finally
        close(reader)
    end
end

release(reader::Reader) = LibCkpt.ckpt_reader_free(reader.handle)

"""What a checkpoint holds, as `Ckpt.checkpoint_info` reports it."""
struct CheckpointInfo
    format_major::Int
    format_minor::Int
    world_size::Int
    node_count::Int
    tensor_count::Int
    object_count::Int
    common_count::Int
    metadata_count::Int
    file_count::Int
    total_bytes::Int
end

"""A tensor of a checkpoint: `shape` in Julia order."""
struct TensorInfo
    key::String
    dtype::Int32
    shape::Tuple{Vararg{Int}}
    chunk_count::Int
end

"""A stored box of a tensor: zero-based `offset` and `shape` in Julia order; `file` relative to the checkpoint."""
struct ChunkInfo
    offset::Tuple{Vararg{Int}}
    shape::Tuple{Vararg{Int}}
    file::String
    file_offset::Int
    byte_length::Int
end

"""
    Ckpt.checkpoint_info(reader) -> CheckpointInfo
"""
function checkpoint_info(reader::Reader)
    info = Ref(LibCkpt.ckpt_checkpoint_info())
    checked() do err
        LibCkpt.ckpt_reader_info(reader, info, err)
    end
    i = info[]
    return CheckpointInfo(i.format_major, i.format_minor, i.world_size, i.node_count, i.tensor_count, i.object_count,
                          i.common_count, i.metadata_count, i.file_count, i.total_bytes)
end

"""
    Ckpt.tensors(reader) -> Vector{TensorInfo}

Every tensor of the checkpoint, in key order.
"""
tensors(reader::Reader) = [tensor_at(reader, index) for index in 0:checkpoint_info(reader).tensor_count-1]

function tensor_at(reader::Reader, index::Integer)
    info = Ref(LibCkpt.ckpt_tensor_info())
    checked() do err
        LibCkpt.ckpt_reader_tensor(reader, index, info, err)
    end
    t = info[]
    return TensorInfo(unsafe_string(t.key), t.dtype, julia_dims(t.shape, t.ndim), t.chunk_count)
end

"""
    Ckpt.tensor_info(reader, key) -> TensorInfo

Throws CkptError(CKPT_E_NOT_FOUND) if the checkpoint has no tensor `key`.
"""
function tensor_info(reader::Reader, key::AbstractString)
    index = tensor_index(reader, key)
    return tensor_at(reader, index)
end

function tensor_index(reader::Reader, key::AbstractString)
    for index in 0:checkpoint_info(reader).tensor_count-1
        tensor_at(reader, index).key == key && return index
    end
    throw(CkptError(CKPT_E_NOT_FOUND, "tensor '$key' is not in the checkpoint $(reader.path)"))
end

"""
    Ckpt.chunks(reader, key) -> Vector{ChunkInfo}

The stored boxes of tensor `key`.
"""
function chunks(reader::Reader, key::AbstractString)
    index = tensor_index(reader, key)
    return [chunk_at(reader, index, chunk) for chunk in 0:tensor_at(reader, index).chunk_count-1]
end

function chunk_at(reader::Reader, tensor_index::Integer, chunk_index::Integer)
    info = Ref(LibCkpt.ckpt_chunk_info())
    checked() do err
        LibCkpt.ckpt_reader_chunk(reader, tensor_index, chunk_index, info, err)
    end
    c = info[]
    return ChunkInfo(julia_dims(c.offset, c.ndim), julia_dims(c.shape, c.ndim), unsafe_string(c.file), c.file_offset,
                     c.byte_length)
end

"""
    read(reader, key; offset=zeros, shape=the rest of the tensor, eltype=the dtype's Julia type) -> Array

Reads the box (`offset`, zero-based, and `shape`, both in Julia order) of tensor `key`, checking the checksum of
every block read. BF16 and F8 tensors need an `eltype` of the same size (`UInt16`, `UInt8`, ...).
"""
function Base.read(reader::Reader, key::AbstractString; offset = nothing, shape = nothing, eltype = nothing)
    tensor = tensor_info(reader, key)
    ndim = length(tensor.shape)
    start = offset === nothing ? ntuple(_ -> 0, ndim) : Tuple(offset)
    extent = shape === nothing ? tensor.shape .- start : Tuple(shape)
    T = eltype === nothing ? julia_type(tensor.dtype) : eltype
    T === nothing && throw(ArgumentError(
        "tensor '$key' is $(dtype_name(tensor.dtype)), which has no Julia type: pass eltype= of the same size"))
    buffer = Array{T}(undef, extent...)
    return read!(reader, key, buffer; offset = start)
end

"""
    read!(reader, key, dest::Array; offset=zeros) -> dest

Fills `dest` with the box of tensor `key` at `offset` (zero-based, Julia order) of the size of `dest`.
"""
function Base.read!(reader::Reader, key::AbstractString, dest::Array{T,N}; offset = ntuple(_ -> 0, N)) where {T,N}
    name = c_string(key)
    check_element_type(T, tensor_info(reader, name).dtype, "tensor '$name'")
    offset_dims = c_dims(offset, N, "offset")
    shape_dims = c_dims(size(dest), N, "shape")
    GC.@preserve name dest offset_dims shape_dims begin
        checked() do err
            LibCkpt.ckpt_reader_read(reader, name, N, offset_dims, shape_dims, Ptr{Cvoid}(pointer(dest)),
                                     sizeof(dest), err)
        end
    end
    return dest
end

"""
    Ckpt.common(reader, key) -> Vector{UInt8}

A copy of the common bytes stored under `key`; CkptError(CKPT_E_NOT_FOUND) if absent.
"""
function common(reader::Reader, key::AbstractString)
    name = c_string(key)
    data = Ref{Ptr{Cvoid}}(C_NULL)
    byte_count = Ref{UInt64}(0)
    GC.@preserve name begin
        checked() do err
            LibCkpt.ckpt_reader_common(reader, name, data, byte_count, err)
        end
    end
    return copy_bytes(data[], byte_count[])
end

"""
    Ckpt.common_entries(reader) -> Vector{Pair{String,Vector{UInt8}}}

Every common entry of the checkpoint, in key order.
"""
function common_entries(reader::Reader)
    return [common_at(reader, index) for index in 0:checkpoint_info(reader).common_count-1]
end

function common_at(reader::Reader, index::Integer)
    key = Ref{Ptr{Cchar}}(C_NULL)
    data = Ref{Ptr{Cvoid}}(C_NULL)
    byte_count = Ref{UInt64}(0)
    checked() do err
        LibCkpt.ckpt_reader_common_at(reader, index, key, data, byte_count, err)
    end
    return unsafe_string(key[]) => copy_bytes(data[], byte_count[])
end

"""
    Ckpt.metadata(reader, key) -> String

The user metadata value saved under `key`; CkptError(CKPT_E_NOT_FOUND) if absent.
"""
function metadata(reader::Reader, key::AbstractString)
    name = c_string(key)
    value = Ref{Ptr{Cchar}}(C_NULL)
    GC.@preserve name begin
        checked() do err
            LibCkpt.ckpt_reader_metadata(reader, name, value, err)
        end
    end
    return unsafe_string(value[])
end

"""
    Ckpt.metadata_entries(reader) -> Vector{Pair{String,String}}

Every user metadata entry of the checkpoint, in the order saved.
"""
function metadata_entries(reader::Reader)
    return [metadata_at(reader, index) for index in 0:checkpoint_info(reader).metadata_count-1]
end

function metadata_at(reader::Reader, index::Integer)
    key = Ref{Ptr{Cchar}}(C_NULL)
    value = Ref{Ptr{Cchar}}(C_NULL)
    checked() do err
        LibCkpt.ckpt_reader_metadata_at(reader, index, key, value, err)
    end
    return unsafe_string(key[]) => unsafe_string(value[])
end

"""
    Ckpt.verify(reader)

Reads every chunk of every tensor and object and checks every checksum and file size; throws
CkptError(CKPT_E_CORRUPT) naming the first tensor and file that fail.
"""
function verify(reader::Reader)
    checked() do err
        LibCkpt.ckpt_reader_verify(reader, err)
    end
    return nothing
end

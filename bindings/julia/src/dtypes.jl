# Element types: the Julia type of each ckpt dtype, and the conversions between Julia and C dimension order.

"""Julia element type => ckpt dtype. BF16 and the F8 dtypes have no Julia type in Base (see [`dtype_of`](@ref))."""
const DTYPE_OF_TYPE = Dict{DataType,Int32}(
    Bool => CKPT_DTYPE_BOOL, UInt8 => CKPT_DTYPE_U8, Int8 => CKPT_DTYPE_I8, Int16 => CKPT_DTYPE_I16,
    UInt16 => CKPT_DTYPE_U16, Int32 => CKPT_DTYPE_I32, UInt32 => CKPT_DTYPE_U32, Int64 => CKPT_DTYPE_I64,
    UInt64 => CKPT_DTYPE_U64, Float16 => CKPT_DTYPE_F16, Float32 => CKPT_DTYPE_F32, Float64 => CKPT_DTYPE_F64,
    ComplexF32 => CKPT_DTYPE_C64, ComplexF64 => CKPT_DTYPE_C128)

const TYPE_OF_DTYPE = Dict{Int32,DataType}(dtype => T for (T, dtype) in DTYPE_OF_TYPE)

"""
    dtype_of(T) -> Int32

The `CKPT_DTYPE_*` code of the Julia element type `T`. For BF16 and the F8 dtypes, which have no Julia type in
Base, register an array of a same-size type (`UInt16`, `UInt8`, or a package's BFloat16) and pass `dtype=`.
"""
function dtype_of(::Type{T}) where {T}
    dtype = get(DTYPE_OF_TYPE, T, nothing)
    dtype === nothing && throw(ArgumentError(
        "element type $T has no ckpt dtype; use one of $(join(sort(string.(keys(DTYPE_OF_TYPE))), ", ")) " *
        "or pass dtype= with an element type of the same size"))
    return dtype
end

"""The Julia element type of `dtype`, or `nothing` for a dtype without one (BF16, F8)."""
julia_type(dtype::Integer) = get(TYPE_OF_DTYPE, Int32(dtype), nothing)

"""Size in bytes of one element of `dtype`; 0 for an unknown dtype."""
dtype_size(dtype::Integer) = Int(LibCkpt.ckpt_dtype_size(dtype))

"""The name of `dtype` ("F32", "BF16", ...); "?" for an unknown dtype."""
dtype_name(dtype::Integer) = unsafe_string(LibCkpt.ckpt_dtype_name(dtype))

"""Checks that elements of `T` can hold `dtype`: the same size, and `T` is dtype's own Julia type when it has one."""
function check_element_type(::Type{T}, dtype::Int32, what::AbstractString) where {T}
    isbitstype(T) || throw(ArgumentError("$what: element type $T is not a plain bits type"))
    width = dtype_size(dtype)
    width == 0 && throw(ArgumentError("$what: unknown dtype $dtype"))
    sizeof(T) == width || throw(ArgumentError(
        "$what: element type $T has $(sizeof(T)) bytes but dtype $(dtype_name(dtype)) has $width"))
    native = julia_type(dtype)
    native === nothing || native === T || throw(ArgumentError(
        "$what: dtype $(dtype_name(dtype)) holds $native elements, not $T"))
    return nothing
end

"""
    c_dims(dims, ndim, what) -> Vector{UInt64}

`dims` (Julia order) reversed into C order. The vector has at least one slot, so that a scalar's (ndim 0) pointer is
never NULL; only its first `ndim` entries are meaningful.
"""
function c_dims(dims, ndim::Integer, what::AbstractString)
    length(dims) == ndim || throw(ArgumentError("$what has $(length(dims)) entries, expected $ndim"))
    buffer = zeros(UInt64, max(ndim, 1))
    for (i, d) in enumerate(dims)
        d >= 0 || throw(ArgumentError("$what has a negative entry: $(Tuple(dims))"))
        buffer[ndim + 1 - i] = d
    end
    return buffer
end

"""The first `ndim` entries of C-order `dims`, reversed into a Julia-order tuple of Ints."""
julia_dims(dims, ndim::Integer) = ntuple(i -> Int(dims[ndim + 1 - i]), Int(ndim))

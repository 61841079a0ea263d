# Errors: every libckpt status other than CKPT_OK becomes a CkptError carrying the library's message.

const STATUS_NAMES = Dict{Int32,String}(
    CKPT_OK => "CKPT_OK", CKPT_E_INVALID_ARGUMENT => "CKPT_E_INVALID_ARGUMENT", CKPT_E_NOT_FOUND => "CKPT_E_NOT_FOUND",
    CKPT_E_ALREADY_EXISTS => "CKPT_E_ALREADY_EXISTS", CKPT_E_MISMATCH => "CKPT_E_MISMATCH",
    CKPT_E_CORRUPT => "CKPT_E_CORRUPT", CKPT_E_VERSION => "CKPT_E_VERSION", CKPT_E_IO => "CKPT_E_IO",
    CKPT_E_NO_SPACE => "CKPT_E_NO_SPACE", CKPT_E_TIMEOUT => "CKPT_E_TIMEOUT", CKPT_E_PEER_FAILED => "CKPT_E_PEER_FAILED",
    CKPT_E_UNSUPPORTED => "CKPT_E_UNSUPPORTED", CKPT_E_NO_MEMORY => "CKPT_E_NO_MEMORY",
    CKPT_E_IN_PROGRESS => "CKPT_E_IN_PROGRESS", CKPT_E_INTERNAL => "CKPT_E_INTERNAL")

"""
    CkptError(status, message)

A libckpt call failed. `status` is the `CKPT_E_*` code it returned (compare it with the exported constants),
`message` names what is wrong (which key, rank, file or offset).
"""
struct CkptError <: Exception
    status::Int32
    message::String
end

function Base.showerror(io::IO, e::CkptError)
    print(io, "CkptError(", get(STATUS_NAMES, e.status, string(e.status)), "): ", e.message)
end

"""The library's constant description of a status code ("CKPT_E_CORRUPT: ...")."""
status_string(status::Integer) = unsafe_string(LibCkpt.ckpt_status_string(status))

"""
    checked(call, accepted = (CKPT_OK,)) -> status

Runs `call(err)` with a fresh ckpt error object and returns the status it returned; throws CkptError unless that
status is in `accepted`. One error object per call, not one per thread: Julia tasks migrate between threads.
"""
function checked(call, accepted = (CKPT_OK,))
    out = Ref{Ptr{Cvoid}}(C_NULL)
    created = LibCkpt.ckpt_error_create(out)
    created == CKPT_OK || throw(CkptError(created, "cannot allocate a ckpt error object"))
    err = out[]
    try
        status = call(err)
        status in accepted || throw(CkptError(status, error_message(err, status)))
        return status
    finally
        LibCkpt.ckpt_error_free(err)
    end
end

function error_message(err::Ptr{Cvoid}, status::Int32)
    message = unsafe_string(LibCkpt.ckpt_error_message(err))
    return isempty(message) ? status_string(status) : message
end

# Export to safetensors: any process, no context, no collective.

"""
    Ckpt.export_safetensors(checkpoint, out; max_shard_bytes=5_000_000_000, keys=(), part_index=0, part_count=1,
                            dtype=0)

Writes the tensors of the committed checkpoint at `checkpoint` to safetensors, each whole whatever chunks saved it.
An `out` ending in ".safetensors" is one file; otherwise it is a directory (created if needed) that receives
model.safetensors, or numbered files and model.safetensors.index.json once the data exceeds `max_shard_bytes` per
file (a larger tensor gets a file of its own; 0 puts everything in one file). `keys`: the tensors to export, every
one when empty. `part_index` of `part_count` shares the export among processes: each plans the same files and writes
those whose number is `part_index` modulo `part_count`, and part 0 the index. `dtype` (`CKPT_DTYPE_F16`, `_BF16`,
`_F32`, `_F64`) converts the floating tensors, rounding to nearest even; 0 keeps every tensor as stored.

Tensors keep the C dimension order, which safetensors shares: a Julia array of size `(a, b)` is exported with
shape `[b, a]`. Every file's header carries the checkpoint's user metadata; objects and common entries are left
out. Throws CkptError: CKPT_E_NOT_FOUND (no checkpoint, or a key it lacks), CKPT_E_ALREADY_EXISTS (a file is never
replaced), CKPT_E_CORRUPT (a checksum failed), CKPT_E_INVALID_ARGUMENT (a `dtype` that is not floating),
CKPT_E_UNSUPPORTED (a tensor whose dtype safetensors cannot name).

Not `Ckpt.export`, which `export`, a Julia keyword, cannot name.
"""
function export_safetensors(checkpoint::AbstractString, out::AbstractString;
                            max_shard_bytes::Integer = LibCkpt.ckpt_export_options().max_shard_bytes, keys = (),
                            part_index::Integer = 0, part_count::Integer = 1, dtype::Integer = 0)
    source = c_string(checkpoint)
    target = c_string(out)
    names = String[c_string(key) for key in keys]
    pointers = Ptr{Cchar}[chars(name) for name in names]
    GC.@preserve source target names pointers begin
        options = Ref(LibCkpt.ckpt_export_options(sizeof(LibCkpt.ckpt_export_options), max_shard_bytes,
                                                  pointer(pointers), length(pointers), part_index, part_count, dtype))
        checked() do err
            LibCkpt.ckpt_export(source, target, options, err)
        end
    end
    return nothing
end

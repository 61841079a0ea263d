"""One rank of a job started by ckpt-launch that carries a published model's safetensors weights through ckpt:

    safetensors_job.py import-rows MODEL DIR      (3 ranks) each rank loads its row block of every tensor straight
                                                  from the safetensors file MODEL (checked against the safetensors
                                                  package's reading) and saves them natively as DIR/native-3
    safetensors_job.py reshard-columns MODEL DIR  (2 ranks) restores column blocks of DIR/native-3 (checked against
                                                  MODEL) and saves them natively as DIR/native-2
    safetensors_job.py export-parts MODEL DIR     (any ranks) export DIR/native-2 to DIR/hf in 30 MB files, each rank
                                                  writing its share of the files
"""

import os
import sys

import numpy as np
from safetensors import safe_open

import ckpt


def split(length, parts, index):
    """The [start, stop) of block `index` when `length` is cut into `parts` near-equal blocks."""
    return length * index // parts, length * (index + 1) // parts


def block_box(shape, axis, parts, index):
    """(offset, extent) of block `index` along `axis` (scalars and tensors without that axis stay whole on block 0,
    empty elsewhere)."""
    if len(shape) <= axis:
        whole = index == 0
        return tuple(0 for _ in shape), tuple(n if whole else 0 for n in shape)
    start, stop = split(shape[axis], parts, index)
    offset = [0] * len(shape)
    extent = list(shape)
    offset[axis], extent[axis] = start, stop - start
    return tuple(offset), tuple(extent)


def import_rows(model, directory):
    ctx = ckpt.Context()
    with ckpt.Reader(model) as reader:
        tensors = reader.tensors
    target = {}
    for name, info in tensors.items():
        offset, extent = block_box(info.shape, 0, ctx.world_size, ctx.rank)
        target[name] = ckpt.Shard(np.zeros(extent, info.dtype), info.shape, offset)
    restored = ckpt.restore(model, target, context=ctx)
    with safe_open(model, framework="numpy") as weights:
        assert sorted(weights.keys()) == sorted(restored)
        for name, shard in restored.items():
            box = tuple(slice(o, o + e) for o, e in zip(shard.offset, shard.data.shape))
            assert np.array_equal(shard.data, weights.get_tensor(name)[box]), name
    ckpt.save(os.path.join(directory, "native-3"), restored, context=ctx,
              metadata={"source": "all-MiniLM-L6-v2"}).wait()
    print(f"rank {ctx.rank}: imported {len(restored)} tensors")


def reshard_columns(model, directory):
    ctx = ckpt.Context()
    target = {}
    with safe_open(model, framework="numpy") as weights:
        originals = {name: weights.get_tensor(name) for name in weights.keys()}
    for name, whole in originals.items():
        offset, extent = block_box(whole.shape, 1 if whole.ndim > 1 else 0, ctx.world_size, ctx.rank)
        target[name] = ckpt.Shard(np.zeros(extent, whole.dtype), whole.shape, offset)
    restored = ckpt.restore(os.path.join(directory, "native-3"), target, context=ctx)
    for name, shard in restored.items():
        box = tuple(slice(o, o + e) for o, e in zip(shard.offset, shard.data.shape))
        assert shard.data.dtype == originals[name].dtype, name
        assert np.array_equal(shard.data, originals[name][box]), name
    ckpt.save(os.path.join(directory, "native-2"), restored, context=ctx,
              metadata={"source": "all-MiniLM-L6-v2"}).wait()
    print(f"rank {ctx.rank}: resharded {len(restored)} tensors by columns")


def export_parts(model, directory):
    del model  # the export reads the ckpt checkpoint; the test compares the result with the model
    ctx = ckpt.Context()
    ckpt.export(os.path.join(directory, "native-2"), os.path.join(directory, "hf"), max_shard_size=30_000_000,
                part=(ctx.rank, ctx.world_size))
    print(f"rank {ctx.rank}: exported part {ctx.rank} of {ctx.world_size}")


def main(argv):
    command, model, directory = argv
    {"import-rows": import_rows, "reshard-columns": reshard_columns, "export-parts": export_parts}[command](
        model, directory)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

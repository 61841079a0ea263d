"""One rank of a job started by ckpt-launch that carries a published model's safetensors weights through ckpt:

    safetensors_job.py import-rows MODEL DIR      (3 ranks) each rank reads its row block of every tensor from the
                                                  safetensors file MODEL and saves them natively as DIR/native-3
    safetensors_job.py reshard-columns MODEL DIR  (2 ranks) restores column blocks of DIR/native-3 (checked against
                                                  MODEL) and saves them natively as DIR/native-2
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
    tree = {}
    with safe_open(model, framework="numpy") as weights:
        for name in weights.keys():
            whole = weights.get_tensor(name)
            offset, extent = block_box(whole.shape, 0, ctx.world_size, ctx.rank)
            box = tuple(slice(o, o + e) for o, e in zip(offset, extent))
            tree[name] = ckpt.Shard(np.ascontiguousarray(whole[box]), whole.shape, offset)
    ckpt.save(os.path.join(directory, "native-3"), tree, context=ctx,
              metadata={"source": "all-MiniLM-L6-v2"}).wait()
    print(f"rank {ctx.rank}: imported {len(tree)} tensors")


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


def main(argv):
    command, model, directory = argv
    {"import-rows": import_rows, "reshard-columns": reshard_columns}[command](model, directory)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

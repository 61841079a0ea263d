"""One rank of a job started by ckpt-launch that restores through a key map across a change of layout:

    key_map_job.py save DIR      (3 ranks) row blocks of Linen-style keys (params/Dense_<i>/kernel) and the step
    key_map_job.py restore DIR   (2 ranks) column blocks of NNX-style keys (model/layers/<i>/kernel) through a
                                 callable key map; a misspelt key refused on every rank, named with its lookup
"""

import os
import re
import sys

import numpy as np

import ckpt

SHAPE = (12, 6)


def expected(layer):
    return np.arange(SHAPE[0] * SHAPE[1], dtype=np.float32).reshape(SHAPE) + 1000 * layer


def block(ctx, axis):
    """This rank's (offset, extent) when SHAPE is cut into world_size equal blocks along `axis`."""
    size = SHAPE[axis] // ctx.world_size
    offset = tuple(ctx.rank * size if d == axis else 0 for d in range(2))
    extent = tuple(size if d == axis else n for d, n in enumerate(SHAPE))
    return offset, extent


def nnx_to_linen(key):
    return re.sub(r"^model/layers/(\d+)/", r"params/Dense_\1/", key)


def save(directory):
    ctx = ckpt.Context()
    assert ctx.world_size == 3, ctx
    offset, extent = block(ctx, axis=0)
    rows = tuple(slice(o, o + n) for o, n in zip(offset, extent))
    tree = {"params": {f"Dense_{i}": {"kernel": ckpt.Shard(expected(i)[rows].copy(), SHAPE, offset)}
                       for i in range(2)},
            "step": 30}
    ckpt.save(os.path.join(directory, "linen"), tree).wait()
    print(f"rank {ctx.rank}: saved rows")


def target(ctx):
    offset, extent = block(ctx, axis=1)
    return {"model": {"layers": [{"kernel": ckpt.Shard(np.zeros(extent, np.float32), SHAPE, offset)}
                                 for _ in range(2)]},
            "step": 0}


def restore(directory):
    ctx = ckpt.Context()
    assert ctx.world_size == 2, ctx
    path = os.path.join(directory, "linen")
    restored = ckpt.restore(path, target(ctx), key_map=nnx_to_linen)
    assert restored["step"] == 30
    for i, layer in enumerate(restored["model"]["layers"]):
        shard = layer["kernel"]
        columns = tuple(slice(o, o + n) for o, n in zip(shard.offset, shard.data.shape))
        assert np.array_equal(shard.data, expected(i)[columns]), f"layer {i}: block {columns} differs"
    try:
        ckpt.restore(path, target(ctx), key_map=lambda key: nnx_to_linen(key).replace("Dense_1", "Dense_2"))
    except ckpt.MismatchError as e:
        assert "'model/layers/1/kernel' (looked up as 'params/Dense_2/kernel')" in str(e), e
    else:
        raise AssertionError("a key the checkpoint lacks was not refused")
    print(f"rank {ctx.rank}: restored columns through the key map")


if __name__ == "__main__":
    {"save": save, "restore": restore}[sys.argv[1]](sys.argv[2])

"""The global numpy arrays the wheel checks save and restore, and each rank's block of them: the same values in
every process and every run, so a restore can be checked element by element without the saving processes."""

import zlib

import ml_dtypes
import numpy as np

import ckpt

SHAPES = {"layers/0/kernel": ((12, 10), np.float32), "layers/1/kernel": ((9, 7), ml_dtypes.bfloat16),
          "embedding": ((11, 3), np.int64)}
PYTHON_VALUES = {"step": 1200, "tag": "wheel"}


def expected(key):
    shape, dtype = SHAPES[key]
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    return np.asarray(rng.standard_normal(shape) * 100).astype(dtype)


def split(length, parts, index):
    """The [start, stop) of block `index` when `length` is cut into `parts` nearly equal blocks."""
    base, extra = divmod(length, parts)
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


def nested(flat):
    """{"layers/0/kernel": x, ...} as the nested tree whose ckpt keys are those paths."""
    return {"layers": [{"kernel": flat["layers/0/kernel"]}, {"kernel": flat["layers/1/kernel"]}],
            "embedding": flat["embedding"]}


def blocks(rank, world_size, axis, fill):
    """This rank's block along `axis` of every array, as ckpt.Shards holding fill(key, index)."""
    flat = {}
    for key, (shape, dtype) in SHAPES.items():
        start, stop = split(shape[axis], world_size, rank)
        index = tuple(slice(start, stop) if d == axis else slice(None) for d in range(len(shape)))
        offset = tuple(start if d == axis else 0 for d in range(len(shape)))
        flat[key] = ckpt.Shard(fill(key, index), shape, offset)
    return nested(flat)

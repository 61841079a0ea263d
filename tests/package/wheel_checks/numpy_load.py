"""One rank of a resharded numpy restore started by `ckpt-launch -n 3`: each rank restores the column block of every
array that DIR/numpy (saved by 2 ranks in rows) holds, and checks every element of it.   Usage: numpy_load.py DIR"""

import os
import sys

import numpy as np

import ckpt
from numpy_arrays import PYTHON_VALUES, SHAPES, blocks, expected

directory = sys.argv[1]
context = ckpt.Context()
assert context.world_size == 3, f"expected 3 ranks, got {context.world_size}"
target = dict(blocks(context.rank, context.world_size, axis=1,
                     fill=lambda key, index: np.zeros(expected(key)[index].shape, SHAPES[key][1])),
              step=0, tag="")
restored = ckpt.restore(os.path.join(directory, "numpy"), target)
assert {k: restored[k] for k in PYTHON_VALUES} == PYTHON_VALUES, {k: restored[k] for k in PYTHON_VALUES}
shards = {"layers/0/kernel": restored["layers"][0]["kernel"], "layers/1/kernel": restored["layers"][1]["kernel"],
          "embedding": restored["embedding"]}
elements = 0
for key, shard in shards.items():
    index = tuple(slice(o, o + n) for o, n in zip(shard.offset, shard.data.shape))
    want = expected(key)[index]
    assert shard.data.dtype == want.dtype, f"{key}: dtype {shard.data.dtype}, expected {want.dtype}"
    assert np.array_equal(shard.data, want), f"rank {context.rank}: {key} block {index} differs"
    elements += want.size
total = sum(expected(key).size for key in SHAPES)
print(f"rank {context.rank}/{context.world_size}: restored column blocks, {elements} of {total} elements equal")

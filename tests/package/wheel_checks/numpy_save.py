"""One rank of a numpy save started by `ckpt-launch -n 2`: each rank saves its row block of every array, and the
Python values, to DIR/numpy.   Usage: numpy_save.py DIR"""

import os
import sys

import ckpt
from numpy_arrays import PYTHON_VALUES, blocks, expected

directory = sys.argv[1]
context = ckpt.Context()  # ranks and the store's address from ckpt-launch's environment
assert context.world_size == 2, f"expected 2 ranks, got {context.world_size}"
tree = dict(blocks(context.rank, context.world_size, axis=0, fill=lambda key, index: expected(key)[index]),
            **PYTHON_VALUES)
assert ckpt.save(os.path.join(directory, "numpy"), tree, metadata={"saved_by": "wheel check"}).wait()
print(f"rank {context.rank}/{context.world_size}: saved row blocks")

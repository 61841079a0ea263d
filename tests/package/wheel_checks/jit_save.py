"""1 process with 4 CPU devices: three steps of one jitted function, each saving its state from inside jax.jit
through ckpt.jax.JitSaver (the XLA FFI handler library the wheel carries) to DIR/jit-N; the last one restored into
another layout and checked element by element.   Usage: jit_save.py DIR"""

import os
import sys

import jax

import ckpt
import ckpt.jax
from jax_arrays import check, expected, shardings, state, target

STEPS = 3
directory = sys.argv[1]
assert jax.device_count() == 4, jax.device_count()
layout = shardings("2x2")
saver = ckpt.jax.JitSaver(layout)


@jax.jit
def train_step(state, path):
    state = dict(state, count=state["count"] + 1)
    saver(path, state)
    return state


train_step = jax.jit(train_step, out_shardings=layout)
current = state("2x2")
for step in range(1, STEPS + 1):
    current = train_step(current, ckpt.jax.path_array(os.path.join(directory, f"jit-{step}")))
jax.block_until_ready(current)
assert saver.wait(), "the JitSaver's saves failed"
saver.close()
assert train_step._cache_size() == 1, "each path compiled anew: the path is not a runtime operand"

for step in range(1, STEPS + 1):  # one checkpoint per step, each with its own step's state
    with ckpt.Reader(os.path.join(directory, f"jit-{step}")) as reader:
        assert int(reader.read("count")) == int(expected("count")) + step, (step, reader.read("count"))
restored = ckpt.restore(os.path.join(directory, f"jit-{STEPS}"), target("model4"))
assert int(restored["count"]) == int(expected("count")) + STEPS, restored["count"]
restored["count"] = jax.device_put(expected("count"), shardings("model4")["count"])  # check() wants the saved value
print(f"jax.jit: {STEPS} steps saved through JitSaver, the last restored into model=4, "
      f"{check(restored, 'model4')} elements equal")

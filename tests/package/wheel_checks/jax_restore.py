"""1 process with 4 CPU devices restoring DIR/jax (saved by 2 processes on a data=2 x model=2 mesh) into a model=4
mesh, checking every element.   Usage: jax_restore.py DIR"""

import os
import sys

import jax

import ckpt
from jax_arrays import STEP, check, target

assert jax.process_count() == 1 and jax.device_count() == 4, (jax.process_count(), jax.device_count())
restored = ckpt.restore(os.path.join(sys.argv[1], "jax"), dict(target("model4"), step=0))
assert restored["step"] == STEP, restored["step"]
print(f"1 process: restored into model=4, {check(restored, 'model4')} elements equal")

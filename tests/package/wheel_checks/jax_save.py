"""One of 2 processes (started by jax_processes.py, 2 CPU devices each) saving a state sharded over a
data=2 x model=2 mesh to DIR/jax.   Usage: jax_save.py DIR"""

import os
import sys

import jax

import ckpt
from jax_arrays import STEP, join_job, state

join_job()
assert jax.process_count() == 2 and jax.device_count() == 4, (jax.process_count(), jax.device_count())
assert ckpt.save(os.path.join(sys.argv[1], "jax"), dict(state("2x2"), step=STEP)).wait()
print(f"process {jax.process_index()}/2: saved the data=2 x model=2 state")

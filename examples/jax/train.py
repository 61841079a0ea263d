"""A JAX training loop that checkpoints with ckpt and resumes where it stopped, on any number of processes and
devices: a run on 2 processes can be continued by 1, the state resharded on the way.

    python train.py /tmp/ckpt-run                              one process, all its devices
    JAX_COORDINATOR_ADDRESS=127.0.0.1:8476 NUM_PROCESSES=2 PROCESS_ID=0 python train.py /tmp/ckpt-run &
    JAX_COORDINATOR_ADDRESS=127.0.0.1:8476 NUM_PROCESSES=2 PROCESS_ID=1 python train.py /tmp/ckpt-run

On a machine without accelerators, XLA_FLAGS=--xla_force_host_platform_device_count=2 gives each process 2 CPU
devices.
"""
import os
import sys

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

import ckpt

processes = int(os.environ.get("NUM_PROCESSES", "1"))
if processes > 1:  # jax reads the coordinator's address from JAX_COORDINATOR_ADDRESS; ckpt needs nothing more
    jax.distributed.initialize(num_processes=processes, process_id=int(os.environ["PROCESS_ID"]))

mesh = jax.make_mesh((jax.device_count(),), ("model",))
by_columns = NamedSharding(mesh, P(None, "model"))  # split over every device of the job
replicated = NamedSharding(mesh, P())

# What restore fills: shapes, dtypes and shardings of this run, whatever layout wrote the checkpoint.
target = {"params": {"w": jax.ShapeDtypeStruct((16, 8), jnp.float32, sharding=by_columns),
                     "b": jax.ShapeDtypeStruct((8,), jnp.bfloat16, sharding=replicated)},
          "step": 0}


def fresh_state():
    w = jax.jit(lambda: jnp.arange(128, dtype=jnp.float32).reshape(16, 8), out_shardings=by_columns)()
    b = jax.jit(lambda: jnp.ones(8, jnp.bfloat16), out_shardings=replicated)()
    return {"params": {"w": w, "b": b}, "step": 0}


@jax.jit
def train_step(params):
    return jax.tree.map(lambda p: p * 0.5, params)


manager = ckpt.CheckpointManager(sys.argv[1], keep_last=2)  # every process calls it: it is collective
latest = manager.latest_step()
state = fresh_state() if latest is None else manager.restore(latest, target)
for step in range(state["step"] + 1, state["step"] + 4):
    state = {"params": train_step(state["params"]), "step": step}
    manager.save(step, state)  # returns once staged; the step commits in the background
manager.wait()  # every step committed
if jax.process_index() == 0:
    print(f"{processes} process(es), {jax.device_count()} devices: resumed from {latest}, now at step "
          f"{state['step']}; kept steps {manager.all_steps()}")

# A one-off export, and a restore into another sharding: ckpt.save and ckpt.restore are collective too.
export = os.path.join(sys.argv[1], f"export-{state['step']}")
ckpt.save(export, state).wait()
rows = NamedSharding(mesh, P("model"))
back = ckpt.restore(export, {"params": {"w": jax.ShapeDtypeStruct((16, 8), jnp.float32, sharding=rows),
                                        "b": jax.ShapeDtypeStruct((8,), jnp.bfloat16, sharding=rows)},
                             "step": 0})
assert back["step"] == state["step"] and back["params"]["w"].sharding == rows

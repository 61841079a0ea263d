"""The JAX state the wheel checks save and restore: global values that are the same in every process and run, and
the shardings of the two layouts (a data=2 x model=2 mesh over 2 processes, a model=4 mesh in 1 process)."""

import os
import zlib

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

SHAPES = {"w": ((16, 8), jnp.float32), "embed": ((8, 12), jnp.bfloat16), "bias": ((8,), jnp.float32),
          "count": ((), jnp.int32)}
SPECS = {"2x2": {"w": P("data", "model"), "embed": P("model", None), "bias": P(), "count": P()},
         "model4": {"w": P(None, "model"), "embed": P("model", None), "bias": P("model"), "count": P()}}
MESHES = {"2x2": ((2, 2), ("data", "model")), "model4": ((4,), ("model",))}
STEP = 77


def join_job():
    """Joins the job's jax.distributed when jax_processes.py started more than one process."""
    processes = int(os.environ.get("NUM_PROCESSES", "1"))
    if processes > 1:
        jax.distributed.initialize(num_processes=processes, process_id=int(os.environ["PROCESS_ID"]))


def expected(key):
    shape, dtype = SHAPES[key]
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    return (rng.standard_normal(shape) * 100).astype(np.float32).astype(dtype)


def shardings(layout):
    shape, names = MESHES[layout]
    mesh = jax.make_mesh(shape, names, devices=jax.devices())
    return {key: NamedSharding(mesh, spec) for key, spec in SPECS[layout].items()}


def state(layout):
    """The state as global arrays in `layout`, each process building only its own shards."""
    return {key: jax.make_array_from_callback(SHAPES[key][0], sharding, lambda index, key=key: expected(key)[index])
            for key, sharding in shardings(layout).items()}


def target(layout):
    return {key: jax.ShapeDtypeStruct(SHAPES[key][0], SHAPES[key][1], sharding=sharding)
            for key, sharding in shardings(layout).items()}


def check(restored, layout):
    """Checks the sharding and every element of each restored array (all addressable: one process). Returns the
    number of elements checked."""
    elements = 0
    for key, sharding in shardings(layout).items():
        array = restored[key]
        assert array.sharding == sharding, f"{key}: sharding {array.sharding}, expected {sharding}"
        assert array.dtype == np.dtype(SHAPES[key][1]), f"{key}: dtype {array.dtype}"
        want = expected(key)
        assert np.array_equal(np.asarray(array), want), f"{key}: values differ"
        for shard in array.addressable_shards:
            assert np.array_equal(np.asarray(shard.data), want[shard.index]), f"{key}: shard {shard.index} differs"
        elements += want.size
    return elements

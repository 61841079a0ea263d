"""One process of a multi-process JAX job (started by multiprocess.run) that saves or restores a small
transformer-like training state with ckpt and checks every element it holds.

    jax_job.py save DIR               mesh (data=2, model=2): embeddings, per-layer kernels sharded on different
                                      axes, replicated biases, Adam moments, a step counter, PRNG keys, Python values
    jax_job.py restore DIR LAYOUT     into LAYOUT: "model4" (mesh model=4) or "data4" (mesh data=4)
    jax_job.py jit-save DIR           three jitted training steps, each saving through ckpt.jax.JitSaver
    jax_job.py jit-restore DIR        restores the last of them on another mesh
    jax_job.py replicas DIR           arrays whose main replicas all sit on process 0 (replicated, or on its devices
                                      only): process 1 must neither hang nor fail
"""

import os
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from multiprocess import initialize_jax  # noqa: E402

PROCESS_ID, PROCESSES = initialize_jax()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import ckpt  # noqa: E402
import ckpt.jax  # noqa: E402

VOCAB, WIDTH, HIDDEN, LAYERS = 64, 32, 48, 2
KEYS = 4  # PRNG keys, one per data-parallel shard


def layer_shapes():
    return {"attention": {"qkv": ((WIDTH, 3 * WIDTH), jnp.float32), "out": ((WIDTH, WIDTH), jnp.float32)},
            "mlp": {"up": ((WIDTH, HIDDEN), jnp.bfloat16), "down": ((HIDDEN, WIDTH), jnp.bfloat16),
                    "bias": ((HIDDEN,), jnp.float32)},
            "norm": {"scale": ((WIDTH,), jnp.float32)}}


def param_shapes():
    return {"embed": ((VOCAB, WIDTH), jnp.bfloat16), "layers": [layer_shapes() for _ in range(LAYERS)],
            "head": ((WIDTH, VOCAB), jnp.float32)}


def state_shapes():
    """(shape, dtype) per array leaf; "rng" holds typed keys."""
    return {"params": param_shapes(),
            "opt_state": {"mu": param_shapes(), "nu": param_shapes(), "count": ((), jnp.int32)},
            "step": ((), jnp.int32), "rng": ((KEYS,), "key")}


def is_shape_leaf(x):
    return isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], tuple)


# Partition specs per layout, by the last component of a leaf's key.
SPECS = {
    "2x2": {"embed": P("model", "data"), "qkv": P(None, "model"), "out": P("model", None), "up": P("data", "model"),
            "down": P("model", "data"), "bias": P(), "scale": P(), "head": P("data", None), "count": P(),
            "step": P(), "rng": P("data")},
    "model4": {"embed": P("model", None), "qkv": P(None, "model"), "out": P(None, "model"), "up": P(None, "model"),
               "down": P(None, "model"), "bias": P("model"), "scale": P(), "head": P(None, "model"), "count": P(),
               "step": P(), "rng": P("model")},
    "data4": {"embed": P("data", None), "qkv": P("data", None), "out": P("data", None), "up": P("data", None),
              "down": P("data", None), "bias": P(), "scale": P("data"), "head": P("data", None), "count": P(),
              "step": P(), "rng": P()},
}
MESHES = {"2x2": ((2, 2), ("data", "model")), "model4": ((4,), ("model",)), "data4": ((4,), ("data",))}


def mesh_of(layout):
    shape, names = MESHES[layout]
    return jax.make_mesh(shape, names, devices=jax.devices())


def expected(key, shape, dtype):
    """The global value of leaf `key`: the same in every process and every run."""
    if dtype == "key":
        return np.asarray(jax.random.key_data(jax.random.split(jax.random.key(zlib.crc32(key.encode())), shape[0])))
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    if jnp.issubdtype(dtype, jnp.integer):
        return rng.integers(-1000, 1000, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def with_keys(tree):
    """[(key, leaf)] of a tree of (shape, dtype) pairs, with ckpt's keys."""
    leaves, _ = ckpt._tree.flatten(jax.tree.map(lambda x: np.zeros(()), tree, is_leaf=is_shape_leaf))
    values = jax.tree.leaves(tree, is_leaf=is_shape_leaf)
    return [(key, value) for (key, _), value in zip(leaves, values)]


def sharding_of(key, mesh, layout):
    return NamedSharding(mesh, SPECS[layout][key.rsplit("/", 1)[-1]])


def build_state(layout):
    mesh = mesh_of(layout)
    shapes = state_shapes()

    def make(item):
        key, (shape, dtype) = item
        sharding = sharding_of(key, mesh, layout)
        value = expected(key, shape, dtype)
        if dtype == "key":
            data = jax.make_array_from_callback(value.shape, NamedSharding(mesh, P(*sharding.spec, None)),
                                                lambda index: value[index])
            return jax.random.wrap_key_data(data)
        return jax.make_array_from_callback(shape, sharding, lambda index: value[index])

    made = [make(item) for item in with_keys(shapes)]
    return jax.tree.unflatten(jax.tree.structure(shapes, is_leaf=is_shape_leaf), made)


def target_state(layout):
    mesh = mesh_of(layout)
    shapes = state_shapes()
    key_dtype = jax.random.key(0).dtype

    def spec(item):
        key, (shape, dtype) = item
        return jax.ShapeDtypeStruct(shape, key_dtype if dtype == "key" else dtype,
                                    sharding=sharding_of(key, mesh, layout))

    made = [spec(item) for item in with_keys(shapes)]
    return jax.tree.unflatten(jax.tree.structure(shapes, is_leaf=is_shape_leaf), made)


def padded(spec, ndim):
    return tuple(spec) + (None,) * (ndim - len(spec))


def check_state(restored, layout, step_offset=0):
    """Checks every element this process holds, and that each array has the sharding asked for. Returns the
    number of elements checked."""
    mesh = mesh_of(layout)
    checked = 0
    restored_leaves = dict(ckpt._tree.flatten(restored)[0])
    for key, (shape, dtype) in with_keys(state_shapes()):
        array = restored_leaves[key]
        want = expected(key, shape, dtype)
        if key == "step":
            want = want + step_offset
        if dtype == "key":
            assert jax.dtypes.issubdtype(array.dtype, jax.dtypes.prng_key), f"{key}: {array.dtype} is not a key"
            array = jax.random.key_data(array)
        elif array.dtype != np.dtype(dtype):
            raise AssertionError(f"{key}: dtype {array.dtype}, expected {np.dtype(dtype)}")
        if array.shape != want.shape:
            raise AssertionError(f"{key}: shape {array.shape}, expected {want.shape}")
        spec = padded(sharding_of(key, mesh, layout).spec, array.ndim)
        if not isinstance(array.sharding, NamedSharding) or padded(array.sharding.spec, array.ndim) != spec:
            raise AssertionError(f"{key}: sharding {array.sharding}, expected {spec}")
        for shard in array.addressable_shards:
            got = np.asarray(shard.data)
            if got.tobytes() != np.ascontiguousarray(want[shard.index]).tobytes():
                raise AssertionError(f"{key}: block {shard.index} on {shard.device} differs")
            checked += got.size
    return checked


def save(directory):
    state = build_state("2x2")
    tree = dict(state, epoch=3, run="transformer-test")
    request = ckpt.save(os.path.join(directory, "checkpoint"), tree, metadata={"layout": "data=2, model=2"})
    assert isinstance(request, ckpt.Request)
    request.wait()
    print(f"process {PROCESS_ID}: saved {len(jax.tree.leaves(state))} arrays")


def restore(directory, layout):
    path = os.path.join(directory, "checkpoint")
    target = dict(target_state(layout), epoch=0, run="")
    restored = ckpt.restore(path, target)
    assert restored["epoch"] == 3 and restored["run"] == "transformer-test", (restored["epoch"], restored["run"])
    checked = check_state({k: v for k, v in restored.items() if k not in ("epoch", "run")}, layout)
    stats = ckpt.default_context().stats()
    print(f"process {PROCESS_ID}: restored into {layout}, {checked} elements checked, "
          f"read {stats['bytes_read']} B, received {stats['bytes_received']} B")


def jit_save(directory):
    state = build_state("2x2")
    saver = ckpt.jax.JitSaver(jax.tree.map(lambda x: x.sharding, state))

    def train_step(state, path):
        state = dict(state, step=state["step"] + 1)
        saver(path, state)
        return state

    shardings = jax.tree.map(lambda x: x.sharding, state)
    train_step = jax.jit(train_step, out_shardings=shardings)  # outputs laid out as inputs: one compilation
    for step in range(3):
        state = train_step(state, ckpt.jax.path_array(os.path.join(directory, f"step-{step}")))
    jax.block_until_ready(state)
    saver.wait()
    assert train_step._cache_size() == 1, f"the step compiled {train_step._cache_size()} times for 3 paths"
    print(f"process {PROCESS_ID}: 3 jitted steps saved, compiled once")


def jit_restore(directory):
    restored = ckpt.restore(os.path.join(directory, "step-2"), target_state("model4"))
    checked = check_state(restored, "model4", step_offset=3)
    print(f"process {PROCESS_ID}: restored the jit save, {checked} elements checked")


def replicas(directory):
    devices = np.array(jax.devices())
    everywhere = jax.sharding.Mesh(devices.reshape(2, 2), ("data", "model"))
    first_process = jax.sharding.Mesh(np.array([d for d in devices if d.process_index == 0]), ("x",))
    replicated = np.arange(40, dtype=np.float32).reshape(8, 5)
    local = np.arange(24, dtype=np.int64).reshape(4, 6)
    tree = {
        "replicated": jax.make_array_from_callback((8, 5), NamedSharding(everywhere, P()), lambda i: replicated[i]),
        "on_process_0": jax.make_array_from_callback((4, 6), NamedSharding(first_process, P("x")),
                                                     lambda i: local[i], dtype=local.dtype),
    }
    if PROCESS_ID == 1:
        assert all(s.replica_id > 0 for s in tree["replicated"].addressable_shards)
        assert not tree["on_process_0"].addressable_shards
    path = os.path.join(directory, "replicas")
    ckpt.save(path, tree).wait()
    target = {"replicated": jax.ShapeDtypeStruct((8, 5), jnp.float32, sharding=NamedSharding(first_process, P("x"))),
              "on_process_0": jax.ShapeDtypeStruct((4, 6), jnp.int64, sharding=NamedSharding(everywhere, P()))}
    restored = ckpt.restore(path, target)
    for key, want in (("replicated", replicated), ("on_process_0", local)):
        for shard in restored[key].addressable_shards:
            assert np.array_equal(np.asarray(shard.data), want[shard.index]), key
    print(f"process {PROCESS_ID}: saved and restored with every main replica on process 0")


def main(argv):
    jax.config.update("jax_enable_x64", True)  # int64 leaves in `replicas`
    command, directory, *rest = argv
    {"save": save, "restore": restore, "jit-save": jit_save, "jit-restore": jit_restore,
     "replicas": replicas}[command](directory, *rest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

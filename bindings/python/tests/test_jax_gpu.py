"""ckpt with JAX on a CUDA device, in one process: arrays held in GPU memory saved and restored into GPU memory, and
saves from inside jax.jit through the CUDA handler of the XLA FFI custom call (libckpt_jax_cuda), whose blocks are
copied from the device on XLA's stream. Skipped (as 'no CUDA device') where JAX sees no GPU: CI has none, so these
run on a machine that has one (README: GPU tests)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P, SingleDeviceSharding

import ckpt
import ckpt.jax


def _gpus():
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


if not _gpus():
    pytest.skip("no CUDA device: JAX sees no GPU", allow_module_level=True)

GPU = _gpus()[0]
DTYPES = [jnp.bfloat16, jnp.float16, jnp.float32, jnp.int8, jnp.int32, jnp.uint8, jnp.float8_e4m3fn, jnp.int4]


def random_array(dtype, shape, seed):
    """Random values every dtype holds exactly (small integers for the narrow ones), drawn afresh per test."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).itemsize >= 2 and jnp.issubdtype(dtype, jnp.floating):
        values = rng.standard_normal(shape).astype(np.float32)
    else:
        values = rng.integers(0, 4, shape)
    return jax.device_put(np.asarray(values).astype(np.dtype(dtype)), GPU)


def as_bytes(array):
    return np.ascontiguousarray(np.asarray(array)).tobytes()


def test_arrays_in_gpu_memory_round_trip_into_gpu_memory(tmp_path):
    saved = {str(np.dtype(d)): random_array(d, (257, 129), seed) for seed, d in enumerate(DTYPES)}
    ckpt.save(tmp_path / "c", saved).wait()
    on_gpu = SingleDeviceSharding(GPU)
    targets = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=on_gpu) for k, v in saved.items()}
    restored = ckpt.restore(tmp_path / "c", targets)
    for key, array in saved.items():
        assert restored[key].devices() == {GPU}, key
        assert restored[key].dtype == array.dtype, key
        assert as_bytes(restored[key]) == as_bytes(array), key


def test_jit_saver_copies_blocks_from_the_gpu_on_xlas_stream(tmp_path):
    grid = jax.make_mesh((1,), ("x",), devices=[GPU])
    sharding = NamedSharding(grid, P("x"))
    state = {"w": jax.device_put(random_array(jnp.bfloat16, (1024, 512), 11), sharding),
             "count": jax.device_put(jnp.int32(0), NamedSharding(grid, P()))}
    shardings = jax.tree.map(lambda x: x.sharding, state)
    saver = ckpt.jax.JitSaver(shardings)
    assert ckpt.jax._FfiLibrary.get().with_cuda, "the CUDA handler was not registered"

    def step(state, path):
        state = dict(state, w=state["w"] * 2, count=state["count"] + 1)
        saver(path, state)
        return state

    step = jax.jit(step, out_shardings=shardings)
    for i in range(3):
        state = step(state, ckpt.jax.path_array(tmp_path / f"s{i}"))
    jax.block_until_ready(state)
    assert saver.wait()
    targets = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
    restored = ckpt.restore(tmp_path / "s2", targets)
    assert as_bytes(restored["w"]) == as_bytes(state["w"])
    assert int(restored["count"]) == 3
    assert list(restored["w"].devices())[0].platform == "gpu"
    with pytest.raises(Exception, match="already exists"):
        jax.block_until_ready(step(state, ckpt.jax.path_array(tmp_path / "s2")))
    jax.block_until_ready(step(state, ckpt.jax.path_array(tmp_path / "s3")))  # the saver still works after it
    assert saver.wait() and (tmp_path / "s3" / "MANIFEST").exists()
    saver.close()

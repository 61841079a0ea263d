"""ckpt with JAX in one process with 4 CPU devices: every JAX dtype, typed PRNG keys, 0-d arrays, shardings in and
out (named, partially replicated, single-device), custom pytree nodes, and saves from inside jax.jit."""

import gc
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P, SingleDeviceSharding  # noqa: E402

import ckpt  # noqa: E402
import ckpt.jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

JAX_DTYPES = [jnp.bool_, jnp.int8, jnp.uint8, jnp.int16, jnp.uint16, jnp.int32, jnp.uint32, jnp.int64, jnp.uint64,
              jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64, jnp.complex64, jnp.complex128,
              jnp.float8_e4m3fn, jnp.float8_e5m2, jnp.float8_e4m3fnuz, jnp.float8_e5m2fnuz, jnp.float8_e4m3b11fnuz,
              jnp.float8_e3m4, jnp.float8_e4m3, jnp.float8_e8m0fnu, jnp.float4_e2m1fn, jnp.int4, jnp.uint4, jnp.int2,
              jnp.uint2]


def mesh(*shape_and_names):
    shape = tuple(n for n, _ in shape_and_names)
    return jax.make_mesh(shape, tuple(name for _, name in shape_and_names))


def values(dtype, shape=(8, 4)):
    """Values every dtype represents exactly: small non-negative integers."""
    count = int(np.prod(shape))
    small = np.arange(count) % (2 if np.dtype(dtype) == np.bool_ else 4)
    return np.asarray(small.reshape(shape)).astype(np.dtype(dtype))


def as_bytes(array):
    return np.ascontiguousarray(np.asarray(array)).tobytes()


def struct_of(array, sharding):
    return jax.ShapeDtypeStruct(array.shape, array.dtype, sharding=sharding)


def test_every_jax_dtype_round_trips_through_shardings(tmp_path):
    grid = mesh((2, "data"), (2, "model"))
    saved = {str(np.dtype(d)): jax.device_put(values(d), NamedSharding(grid, P("data", "model"))) for d in JAX_DTYPES}
    ckpt.save(tmp_path / "c", saved).wait()
    other = NamedSharding(mesh((4, "model")), P(None, "model"))
    restored = ckpt.restore(tmp_path / "c", {k: struct_of(v, other) for k, v in saved.items()})
    for key, array in saved.items():
        assert restored[key].dtype == array.dtype and restored[key].sharding == other, key
        assert as_bytes(restored[key]) == as_bytes(array), key
    assert ckpt.Reader(tmp_path / "c").tensors["int4"].dtype == np.dtype(ml_dtypes.int4)


def test_float32_master_weights_restore_into_bfloat16_with_allow_dtype_cast(tmp_path):
    grid = mesh((2, "data"), (2, "model"))
    master = np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32)
    saved = jax.device_put(master, NamedSharding(grid, P("data", "model")))
    ckpt.save(tmp_path / "c", {"w": saved}).wait()
    other = NamedSharding(mesh((4, "model")), P(None, "model"))
    target = {"w": jax.ShapeDtypeStruct(master.shape, jnp.bfloat16, sharding=other)}
    restored = ckpt.restore(tmp_path / "c", target, allow_dtype_cast=True)["w"]
    assert restored.dtype == jnp.bfloat16 and restored.sharding == other
    assert as_bytes(restored) == as_bytes(master.astype(ml_dtypes.bfloat16))


def test_typed_prng_keys_and_0d_arrays(tmp_path):
    grid = mesh((4, "data"))
    unsharded = jax.random.split(jax.random.key(7), 8)
    keys = jax.device_put(unsharded, NamedSharding(grid, P("data")))
    rbg = jax.random.key(3, impl="rbg")
    tree = {"keys": keys, "rbg": rbg, "step": jnp.int32(12), "loss": jnp.float32(0.5)}
    ckpt.save(tmp_path / "c", tree).wait()
    target = {"keys": jax.ShapeDtypeStruct((8,), keys.dtype, sharding=NamedSharding(grid, P())),
              "rbg": jax.ShapeDtypeStruct((), rbg.dtype), "step": jax.ShapeDtypeStruct((), jnp.int32),
              "loss": jax.ShapeDtypeStruct((), jnp.float32, sharding=NamedSharding(grid, P()))}
    restored = ckpt.restore(tmp_path / "c", target)
    assert restored["keys"].dtype == keys.dtype and restored["rbg"].dtype == rbg.dtype
    assert as_bytes(jax.random.key_data(restored["keys"])) == as_bytes(jax.random.key_data(keys))
    assert as_bytes(jax.random.key_data(restored["rbg"])) == as_bytes(jax.random.key_data(rbg))
    assert int(restored["step"]) == 12 and float(restored["loss"]) == 0.5 and restored["step"].shape == ()
    # The keys are usable: the same stream as before the save.
    assert as_bytes(jax.random.normal(restored["keys"][3], (4,))) == as_bytes(jax.random.normal(unsharded[3], (4,)))
    with pytest.raises(ckpt.MismatchError, match="holds rbg keys"):
        wrong = jax.random.key(0, impl="unsafe_rbg")
        ckpt.restore(tmp_path / "c", dict(target, rbg=jax.ShapeDtypeStruct((), wrong.dtype)), partial=True)


def test_partially_replicated_arrays_are_written_once(tmp_path):
    grid = mesh((2, "data"), (2, "model"))
    weight = jax.device_put(jnp.arange(64, dtype=jnp.float32).reshape(8, 8), NamedSharding(grid, P("model")))
    ckpt.save(tmp_path / "c", {"w": weight}).wait()
    chunks = ckpt.Reader(tmp_path / "c").chunks("w")
    assert sum(int(np.prod(c.shape)) for c in chunks) == 64  # each element stored once, not once per replica
    assert ckpt.default_context().stats()["bytes_written"] >= 64 * 4


def test_targets_may_be_arrays_single_device_or_numpy(tmp_path):
    grid = mesh((4, "x"))
    weight = jax.device_put(jnp.arange(12.0).reshape(4, 3), NamedSharding(grid, P("x")))
    ckpt.save(tmp_path / "c", {"w": weight}).wait()
    like_array = ckpt.restore(tmp_path / "c", {"w": jnp.zeros((4, 3))})  # a jax.Array target: its sharding
    assert isinstance(like_array["w"].sharding, SingleDeviceSharding)
    unsharded = ckpt.restore(tmp_path / "c", {"w": jax.ShapeDtypeStruct((4, 3), jnp.float64)})
    as_numpy = ckpt.restore(tmp_path / "c")
    for got in (like_array["w"], unsharded["w"], as_numpy["w"]):
        assert as_bytes(got) == as_bytes(weight)
    assert isinstance(as_numpy["w"], np.ndarray)


def test_a_restore_takes_the_pages_of_the_arrays_the_caller_dropped_and_jax_adopts_them_without_a_copy(tmp_path):
    grid = mesh((4, "x"))
    rows = jax.device_put(jnp.arange(1024 * 1024, dtype=jnp.float32).reshape(1024, 1024), NamedSharding(grid, P("x")))
    ckpt.save(tmp_path / "c", {"w": rows}).wait()
    saved_like, columns = rows.sharding, NamedSharding(grid, P(None, "x"))
    gc.disable()  # JAX and the package must let go of the arrays when the caller drops them, without a collection
    try:
        first = ckpt.restore(tmp_path / "c", {"w": jax.ShapeDtypeStruct(rows.shape, rows.dtype, sharding=saved_like)})
        pages = [(s.data.unsafe_buffer_pointer(), s.data.nbytes) for s in first["w"].addressable_shards]
        assert all(start % 4096 == 0 and size == 1 << 20 for start, size in pages)
        del first
        second = ckpt.restore(tmp_path / "c", {"w": jax.ShapeDtypeStruct(rows.shape, rows.dtype, sharding=columns)})
    finally:
        gc.enable()
    for shard in second["w"].addressable_shards:
        start = shard.data.unsafe_buffer_pointer()
        assert any(low <= start and start + shard.data.nbytes <= low + size for low, size in pages), hex(start)
        assert np.array_equal(np.asarray(shard.data), np.asarray(rows)[shard.index])


class TrainState:
    def __init__(self, params, step):
        self.params = params
        self.step = step


jax.tree_util.register_dataclass(TrainState, data_fields=["params", "step"], meta_fields=[])


def test_custom_pytree_nodes_use_their_field_names(tmp_path):
    state = TrainState({"w": jnp.ones((2, 2))}, jnp.int32(4))
    ckpt.save(tmp_path / "c", state).wait()
    assert sorted(ckpt.Reader(tmp_path / "c").tensors) == ["params/w", "step"]
    restored = ckpt.restore(tmp_path / "c", TrainState({"w": jax.ShapeDtypeStruct((2, 2), jnp.float64)},
                                                         jax.ShapeDtypeStruct((), jnp.int32)))
    assert isinstance(restored, TrainState) and int(restored.step) == 4


def test_a_jax_save_returns_before_staging_and_reports_collective_errors_on_its_request(tmp_path):
    grid = mesh((4, "x"))
    weight = jax.device_put(jnp.arange(4096.0).reshape(64, 64), NamedSharding(grid, P("x")))
    ckpt.save(tmp_path / "c", {"w": weight}).wait()
    again = ckpt.save(tmp_path / "c", {"w": weight})  # the collective's refusal arrives on the request
    with pytest.raises(ckpt.AlreadyExistsError, match="already exists"):
        again.wait()
    with pytest.raises(ckpt.AlreadyExistsError):
        again.done()
    # Calls after it are ordered behind it on the context: the restore sees the first checkpoint intact.
    restored = ckpt.restore(tmp_path / "c", {"w": struct_of(weight, weight.sharding)})
    assert as_bytes(restored["w"]) == as_bytes(weight)


def test_a_shape_dtype_struct_has_nothing_to_save(tmp_path):
    with pytest.raises(TypeError, match="'w'"):
        ckpt.save(tmp_path / "c", {"w": jax.ShapeDtypeStruct((2,), jnp.float32)})


def test_jit_saver_saves_from_inside_jit_with_the_path_as_an_operand(tmp_path):
    grid = mesh((2, "data"), (2, "model"))
    state = {"w": jax.device_put(jnp.arange(32, dtype=jnp.bfloat16).reshape(8, 4), NamedSharding(grid, P("data"))),
             "q": jax.device_put(values(jnp.int4, (4, 8)), NamedSharding(grid, P(None, "model"))),
             "t": jax.device_put(values(jnp.uint2, (16,)), NamedSharding(grid, P(("data", "model")))),
             "f8": jax.device_put(values(jnp.float8_e4m3fn, (4, 4)), NamedSharding(grid, P())),
             "count": jax.device_put(jnp.int32(0), NamedSharding(grid, P()))}
    saver = ckpt.jax.JitSaver(jax.tree.map(lambda x: x.sharding, state))
    shardings = jax.tree.map(lambda x: x.sharding, state)

    @jax.jit
    def step(state, path):
        state = dict(state, count=state["count"] + 1)
        saver(path, state)
        return state

    step = jax.jit(step, out_shardings=shardings)
    for i in range(2):
        state = step(state, ckpt.jax.path_array(tmp_path / f"s{i}"))
    jax.block_until_ready(state)
    assert saver.wait()
    assert step._cache_size() == 1
    restored = ckpt.restore(tmp_path / "s1", jax.tree.map(lambda x: struct_of(x, x.sharding), state))
    for key in state:
        assert as_bytes(restored[key]) == as_bytes(state[key]), key
    assert int(restored["count"]) == 2

    # The same path twice: the save fails, and the failure reaches the caller; the next save works.
    with pytest.raises(Exception, match="already exists"):
        jax.block_until_ready(step(state, ckpt.jax.path_array(tmp_path / "s1")))
    jax.block_until_ready(step(state, ckpt.jax.path_array(tmp_path / "s2")))
    assert saver.wait() and (tmp_path / "s2" / "MANIFEST").exists()
    saver.close()


def test_path_array_refuses_what_cannot_be_a_path():
    assert ckpt.jax.path_array("/a/b")[:5].tobytes() == b"/a/b\0"
    for bad in ("", "x" * ckpt.jax.MAX_PATH_BYTES, "a\0b"):
        with pytest.raises(ValueError):
            ckpt.jax.path_array(bad)


def test_jit_saver_refuses_a_path_operand_that_is_not_a_path(tmp_path):
    grid = mesh((4, "x"))
    state = {"w": jax.device_put(jnp.arange(16.0).reshape(4, 4), NamedSharding(grid, P("x")))}
    saver = ckpt.jax.JitSaver(jax.tree.map(lambda x: x.sharding, state))
    step = jax.jit(lambda state, path: (saver(path, state), state)[1])
    unterminated = np.full(ckpt.jax.MAX_PATH_BYTES, ord("a"), np.uint8)
    with pytest.raises(Exception, match="not NUL-terminated"):
        jax.block_until_ready(step(state, unterminated))
    jax.block_until_ready(step(state, ckpt.jax.path_array(tmp_path / "after")))  # the saver still works
    assert saver.wait() and (tmp_path / "after" / "MANIFEST").exists()
    saver.close()


def test_a_request_still_staging_reports_not_done_and_a_wait_can_time_out(tmp_path):
    import threading
    weight = jax.device_put(jnp.arange(64.0), jax.devices()[0])
    context = ckpt.default_context()
    release = threading.Event()
    context.submit(release.wait)  # holds the context's thread, so the save below cannot start staging
    request = ckpt.save(tmp_path / "c", {"w": weight})
    assert not request.done()
    assert request.wait(timeout=0.05) is False
    release.set()
    assert request.wait(timeout=60) and request.done()
    assert as_bytes(ckpt.restore(tmp_path / "c")["w"]) == as_bytes(weight)

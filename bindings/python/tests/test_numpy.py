"""ckpt on one process with numpy: trees in and out, every dtype, Python values, metadata, the reader, and every
error a user can provoke, with the library's message."""

import collections
import dataclasses
import tracemalloc

import ml_dtypes
import numpy as np
import pytest

import ckpt
from ckpt import _dtypes, _native


def every_dtype():
    """One array per dtype ckpt stores, with values that survive a round trip bit for bit."""
    out = {}
    for code in range(1, 29):
        dtype = _dtypes.dtype_of(code)
        raw = np.arange(12, dtype=np.uint8).reshape(3, 4)
        if dtype.itemsize == 1 and dtype != np.bool_:
            out[f"code_{code}"] = raw.view(dtype)  # every bit pattern kept (the low bits for sub-byte types)
        else:
            out[f"code_{code}"] = np.arange(12).reshape(3, 4).astype(dtype)
    return out


def test_every_dtype_and_shape_round_trips_bit_for_bit(tmp_path):
    tree = every_dtype()
    tree["empty"] = np.zeros((0, 3), np.float32)
    tree["scalar"] = np.float64(2.5)
    tree["zero_d"] = np.array(7, np.int16)
    tree["transposed"] = np.arange(6, dtype=np.int32).reshape(2, 3).T  # not C-contiguous
    tree["big_endian"] = np.arange(5, dtype=">f8")
    ckpt.save(tmp_path / "c", tree).wait()
    restored = ckpt.restore(tmp_path / "c", tree)
    for key, value in tree.items():
        got = restored[key]
        assert np.shape(got) == np.shape(value), key
        assert np.asarray(got).dtype == np.asarray(value).dtype.newbyteorder("="), key
        native = np.asarray(value).astype(np.asarray(value).dtype.newbyteorder("="))
        assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(native).tobytes(), key
    assert isinstance(restored["scalar"], np.float64) and restored["scalar"] == 2.5
    assert ckpt.Reader(tmp_path / "c").tensors["code_11"].dtype == np.dtype(ml_dtypes.bfloat16)


def test_python_values_are_common_entries_restored_with_their_type(tmp_path):
    tree = {"step": 2**70, "lr": float("inf"), "nan": float("nan"), "flag": False, "name": "αβγ", "blob": b"\0\1",
            "nothing": None}
    ckpt.save(tmp_path / "c", tree).wait()
    restored = ckpt.restore(tmp_path / "c")
    assert restored["step"] == 2**70 and restored["lr"] == float("inf") and np.isnan(restored["nan"])
    assert restored["flag"] is False and restored["name"] == "αβγ" and restored["blob"] == b"\0\1"
    assert restored["nothing"] is None
    assert ckpt.Reader(tmp_path / "c").common["step"] == str(2**70).encode()  # readable from C as well


def test_a_checkpoint_whose_pytree_lacks_shapes_or_that_has_none_restores_without_a_target(tmp_path, monkeypatch):
    tree = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "step": 7}
    # As an older ckpt wrote it: a pytree whose arrays have neither shape nor dtype; they are listed from storage.
    with monkeypatch.context() as patched:
        patched.setattr(ckpt._tree, "array_description",
                        lambda key, kind, shape, dtype, **extra: dict(key=key, kind=kind, **extra))
        ckpt.save(tmp_path / "older", tree).wait()
    older = ckpt.restore(tmp_path / "older")
    assert older["step"] == 7 and older["w"].tolist() == tree["w"].tolist()

    # As another language writes it: no pytree, a flat dict of its tensors and common bytes comes back.
    def register_without_pytree(state, tree, compressed=frozenset()):
        state.add_tensor("w", tree["w"], tree["w"].shape, (0, 0))
        state.add_common("note", b"from C")
        return False

    with monkeypatch.context() as patched:
        patched.setattr(ckpt._save, "register_tree", register_without_pytree)
        ckpt.save(tmp_path / "foreign", tree).wait()
    foreign = ckpt.restore(tmp_path / "foreign")
    assert sorted(foreign) == ["note", "w"] and foreign["note"] == b"from C"
    assert foreign["w"].tolist() == tree["w"].tolist()


@dataclasses.dataclass
class Layer:
    kernel: np.ndarray
    bias: np.ndarray


Moments = collections.namedtuple("Moments", ["mu", "nu"])


def model():
    return {"params": {"layer_0": Layer(np.ones((2, 2), np.float32), np.zeros(2, np.float32)),
                       "layers": [np.full(3, 1.0), np.full(3, 2.0)]},
            "opt_state": (Moments(np.ones(1), np.zeros(1)), 5)}


def test_keys_follow_the_tree_paths(tmp_path):
    ckpt.save(tmp_path / "c", model()).wait()
    reader = ckpt.Reader(tmp_path / "c")
    assert sorted(reader.tensors) == ["opt_state/0/mu", "opt_state/0/nu", "params/layer_0/bias",
                                      "params/layer_0/kernel", "params/layers/0", "params/layers/1"]
    assert "opt_state/1" in reader.common


def test_a_target_keeps_its_container_types(tmp_path):
    ckpt.save(tmp_path / "c", model()).wait()
    restored = ckpt.restore(tmp_path / "c", model())
    assert isinstance(restored["params"]["layer_0"], Layer) and isinstance(restored["opt_state"][0], Moments)
    assert restored["opt_state"][1] == 5 and np.array_equal(restored["params"]["layers"][1], np.full(3, 2.0))
    untargeted = ckpt.restore(tmp_path / "c")  # the saved types, which this module defines, come back too
    assert isinstance(untargeted["params"]["layer_0"], Layer) and untargeted["params"]["layer_0"].kernel.shape == (2, 2)
    assert isinstance(untargeted["opt_state"][0], Moments)
    assert isinstance(untargeted["opt_state"], tuple) and isinstance(untargeted["params"]["layers"], list)


def test_colliding_and_reserved_keys_are_refused(tmp_path):
    with pytest.raises(ValueError, match="'a/b'"):
        ckpt.save(tmp_path / "c", {"a/b": np.ones(1), "a": {"b": np.ones(1)}})
    with pytest.raises(ValueError, match="reserved"):
        ckpt.save(tmp_path / "c", {".ckpt": {"x": np.ones(1)}})
    with pytest.raises(TypeError, match="'bad'"):
        ckpt.save(tmp_path / "c", {"bad": object()})
    assert not (tmp_path / "c").exists()


def test_numpy_arrays_are_registered_without_a_copy(tmp_path):
    big = np.ones((16, 1 << 20), np.float32)  # 64 MiB
    tracemalloc.start()
    try:
        ckpt.save(tmp_path / "c", {"big": big}).wait()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < big.nbytes // 8, f"saving allocated {peak} bytes in Python for a {big.nbytes}-byte array"


def test_request_reports_completion_and_buffers_are_free_on_return(tmp_path):
    values = np.arange(1000, dtype=np.float64)
    request = ckpt.save(tmp_path / "c", {"v": values}, metadata={"run": "7"})
    values[:] = -1  # staged: the checkpoint holds the values at the time of the call
    assert request.wait(timeout=60) and request.done()
    assert np.array_equal(ckpt.restore(tmp_path / "c")["v"], np.arange(1000, dtype=np.float64))
    assert ckpt.Reader(tmp_path / "c").metadata == {"run": "7"}


def test_a_save_checking_replicas_commits_and_restores(tmp_path):
    tree = {"w": np.arange(3 << 18, dtype=np.float32).reshape(3, -1), "b": np.linspace(-1, 1, 7), "step": 5}
    ckpt.save(tmp_path / "c", tree, check_replicas=True).wait()
    restored = ckpt.restore(tmp_path / "c", tree)
    for key in ("w", "b"):
        assert restored[key].tobytes() == tree[key].tobytes(), key
    assert restored["step"] == 5
    with pytest.raises(ValueError, match="check_replicas must be True or False"):
        ckpt.save(tmp_path / "d", tree, check_replicas="yes")


def directory_bytes(path):
    """The bytes of every file under `path`."""
    return sum(entry.stat().st_size for entry in path.rglob("*") if entry.is_file())


def test_an_incremental_save_writes_only_the_changed_array_and_restores_the_new_values(tmp_path):
    tree = {"w": np.arange(4 << 20, dtype=np.float32).reshape(64, -1), "b": np.linspace(-1, 1, 7), "step": 5}
    ckpt.save(tmp_path / "a", tree, incremental=True).wait()
    tree["b"] = tree["b"] * 2
    tree["step"] = 6
    ckpt.save(tmp_path / "b", tree, incremental=True, base=tmp_path / "a").wait()
    written_in_full = directory_bytes(tmp_path / "a" / "data")
    written_changes = directory_bytes(tmp_path / "b" / "data")
    assert written_changes * 100 < written_in_full, (written_changes, written_in_full)
    restored = ckpt.restore(tmp_path / "b", tree)
    for key in ("w", "b"):
        assert restored[key].tobytes() == tree[key].tobytes(), key
    assert restored["step"] == 6
    with pytest.raises(ckpt.InvalidArgumentError, match="without CKPT_SAVE_INCREMENTAL"):
        ckpt.save(tmp_path / "c", tree, base=tmp_path / "a")
    assert not (tmp_path / "c").exists()


def test_saving_over_a_committed_checkpoint_is_refused(tmp_path):
    ckpt.save(tmp_path / "c", {"v": np.ones(3)}).wait()
    with pytest.raises(ckpt.AlreadyExistsError, match="already exists") as raised:
        ckpt.save(tmp_path / "c", {"v": np.zeros(3)})
    assert isinstance(raised.value, FileExistsError) and raised.value.status == 3
    assert ckpt.restore(tmp_path / "c")["v"].tolist() == [1, 1, 1]


def test_metadata_must_be_strings(tmp_path):
    with pytest.raises(TypeError, match="metadata"):
        ckpt.save(tmp_path / "c", {"v": np.ones(1)}, metadata={"step": 3})


def test_keys_and_metadata_with_a_nul_or_a_lone_surrogate_are_refused_naming_them(tmp_path):
    # A NUL would cut the C string short: "a\0b" would be saved as "a". A lone surrogate (bytes decoded with
    # surrogateescape) has no UTF-8 form.
    escaped = b"w\xff".decode("utf-8", "surrogateescape")
    with pytest.raises(ckpt.InvalidArgumentError, match=r"tensor key 'a\\x00b' contains a NUL"):
        ckpt.save(tmp_path / "c", {"a\0b": np.ones(1)})
    with pytest.raises(ckpt.InvalidArgumentError, match=r"tensor key 'w\\udcff' is not valid Unicode text"):
        ckpt.save(tmp_path / "c", {escaped: np.ones(1)})
    with pytest.raises(ckpt.InvalidArgumentError, match=r"common key 'step\\x00' contains a NUL"):
        ckpt.save(tmp_path / "c", {"step\0": 3})
    with pytest.raises(ckpt.InvalidArgumentError, match=r"metadata 'run': value 'a\\x00b' contains a NUL"):
        ckpt.save(tmp_path / "c", {"v": np.ones(1)}, metadata={"run": "a\0b"})
    with pytest.raises(ckpt.InvalidArgumentError, match=r"metadata key 'w\\udcff' is not valid Unicode text"):
        ckpt.save(tmp_path / "c", {"v": np.ones(1)}, metadata={escaped: "x"})
    assert not (tmp_path / "c").exists()
    ckpt.save(tmp_path / "c", {"w": np.ones(1)}).wait()
    with pytest.raises(ckpt.InvalidArgumentError, match=r"tensor key 'w\\x00' contains a NUL"):
        ckpt.export(tmp_path / "c", tmp_path / "out.safetensors", keys=["w\0"])
    assert not (tmp_path / "out.safetensors").exists()


def test_keys_and_metadata_of_any_unicode_text_round_trip(tmp_path):
    tree = {"café": np.ones(2), "日本語": np.zeros(1), "😀": np.arange(3), "q\"uote'\\": np.ones(1),
            "tab\tnew\nline\x01": np.full(2, 7.0), "name": "αβγ\n"}
    metadata = {"é\n": "😀\x01\"\\"}
    ckpt.save(tmp_path / "c", tree, metadata=metadata).wait()
    restored = ckpt.restore(tmp_path / "c")
    assert sorted(restored) == sorted(tree)
    for key, value in tree.items():
        assert np.array_equal(restored[key], value) if isinstance(value, np.ndarray) else restored[key] == value, key
    reader = ckpt.Reader(tmp_path / "c")
    assert reader.metadata == metadata
    assert np.array_equal(reader.read("😀"), np.arange(3))


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "c"
    ckpt.save(path, {"w": np.arange(24, dtype=np.float32).reshape(4, 6), "b": np.ones(6, np.float32), "step": 3},
              metadata={"model": "mlp"}).wait()
    return path


def test_restore_errors_name_what_is_wrong(saved, tmp_path):
    with pytest.raises(ckpt.NotFoundError, match="nowhere"):
        ckpt.restore(tmp_path / "nowhere")
    with pytest.raises(ckpt.MismatchError, match=r"'w'.*\[4, 6\].*\[4, 5\]"):
        ckpt.restore(saved, {"w": np.zeros((4, 5), np.float32), "b": np.zeros(6, np.float32)})
    with pytest.raises(ckpt.MismatchError, match="'w'"):
        ckpt.restore(saved, {"w": np.zeros((4, 6), np.float64), "b": np.zeros(6, np.float32)})
    with pytest.raises(ckpt.MismatchError, match="'extra'"):
        ckpt.restore(saved, {"w": np.zeros((4, 6), np.float32), "b": np.zeros(6, np.float32),
                             "extra": np.zeros(1)})
    with pytest.raises(ckpt.MismatchError, match="'b'"):
        ckpt.restore(saved, {"w": np.zeros((4, 6), np.float32)})
    with pytest.raises(ckpt.NotFoundError, match="'epoch'"):
        ckpt.restore(saved, {"w": np.zeros((4, 6), np.float32), "b": np.zeros(6, np.float32), "epoch": 0})
    with pytest.raises(TypeError, match="'w/0'"):
        ckpt.restore(saved, {"w": [object()]})


def test_partial_restore_takes_a_subset(saved):
    restored = ckpt.restore(saved, {"w": np.zeros((4, 6), np.float32)}, partial=True)
    assert np.array_equal(restored["w"], np.arange(24, dtype=np.float32).reshape(4, 6))


def test_a_shard_target_gets_its_box(saved):
    restored = ckpt.restore(saved, {"w": ckpt.Shard(np.zeros((2, 3), np.float32), (4, 6), (1, 2)),
                                    "b": ckpt.Shard(np.zeros(6, np.float32), (6,), (0,))})
    assert restored["w"].offset == (1, 2)
    assert np.array_equal(restored["w"].data, np.arange(24, dtype=np.float32).reshape(4, 6)[1:3, 2:5])


def test_float32_restores_into_bfloat16_with_allow_dtype_cast(tmp_path):
    weights = np.random.default_rng(0).standard_normal((64, 33)).astype(np.float32) * 1000
    # A tie (to even: 1), overflow to infinity, infinities, -0, a subnormal, NaN, and a value past float16's range.
    weights.flat[:8] = [1 + 2**-8, 3.4e38, np.inf, -np.inf, -0.0, 1e-40, np.nan, 70000]
    ckpt.save(tmp_path / "c", {"w": weights, "x": np.arange(4.0)}).wait()
    target = {"w": np.zeros(weights.shape, ml_dtypes.bfloat16), "x": np.zeros(4, np.float16)}
    with pytest.raises(ckpt.MismatchError, match="'w': stored as F32, registered as BF16 without"):
        ckpt.restore(tmp_path / "c", target)
    restored = ckpt.restore(tmp_path / "c", target, allow_dtype_cast=True)
    expected = weights.astype(ml_dtypes.bfloat16)  # ml_dtypes rounds to nearest even
    assert restored["w"].dtype == ml_dtypes.bfloat16
    nan = np.isnan(weights)
    assert np.array_equal(np.isnan(restored["w"]), nan)
    assert np.array_equal(restored["w"].view(np.uint16)[~nan], expected.view(np.uint16)[~nan])
    assert restored["w"].flat[0] == 1 and np.isinf(restored["w"].flat[1])
    assert restored["x"].dtype == np.float16 and restored["x"].tolist() == [0, 1, 2, 3]


def test_dtype_cast_applies_to_shards_and_the_manager_and_refuses_integers(tmp_path):
    values = np.linspace(-1, 1, 24).reshape(4, 6)  # float64
    with ckpt.CheckpointManager(tmp_path / "run") as manager:
        manager.save(1, {"w": values, "n": np.arange(3, dtype=np.int32)})
        manager.wait()
        shard = ckpt.Shard(np.zeros((2, 3), np.float32), (4, 6), (1, 2))
        restored = manager.restore(None, {"w": shard, "n": np.zeros(3, np.int32)}, allow_dtype_cast=True)
        assert np.array_equal(restored["w"].data, values[1:3, 2:5].astype(np.float32))
        with pytest.raises(ckpt.MismatchError, match="'n': stored as I32, registered as F32"):
            manager.restore(1, {"w": values, "n": np.zeros(3, np.float32)}, allow_dtype_cast=True)


def test_a_damaged_checkpoint_is_refused_naming_the_tensor(saved):
    data = sorted((saved / "data").iterdir())[0]
    raw = bytearray(data.read_bytes())
    raw[8] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(ckpt.CorruptError, match="checksum"):
        ckpt.restore(saved)
    with pytest.raises(ckpt.CorruptError):
        ckpt.Reader(saved).verify()


def test_reader_lists_reads_and_verifies(saved):
    with ckpt.Reader(saved) as reader:
        info = reader.info
        assert (info.world_size, info.tensor_count, info.metadata_count) == (1, 2, 1)
        assert info.total_bytes == 24 * 4 + 6 * 4
        assert reader.tensors["w"].shape == (4, 6) and reader.tensors["w"].dtype == np.float32
        chunk = reader.chunks("w")[0]
        assert chunk.shape == (4, 6) and chunk.file.startswith("data/")
        whole = np.arange(24, dtype=np.float32).reshape(4, 6)
        assert np.array_equal(reader.read("w"), whole)
        assert np.array_equal(reader.read("w", (slice(1, 3), slice(None))), whole[1:3])
        assert np.array_equal(reader.read("w", (-1, slice(2, 4))), whole[-1, 2:4])
        assert reader.common["step"] == b"3" and reader.metadata == {"model": "mlp"}
        reader.verify()
        with pytest.raises(IndexError):
            reader.read("w", (4, 0))
        with pytest.raises(ValueError, match="step"):
            reader.read("w", (slice(0, 4, 2), slice(None)))
        with pytest.raises(ckpt.NotFoundError, match="'nope'"):
            reader.read("nope")
    with pytest.raises(ValueError, match="closed"):
        reader.read("w")


def test_manager_keeps_the_newest_steps_and_resumes(tmp_path):
    with ckpt.CheckpointManager(tmp_path / "run", keep_last=2, save_interval_steps=10) as manager:
        assert manager.latest_step() is None and manager.all_steps() == [] and manager.resume_step() is None
        with pytest.raises(ckpt.NotFoundError):
            manager.restore()
        saved = [s for s in range(0, 45, 5) if manager.save(s, {"x": np.full(2, s), "step": s})]
        assert saved == [0, 10, 20, 30, 40]
        manager.wait()
        assert manager.all_steps() == [30, 40] and manager.latest_step() == 40 and manager.resume_step() == 40
        assert manager.restore()["step"] == 40 and manager.restore(30)["x"].tolist() == [30, 30]
        assert manager.step_path(40).endswith("step-000000000040")
        assert manager.save(41, {"x": np.zeros(2)}, force=True)
        with pytest.raises(ckpt.AlreadyExistsError):
            manager.save(40, {"x": np.zeros(2)})


def test_status_codes_map_to_error_classes():
    for status, cls, builtin in ((1, ckpt.InvalidArgumentError, ValueError), (2, ckpt.NotFoundError, LookupError),
                                 (4, ckpt.MismatchError, ValueError), (5, ckpt.CorruptError, ckpt.Error),
                                 (7, ckpt.IoError, OSError), (8, ckpt.NoSpaceError, OSError),
                                 (9, ckpt.TimeoutError, TimeoutError), (10, ckpt.PeerFailedError, ckpt.Error),
                                 (11, ckpt.UnsupportedError, NotImplementedError),
                                 (12, ckpt.NoMemoryError, MemoryError), (14, ckpt.InternalError, ckpt.Error)):
        error = _native.error_from_status(status, "message")
        assert type(error) is cls and isinstance(error, builtin) and error.status == status
        assert str(error) == "message" and error.remedy


def test_context_options_are_checked_and_stats_reported(tmp_path):
    with pytest.raises(ValueError, match="transport"):
        ckpt.Context(transport="carrier-pigeon")
    with pytest.raises(ValueError, match="timeout"):
        ckpt.Context(timeout=0)
    with pytest.raises(ckpt.InvalidArgumentError, match="rank"):
        ckpt.Context(rank=3, world_size=2)
    context = ckpt.Context(rank=0, world_size=1, io_workers=0, arena_bytes=64 << 20)
    ckpt.save(tmp_path / "c", {"v": np.ones(1024)}, context=context).wait()
    stats = context.stats()
    assert stats["io_workers"] == 0 and stats["arena_bytes"] == 64 << 20 and stats["bytes_staged"] == 8192
    context.close()
    with pytest.raises(ValueError, match="closed"):
        ckpt.save(tmp_path / "d", {"v": np.ones(1)}, context=context)


def test_an_allgather_answering_the_wrong_shape_fails_the_context_naming_it():
    with pytest.raises(ValueError, match="rank and world_size"):
        ckpt.Context(allgather=lambda mine: [mine])
    with pytest.raises(ckpt.Error) as raised:
        ckpt.Context(rank=0, world_size=2, allgather=lambda mine: [mine], timeout=10)
    assert "allgather" in str(raised.value)
    assert isinstance(raised.value.__cause__, ValueError) and "expected 2 blocks" in str(raised.value.__cause__)

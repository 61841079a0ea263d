"""Compressed saves (CKPT_SAVE_COMPRESS, CKPT_SHARD_COMPRESS) on one process: ckpt.save's and
CheckpointManager.save's compress=True and compress_keys restore exactly, make a format 3 checkpoint whose data files
are smaller than the arrays, and are refused where the library refuses them."""

import ml_dtypes
import numpy as np
import pytest

import ckpt


def weights(shape, seed):
    """Weight-like values: small, of both signs, over a few binary orders of magnitude (as float32)."""
    return np.random.default_rng(seed).normal(0.0, 0.02, shape).astype(np.float32)


def model():
    """A float32 and a bfloat16 array of 2 MiB each, an int32 one of 1 MiB and a Python value."""
    return {"m": weights((512, 1024), 1), "w": weights((1024, 1024), 2).astype(ml_dtypes.bfloat16),
            "ids": (np.arange(256 * 1024, dtype=np.int32) * 7 % 1000).reshape(256, 1024), "step": 3}


def raw_bytes(tree):
    return sum(leaf.nbytes for leaf in tree.values() if isinstance(leaf, np.ndarray))


def data_bytes(path):
    """The bytes of the checkpoint's data files."""
    return sum(entry.stat().st_size for entry in (path / "data").rglob("*") if entry.is_file())


def assert_restores_exactly(path, tree):
    restored = ckpt.restore(path, tree)
    for key in ("m", "w", "ids"):
        assert restored[key].dtype == tree[key].dtype and restored[key].tobytes() == tree[key].tobytes(), key
    assert restored["step"] == tree["step"]


def test_a_compressed_save_restores_exactly_as_format_3_in_fewer_bytes(tmp_path):
    tree = model()
    ckpt.save(tmp_path / "c", tree, compress=True).wait()
    assert_restores_exactly(tmp_path / "c", tree)
    with ckpt.Reader(tmp_path / "c") as reader:
        assert reader.info.format_version[0] == 3
        assert reader.read("w").tobytes() == tree["w"].tobytes()
        assert reader.read("m", (slice(None), slice(100, 300))).tobytes() == tree["m"][:, 100:300].tobytes()
        reader.verify()
    assert data_bytes(tmp_path / "c") < raw_bytes(tree) * 3 // 4, (data_bytes(tmp_path / "c"), raw_bytes(tree))

    with ckpt.CheckpointManager(tmp_path / "steps") as manager:
        assert manager.save(1, tree, compress=True)
        manager.wait()
        assert ckpt.Reader(manager.step_path(1)).info.format_version[0] == 3
        assert_restores_exactly(manager.step_path(1), tree)


def test_compress_keys_compress_only_the_named_arrays(tmp_path):
    tree = model()
    ckpt.save(tmp_path / "plain", tree).wait()
    ckpt.save(tmp_path / "w-only", tree, compress_keys=["w"]).wait()
    assert_restores_exactly(tmp_path / "w-only", tree)
    assert ckpt.Reader(tmp_path / "plain").info.format_version[0] < 3
    assert ckpt.Reader(tmp_path / "w-only").info.format_version[0] == 3
    plain, w_only = data_bytes(tmp_path / "plain"), data_bytes(tmp_path / "w-only")
    # bfloat16 weights shrink by about 1.5x: "w" alone saves a sixth of its bytes or more.
    assert plain - w_only > tree["w"].nbytes // 6, (plain, w_only)
    ckpt.save(tmp_path / "all", tree, compress=True).wait()
    assert data_bytes(tmp_path / "all") < w_only, (data_bytes(tmp_path / "all"), w_only)

    # A save in place stores the named arrays as they are, without a word.
    ckpt.save(tmp_path / "in-place", tree, in_place=True, compress_keys=("w",)).wait()
    assert ckpt.Reader(tmp_path / "in-place").info.format_version[0] < 3
    assert_restores_exactly(tmp_path / "in-place", tree)


def test_compress_keys_that_name_no_array_or_are_one_str_are_refused(tmp_path):
    tree = model()
    with pytest.raises(ValueError, match="compress_keys names 2 keys that are no array of the tree: 'step', 'x'"):
        ckpt.save(tmp_path / "c", tree, compress_keys=["w", "x", "step"])
    with pytest.raises(TypeError, match="compress_keys must be an iterable of keys"):
        ckpt.save(tmp_path / "c", tree, compress_keys="w")
    with ckpt.CheckpointManager(tmp_path / "steps") as manager:
        with pytest.raises(TypeError, match=r"compress_keys must hold keys \(str\), not 1"):
            manager.save(1, tree, compress_keys=[1])
    assert not (tmp_path / "c").exists() and manager.all_steps() == []


def test_compress_is_refused_with_in_place(tmp_path):
    tree = model()
    with pytest.raises(ckpt.InvalidArgumentError, match="CKPT_SAVE_COMPRESS cannot be combined with "
                                                        "CKPT_SAVE_IN_PLACE"):
        ckpt.save(tmp_path / "c", tree, compress=True, in_place=True)
    with ckpt.CheckpointManager(tmp_path / "steps") as manager:
        with pytest.raises(ckpt.InvalidArgumentError, match="CKPT_SAVE_COMPRESS cannot be combined"):
            manager.save(1, tree, compress=True, in_place=True)
    with pytest.raises(ValueError, match="compress must be True or False"):
        ckpt.save(tmp_path / "c", tree, compress="yes")
    assert not (tmp_path / "c").exists()

"""ckpt.save(copy_on_write=True) on one process: save() returns once the numpy buffers are write-protected, the
trainer overwrites them at once, and the checkpoint holds, bit for bit, what they held at the call."""

import numpy as np
import pytest

import ckpt


def test_a_copy_on_write_save_overwritten_right_after_it_returns_restores_the_values_at_the_call(tmp_path,
                                                                                                 monkeypatch):
    # In a build with the fault hooks the copy waits 200 ms, so that every write below comes before it.
    monkeypatch.setenv("CKPT_FAULT_STAGING_PAUSE_MS", "200")
    rng = np.random.default_rng(7)
    tree = {"w": rng.standard_normal((1024, 1024), dtype=np.float32),  # 4 MiB: protected whole pages
            "m": rng.integers(0, 2**62, size=(3, 100_001), dtype=np.int64),  # ends inside pages
            "bias": np.arange(17, dtype=np.float64),  # inside one page: copied at the call
            "step": 12}
    at_call = {key: np.copy(value) for key, value in tree.items() if isinstance(value, np.ndarray)}
    request = ckpt.save(tmp_path / "c", tree, copy_on_write=True)
    for key in at_call:
        tree[key][...] = 0  # the next training step writes every page
        tree[key].reshape(-1)[::997] = 3
    request.wait()
    restored = ckpt.restore(tmp_path / "c", tree)
    for key, value in at_call.items():
        assert restored[key].tobytes() == value.tobytes(), key
    assert restored["step"] == 12


def test_copy_on_write_must_be_true_or_false_and_is_refused_with_in_place(tmp_path):
    for value in ("yes", None, 2):
        with pytest.raises(ValueError, match="copy_on_write must be True or False"):
            ckpt.save(tmp_path / "c", {"x": np.ones(4)}, copy_on_write=value)
    with pytest.raises(ckpt.InvalidArgumentError, match="CKPT_SAVE_IN_PLACE"):
        ckpt.save(tmp_path / "c", {"x": np.ones(4)}, copy_on_write=True, in_place=True)

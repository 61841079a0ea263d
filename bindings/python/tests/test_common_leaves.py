"""Python values in a tree (bool, int, float, str, bytes) come back as the type they were saved as, and a restore
target asking for another type is refused, never handed a value of a type it did not ask for."""

import numpy as np
import pytest

import ckpt


def test_python_values_come_back_as_saved(tmp_path):
    tree = {"flag": True, "step": 7, "lr": 0.5, "name": "run-7", "blob": b"\x00\x01"}
    ckpt.save(tmp_path / "c", tree).wait()
    assert ckpt.restore(tmp_path / "c", {"flag": False, "step": 0, "lr": 0.0, "name": "", "blob": b""}) == tree


@pytest.mark.parametrize("saved, target, target_type, saved_type", [
    (7, "", "str", "int"), ("7", 0, "int", "str"), (0.5, 0, "int", "float"), (1, 0.0, "float", "int"),
    (True, 0, "int", "bool"), (b"7", "", "str", "bytes"), (np.zeros(3), 0, "int", "array")])
def test_a_target_leaf_of_another_type_is_refused_naming_the_key_and_both_types(tmp_path, saved, target,
                                                                                 target_type, saved_type):
    ckpt.save(tmp_path / "c", {"value": saved, "other": 1}).wait()
    with pytest.raises(ckpt.MismatchError) as refused:
        ckpt.restore(tmp_path / "c", {"value": target, "other": 1}, partial=True)
    for part in ("'value'", f"type {target_type}", f"type {saved_type}"):
        assert part in str(refused.value)

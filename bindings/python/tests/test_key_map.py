"""Restores through a key map (ckpt.restore's and CheckpointManager.restore's key_map= and missing=): a model whose
parameter paths changed since the save restores from the older checkpoint, what the checkpoint lacks is refused,
warned of or ignored as asked, and every refusal names the keys on each side."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import ckpt

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")


def linen_tree():
    """A Linen-style tree: params/Dense_<i>/{kernel,bias}, and the step."""
    return {"params": {f"Dense_{i}": {"kernel": np.full((3, 2), i + 1, np.float32), "bias": np.full(2, -i, np.float32)}
                       for i in range(2)},
            "step": 7}


def nnx_target():
    """The same model with NNX-style paths, model/layers/<i>/{kernel,bias}, and a step."""
    return {"model": {"layers": [{"kernel": np.zeros((3, 2), np.float32), "bias": np.zeros(2, np.float32)}
                                 for _ in range(2)]},
            "step": 0}


def nnx_to_linen(key):
    return re.sub(r"^model/layers/(\d+)/", r"params/Dense_\1/", key)


@pytest.fixture
def linen(tmp_path):
    path = tmp_path / "linen"
    ckpt.save(path, linen_tree()).wait()
    return path


def check_nnx(restored):
    for i in range(2):
        assert np.array_equal(restored["model"]["layers"][i]["kernel"], np.full((3, 2), i + 1, np.float32))
        assert np.array_equal(restored["model"]["layers"][i]["bias"], np.full(2, -i, np.float32))
    assert restored["step"] == 7


def test_a_callable_key_map_restores_linen_paths_into_nnx_paths(linen):
    check_nnx(ckpt.restore(linen, nnx_target(), key_map=nnx_to_linen))


def test_a_dict_key_map_restores_renamed_arrays_and_values(tmp_path):
    ckpt.save(tmp_path / "c", {"w_old": np.arange(4.0), "lr_old": 0.5, "same": np.ones(2)}).wait()
    target = {"w": np.zeros(4), "lr": 0.0, "same": np.zeros(2)}
    restored = ckpt.restore(tmp_path / "c", target, key_map={"w": "w_old", "lr": "lr_old"})
    assert np.array_equal(restored["w"], np.arange(4.0))
    assert restored["lr"] == 0.5
    assert np.array_equal(restored["same"], np.ones(2))  # a key the map does not name is looked up as itself


def test_a_mapped_value_keeps_the_type_check_of_its_saved_key(tmp_path):
    ckpt.save(tmp_path / "c", {"count": 3}).wait()
    with pytest.raises(ckpt.MismatchError, match="'name'.*type str.*saved a value of type int"):
        ckpt.restore(tmp_path / "c", {"name": ""}, key_map={"name": "count"})


def test_a_missing_key_is_refused_naming_what_it_was_looked_up_as_and_the_keys_nobody_asked_for(linen):
    def misspelt(key):
        return nnx_to_linen(key).replace("Dense_1/kernel", "Dense_1/kernal")

    with pytest.raises(ckpt.MismatchError) as raised:
        ckpt.restore(linen, nnx_target(), key_map=misspelt, partial=True)
    message = str(raised.value)
    assert "1 keys of this rank's state are not in the checkpoint" in message, message
    assert "'model/layers/1/kernel' (looked up as 'params/Dense_1/kernal')" in message, message
    assert "the checkpoint's keys this rank did not ask for: 'params/Dense_1/kernel'" in message, message


def test_without_a_map_the_refusal_names_the_keys_of_the_target_and_of_the_checkpoint(linen):
    with pytest.raises(ckpt.MismatchError) as raised:
        ckpt.restore(linen, nnx_target())
    message = str(raised.value)
    assert "4 keys of this rank's state are not in the checkpoint: 'model/layers/0/bias'" in message, message
    assert "did not ask for: 'params/Dense_0/bias', 'params/Dense_0/kernel'" in message, message


def test_missing_warn_restores_the_rest_and_keeps_the_targets_leaves_for_what_the_checkpoint_lacks(linen, capfd):
    target = nnx_target()
    target["model"]["head"] = np.full(2, 9, np.float32)
    target["note"] = "new"
    restored = ckpt.restore(linen, target, key_map=nnx_to_linen, missing="warn")
    check_nnx(restored)
    assert np.array_equal(restored["model"]["head"], np.full(2, 9, np.float32))
    assert restored["note"] == "new"
    err = capfd.readouterr().err
    assert "1 keys of this rank's state are not in the checkpoint: 'model/head'" in err, err


def test_missing_ignore_keeps_the_targets_leaves_silently_and_partial_skips_the_unasked_keys(linen, capfd):
    target = {"model": {"layers": [{"kernel": np.zeros((3, 2), np.float32)}], "head": np.full(2, 9, np.float32)},
              "epoch": 4}
    restored = ckpt.restore(linen, target, key_map=nnx_to_linen, missing="ignore", partial=True)
    assert np.array_equal(restored["model"]["layers"][0]["kernel"], np.full((3, 2), 1, np.float32))
    assert np.array_equal(restored["model"]["head"], np.full(2, 9, np.float32))
    assert restored["epoch"] == 4
    assert "not in the checkpoint" not in capfd.readouterr().err


def test_missing_ignore_without_partial_still_refuses_the_keys_nobody_asked_for(linen):
    target = {"model": {"layers": [{"kernel": np.zeros((3, 2), np.float32)}]}}
    with pytest.raises(ckpt.MismatchError) as raised:
        ckpt.restore(linen, target, key_map=nnx_to_linen, missing="ignore")
    assert "keys of the checkpoint no rank asked for: 'params/Dense_0/bias'" in str(raised.value)


def test_missing_must_be_error_warn_or_ignore(linen):
    with pytest.raises(ValueError, match="'error', 'warn' or 'ignore', not 'skip'"):
        ckpt.restore(linen, nnx_target(), missing="skip")


def test_a_dict_naming_a_key_the_target_lacks_is_refused_naming_it(linen):
    with pytest.raises(ValueError, match="1 keys the target does not have: 'model/layer/0/kernel'"):
        ckpt.restore(linen, nnx_target(), key_map={"model/layer/0/kernel": "params/Dense_0/kernel"})


def test_a_callable_giving_no_str_is_refused_naming_the_key(linen):
    with pytest.raises(TypeError, match="a int for 'model/layers/0/bias'"):
        ckpt.restore(linen, nnx_target(), key_map=lambda key: 0)


def test_two_target_keys_mapped_to_one_saved_key_are_refused_naming_them(linen):
    with pytest.raises(ckpt.InvalidArgumentError, match="maps both '.*' and '.*' to 'params/Dense_0/bias'"):
        ckpt.restore(linen, nnx_target(), key_map=lambda key: "params/Dense_0/bias" if "bias" in key else None)


def test_a_key_map_needs_a_target(linen):
    with pytest.raises(ValueError, match="pass the target"):
        ckpt.restore(linen, key_map=nnx_to_linen)


def test_the_manager_restores_a_step_and_the_latest_through_a_key_map(tmp_path):
    with ckpt.CheckpointManager(tmp_path / "run") as manager:
        manager.save(5, linen_tree())
        manager.wait()
        check_nnx(manager.restore(5, nnx_target(), key_map=nnx_to_linen))
        check_nnx(manager.restore(None, nnx_target(), key_map=nnx_to_linen))
        target = nnx_target()
        target["extra"] = np.ones(1)
        restored = manager.restore(None, target, key_map=nnx_to_linen, missing="ignore")
        assert np.array_equal(restored["extra"], np.ones(1))
        with pytest.raises(ckpt.MismatchError, match="'extra'"):
            manager.restore(5, target, key_map=nnx_to_linen)
        with pytest.raises(ValueError, match="pass the target"):
            manager.restore(key_map=nnx_to_linen)


def readme_key_map_snippet():
    text = open(os.path.join(REPO, "bindings", "python", "README.md")).read()
    blocks = [b for b in re.findall(r"^```py\n(.*?)^```$", text, re.S | re.M) if "key_map=" in b]
    assert len(blocks) == 1, "bindings/python/README.md has one block restoring with a key map"
    return blocks[0]


def test_the_readmes_key_map_snippet_restores_linen_paths_into_an_nnx_model(linen, capfd):
    code = readme_key_map_snippet().replace('"/ckpt/linen/step-100"', repr(str(linen)))
    target = nnx_target()
    target["model"]["head"] = np.full(2, 9, np.float32)
    scope = {"ckpt": ckpt, "target": target}
    exec(code, scope)
    check_nnx(scope["state"])
    assert np.array_equal(scope["state"]["model"]["head"], np.full(2, 9, np.float32))
    assert "'model/head'" in capfd.readouterr().err


def launch(ranks, command, directory):
    launcher = os.environ.get("CKPT_LAUNCH")
    if not launcher:
        pytest.fail("CKPT_LAUNCH must name the ckpt-launch executable (ctest sets it)")
    job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "key_map_job.py")
    done = subprocess.run([launcher, "-n", str(ranks), "--timeout", "120", "--", sys.executable, job, command,
                           str(directory)], capture_output=True, text=True)
    assert done.returncode == 0, f"{command} on {ranks} ranks failed ({done.returncode}):\n{done.stdout}{done.stderr}"
    return done.stdout


def test_rows_saved_by_3_ranks_restore_as_columns_on_2_ranks_through_a_key_map(tmp_path):
    assert launch(3, "save", tmp_path).count("saved rows") == 3
    assert launch(2, "restore", tmp_path).count("restored columns through the key map") == 2


def test_jax_targets_restore_through_a_key_map(linen):
    jax = pytest.importorskip("jax")
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    target = {"model": {"layers": [{"kernel": jax.ShapeDtypeStruct((3, 2), np.float32, sharding=device),
                                    "bias": jax.ShapeDtypeStruct((2,), np.float32, sharding=device)}
                                   for _ in range(2)]},
              "step": 0}
    restored = ckpt.restore(linen, target, key_map=nnx_to_linen)
    assert isinstance(restored["model"]["layers"][1]["kernel"], jax.Array)
    check_nnx(jax.tree_util.tree_map(np.asarray, restored))

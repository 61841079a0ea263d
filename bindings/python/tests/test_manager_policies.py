"""CheckpointManager's retention policies (keep_best with best_fn and best_mode, keep_period, keep_for), the metrics
stored with each step and read back, and the refusals of what cannot work; and the README's manager with best_fn,
run as pasted."""

import datetime
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import ckpt


def readme_snippet():
    """bindings/python/README.md's manager that keeps the best steps."""
    text = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")).read()
    blocks = [b for b in re.findall(r"^```py\n(.*?)^```$", text, re.S | re.M) if "best_fn=" in b]
    assert len(blocks) == 1, "bindings/python/README.md has one block with best_fn"
    return blocks[0]


def test_the_readme_snippet_keeps_the_best_steps_and_reads_their_metrics(tmp_path):
    script = tmp_path / "best.py"
    script.write_text(readme_snippet())
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[2, 4, 5]", "{'accuracy': 0.9}"], done.stdout


def save_all(manager, metrics_by_step):
    for step, metrics in metrics_by_step.items():
        manager.save(step, {"w": np.full(2, step, np.float32)}, metrics=metrics)


def test_keep_best_min_keeps_the_lowest_scores_and_the_newest(tmp_path):
    with ckpt.CheckpointManager(tmp_path / "run", keep_best=2, best_fn=lambda m: m["loss"], best_mode="min") as m:
        save_all(m, {1: {"loss": 0.9}, 2: {"loss": 0.2}, 3: {"loss": 0.5}, 4: {"loss": 0.1}, 5: {"loss": 0.7}})
    assert m.all_steps() == [2, 4, 5]


def test_steps_without_metrics_are_judged_by_the_other_rules(tmp_path):
    with ckpt.CheckpointManager(tmp_path / "run", keep_best=1, best_fn=lambda m: m["acc"], keep_period=3) as m:
        save_all(m, {1: {"acc": 0.9}, 2: None, 3: None, 4: {"acc": 0.1}, 5: None})
    assert m.all_steps() == [1, 3, 5]  # best, on the period, newest
    assert m.metrics(1) == {"acc": 0.9} and m.metrics(2) is None and m.metrics(99) is None


def test_keep_for_keeps_the_recent_steps_beside_keep_last(tmp_path):
    with ckpt.CheckpointManager(tmp_path / "run", keep_last=1, keep_for=datetime.timedelta(hours=1)) as m:
        save_all(m, {1: None, 2: None, 3: None})
    assert m.all_steps() == [1, 2, 3]
    with ckpt.CheckpointManager(tmp_path / "other", keep_last=1) as m:
        save_all(m, {1: None, 2: None, 3: None})
    assert m.all_steps() == [3]


def test_keep_every_is_the_older_name_of_keep_period(tmp_path):
    with ckpt.CheckpointManager(tmp_path / "run", keep_last=1, keep_every=2) as m:
        save_all(m, {1: None, 2: None, 3: None})
    assert m.all_steps() == [2, 3]
    with pytest.raises(ValueError, match="older name of keep_period"):
        ckpt.CheckpointManager(tmp_path / "x", keep_every=2, keep_period=2)


def test_metrics_are_stored_in_the_step_and_read_back_as_saved(tmp_path):
    metrics = {"accuracy": 0.5, "per_class": [0.25, 0.75], "note": "epoch 1", "nested": {"a": None}}
    with ckpt.CheckpointManager(tmp_path / "run") as m:
        m.save(7, {"w": np.zeros(2)}, metrics=metrics)
        m.wait()
        assert m.metrics(7) == metrics
    with open(os.path.join(m.step_path(7), "STEP.json")) as f:
        assert json.load(f)["metrics"] == metrics


@pytest.mark.parametrize("arguments, error, match", [
    ({"keep_best": 2}, ValueError, "keep_best and best_fn go together"),
    ({"best_fn": max}, ValueError, "keep_best and best_fn go together"),
    ({"keep_best": 0, "best_fn": max}, ValueError, "keep_best must be at least 1"),
    ({"keep_best": 1, "best_fn": 3}, TypeError, "best_fn must be callable"),
    ({"keep_best": 1, "best_fn": max, "best_mode": "highest"}, ValueError, "best_mode must be 'max' or 'min'"),
    ({"keep_for": 0}, ValueError, "keep_for must be a positive number"),
    ({"keep_for": "1h"}, ValueError, "keep_for must be a positive number"),
    ({"keep_period": 0}, ValueError, "keep_period must be at least 1"),
])
def test_bad_policies_are_refused_naming_the_argument(tmp_path, arguments, error, match):
    with pytest.raises(error, match=match):
        ckpt.CheckpointManager(tmp_path / "run", **arguments)


def test_bad_metrics_and_scores_are_refused_before_the_save(tmp_path):
    with ckpt.CheckpointManager(tmp_path / "run", keep_best=1, best_fn=lambda m: m["acc"]) as m:
        tree = {"w": np.zeros(2)}
        with pytest.raises(TypeError, match="metrics of step 1 must be a mapping"):
            m.save(1, tree, metrics=[("acc", 1.0)])
        with pytest.raises(TypeError, match="metrics of step 1 cannot be stored as JSON"):
            m.save(1, tree, metrics={"acc": 1.0, "weights": np.zeros(2)})
        with pytest.raises(ValueError, match="metrics of step 1 cannot be stored as JSON"):
            m.save(1, tree, metrics={"acc": float("nan")})
        with pytest.raises(ValueError, match="best_fn returned 'high'"):
            ckpt.CheckpointManager.save(m, 1, tree, metrics={"acc": "high"})
        with pytest.raises(ckpt.InvalidArgumentError, match="more than the limit"):
            m.save(1, tree, metrics={"acc": 1.0, "log": "x" * (1 << 20)})
        assert m.all_steps() == []

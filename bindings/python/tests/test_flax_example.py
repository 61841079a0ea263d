"""examples/jax/flax_train.py, a flax + optax training run on one process with 4 CPU devices, is killed after step 13
(its last checkpoint: step 10) and resumed. Resumed, it continues as the run that was never interrupted: bit for bit
on the same (data=2, model=2) mesh, in one process or across two, and within float rounding on a (data=4, model=1)
mesh."""

import os
import re
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

import multiprocess

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "jax",
                       "flax_train.py")
STEPS, KILL_AT, SAVE_EVERY = 20, 13, 5
LAST_SAVED = KILL_AT - KILL_AT % SAVE_EVERY
RESUMED = list(range(LAST_SAVED + 1, STEPS + 1))
ARGS = ("--steps", str(STEPS), "--save-every", str(SAVE_EVERY))

# Across meshes the losses agree to a relative 1e-5, not bit for bit: the float32 sums of a step are grouped
# differently. On (data=2, model=2) the output layer's contraction over the hidden units is two partial sums added by
# an all-reduce, and the gradients of the batch are summed over 2 data shards; on (data=4, model=1) the contraction
# is one local sum and the gradients come from 4 shards. Each regrouping moves a result by about one float32 ulp (a
# relative 1.2e-7); the 10 steps after the resume keep that within a few ulps (seen: at most 2, with JAX 0.10 and
# 0.12), and 1e-5 leaves a wide margin, while anything the checkpoint lost moves the losses by far more (seen,
# relative: 0.06 with AdamW's step count reset, 0.26 with its moments, 0.24 with a fresh PRNG key, 0.46 with the
# data position back at 0).
ACROSS_MESHES_RTOL = 1e-5


def losses_of(output):
    """{step: loss} as the example printed them, read back exactly from float.hex()."""
    return {int(step): float.fromhex(loss) for step, loss in re.findall(r"^step (\d+) loss \S+ (\S+)$", output, re.M)}


def train(root, mesh, *args, killed=False):
    """Runs the example on one process with 4 CPU devices; returns its output."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    run = subprocess.run([sys.executable, EXAMPLE, str(root), "--mesh", mesh, *ARGS, *args], env=env,
                         capture_output=True, text=True, timeout=120)
    expected = -signal.SIGKILL if killed else 0
    assert run.returncode == expected, f"exit {run.returncode}, expected {expected}\n{run.stdout}\n{run.stderr}"
    return run.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The uninterrupted run's losses, and a directory holding what the killed run left."""
    tmp = tmp_path_factory.mktemp("flax")
    uninterrupted = losses_of(train(tmp / "uninterrupted", "2x2"))
    assert sorted(uninterrupted) == list(range(1, STEPS + 1))
    before_kill = losses_of(train(tmp / "killed", "2x2", "--kill-at", str(KILL_AT), killed=True))
    assert before_kill == {step: uninterrupted[step] for step in range(1, KILL_AT + 1)}
    return uninterrupted, tmp / "killed"


def resumable(killed, tmp_path):
    """A copy of the killed run's checkpoints, so that every test resumes from the same ones."""
    shutil.copytree(killed, tmp_path / "run")
    return tmp_path / "run"


def test_a_run_resumed_on_the_same_mesh_repeats_the_uninterrupted_losses_bit_for_bit(runs, tmp_path):
    uninterrupted, killed = runs
    out = train(resumable(killed, tmp_path), "2x2")
    assert f"mesh 2x2: resumed from step {LAST_SAVED}, data position {LAST_SAVED}" in out, out
    assert losses_of(out) == {step: uninterrupted[step] for step in RESUMED}


def test_a_run_resumed_on_2_processes_with_the_same_mesh_repeats_the_losses_bit_for_bit(runs, tmp_path):
    """2 processes x 2 devices. The bits are those of one process: each all-reduce of the step has two participants
    on a 2x2 mesh (a "data" or a "model" pair), and a sum of two is the same whichever is added first, so the
    collectives between processes (gloo) give what those inside one process give."""
    uninterrupted, killed = runs
    out = multiprocess.run(EXAMPLE, 2, 2, resumable(killed, tmp_path), "--mesh", "2x2", *ARGS)[0]
    assert f"mesh 2x2: resumed from step {LAST_SAVED}, data position {LAST_SAVED}" in out, out
    assert losses_of(out) == {step: uninterrupted[step] for step in RESUMED}


def test_a_run_resumed_on_another_mesh_repeats_the_losses_within_float_rounding(runs, tmp_path):
    uninterrupted, killed = runs
    out = train(resumable(killed, tmp_path), "4x1")
    assert f"mesh 4x1: resumed from step {LAST_SAVED}, data position {LAST_SAVED}" in out, out
    resumed = losses_of(out)
    assert sorted(resumed) == RESUMED
    np.testing.assert_allclose([resumed[s] for s in RESUMED], [uninterrupted[s] for s in RESUMED],
                               rtol=ACROSS_MESHES_RTOL)

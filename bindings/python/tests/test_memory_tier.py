"""The memory tier from Python: ckpt.save's tier, CheckpointManager's memory_tier and storage_every, and
ckpt.jax.JitSaver's tier reach the library, bad values are refused before any work, and a manager resumes from the
node agent's memory."""

import os
import re
import shutil
import subprocess
import tempfile
import textwrap
import time
import uuid

import numpy as np
import pytest

import ckpt

JOB_IDENTITY_VARIABLES = ("CKPT_JOB_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")


def tree_at(step):
    """The state saved at `step`: every value depends on it."""
    return {"w": np.arange(12, dtype=np.float32).reshape(3, 4) + 100 * step, "bias": np.full(5, step, np.float64),
            "step": step}


@pytest.fixture
def anonymous_job(monkeypatch):
    """A job without an identity, whatever the environment running the tests says."""
    for name in JOB_IDENTITY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def job_with_agent(monkeypatch):
    """A job identity of its own and a fresh memory root for its agent; the agent is stopped and the root removed
    at the end, whatever happens. Yields the job's identity."""
    job_id = f"python-memory-tier-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    shm_root = tempfile.mkdtemp(prefix="ckpt-python-test-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    for name in JOB_IDENTITY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CKPT_JOB_ID", job_id)
    monkeypatch.setenv("CKPT_AGENT_SHM_ROOT", shm_root)
    monkeypatch.setenv("CKPT_AGENT_IDLE_S", "60")  # should stopping it fail, the agent still leaves soon
    try:
        yield job_id
    finally:
        stop_agent(job_id)
        shutil.rmtree(shm_root, ignore_errors=True)


def stop_agent(job_id):
    """SIGTERM to the job's agent, then up to 5 s for it to leave."""
    pattern = f"ckpt-agent --job-id {job_id} "
    # pkill and pgrep must not get the sanitizer runtime that the ASan build preloads into the tests: it deadlocks
    # them at start.
    env = {name: value for name, value in os.environ.items() if name != "LD_PRELOAD"}
    subprocess.run(["pkill", "-TERM", "-f", pattern], check=False, env=env)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and subprocess.run(["pgrep", "-f", pattern], capture_output=True,
                                                         env=env).returncode == 0:
        time.sleep(0.1)


def wait_for_file(path, timeout=20):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def test_a_tier_is_storage_memory_or_both(tmp_path):
    for tier in ("disk", "MEMORY", 1, None):
        with pytest.raises(ValueError, match="tier must be 'storage', 'memory' or 'both'"):
            ckpt.save(tmp_path / "c", tree_at(1), tier=tier)
    assert not (tmp_path / "c").exists()
    with ckpt.CheckpointManager(tmp_path / "run") as manager:
        with pytest.raises(ValueError, match="tier must be"):
            manager.save(1, tree_at(1), tier="disk")
        assert manager.all_steps() == []


def test_manager_memory_options_are_checked(tmp_path):
    with pytest.raises(ValueError, match="memory_tier must be True or False"):
        ckpt.CheckpointManager(tmp_path / "run", memory_tier="yes")
    with pytest.raises(ValueError, match="storage_every must be at least 1"):
        ckpt.CheckpointManager(tmp_path / "run", memory_tier=True, storage_every=0)
    with pytest.raises(ValueError, match="storage_every applies to the memory tier"):
        ckpt.CheckpointManager(tmp_path / "run", storage_every=2)
    with ckpt.CheckpointManager(tmp_path / "run", memory_tier=True, storage_every=2) as manager:
        assert manager.memory_tier and manager.storage_every == 2
        with pytest.raises(ValueError, match="tier='storage' cannot override memory_tier=True"):
            manager.save(1, tree_at(1), tier="storage")


@pytest.mark.parametrize("tier", ["memory", "both"])
def test_a_save_to_memory_without_a_job_identity_names_CKPT_JOB_ID(tmp_path, anonymous_job, tier):
    with pytest.raises(ckpt.InvalidArgumentError, match="CKPT_JOB_ID"):
        ckpt.save(tmp_path / "c", tree_at(1), tier=tier)
    assert not (tmp_path / "c").exists()


def test_a_memory_tier_manager_without_a_job_identity_names_CKPT_JOB_ID(tmp_path, anonymous_job):
    with ckpt.CheckpointManager(tmp_path / "run", memory_tier=True) as manager:
        with pytest.raises(ckpt.InvalidArgumentError, match="CKPT_JOB_ID"):
            manager.save(1, tree_at(1))
        assert manager.all_steps() == []
    with ckpt.CheckpointManager(tmp_path / "plain") as plain:
        with pytest.raises(ckpt.InvalidArgumentError, match="CKPT_JOB_ID"):
            plain.save(1, tree_at(1), tier="memory")
        assert plain.all_steps() == []


def test_a_manager_resumes_from_memory_the_step_storage_never_saw(tmp_path, job_with_agent):
    root = tmp_path / "run"
    trainer = ckpt.Context(rank=0, world_size=1, arena_bytes=64 << 20)
    resumed = ckpt.Context(rank=0, world_size=1, arena_bytes=64 << 20)
    try:
        # The trainer's context stays attached while the fresh one resumes: a job that ended cleanly lets its agent
        # go. Its manager closes first, releasing the root to the fresh one.
        with ckpt.CheckpointManager(root, memory_tier=True, storage_every=2, context=trainer) as manager:
            for step in (1, 2, 3):
                manager.save(step, tree_at(step))
                manager.wait()
            wait_for_file(os.path.join(manager.step_path(2), "MANIFEST"))  # written by the agent
        with ckpt.CheckpointManager(root, memory_tier=True, storage_every=2, context=resumed) as fresh:
            assert fresh.resume_step() == 3, "the step held in memory alone is the one to resume from"
            untargeted = fresh.restore()  # the saved pytree says every array's shape and dtype
            restored = fresh.restore(target=tree_at(0))
            assert not os.path.exists(fresh.step_path(3)), "step 3 reached storage"
            assert not os.path.exists(fresh.step_path(1)), "step 1 reached storage"
            assert fresh.latest_step() == 2
        for tree in (restored, untargeted):
            assert tree["step"] == 3
            np.testing.assert_array_equal(tree["w"], tree_at(3)["w"])
            np.testing.assert_array_equal(tree["bias"], tree_at(3)["bias"])
        assert untargeted["w"].dtype == np.float32 and untargeted["bias"].dtype == np.float64
    finally:
        resumed.close()
        trainer.close()


def test_a_jit_saver_saves_each_step_into_the_memory_tier(tmp_path, job_with_agent):
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    import ckpt.jax

    sharding = NamedSharding(Mesh(np.array(jax.devices()[:1]), ("x",)), PartitionSpec("x"))
    with pytest.raises(ValueError, match="tier must be"):
        ckpt.jax.JitSaver({"w": sharding}, tier="disk")
    state = {"w": jax.device_put(jnp.arange(32.0, dtype=jnp.float32).reshape(8, 4), sharding)}
    saver = ckpt.jax.JitSaver({"w": sharding}, tier="memory")
    step = jax.jit(lambda state, path: (saver(path, state), {"w": state["w"] + 1})[1])
    for i in (1, 2):
        state = step(state, ckpt.jax.path_array(tmp_path / f"step-{i}"))
    jax.block_until_ready(state)
    assert saver.wait()
    assert not (tmp_path / "step-2").exists(), "a save to memory reached storage"
    restored = ckpt.restore(tmp_path / "step-2", {"w": jax.ShapeDtypeStruct((8, 4), jnp.float32, sharding=sharding)})
    np.testing.assert_array_equal(np.asarray(restored["w"]), np.arange(32.0, dtype=np.float32).reshape(8, 4) + 1)
    untargeted = ckpt.restore(tmp_path / "step-2")  # from memory too: the pytree the FFI saved has the shapes
    np.testing.assert_array_equal(untargeted["w"], np.arange(32.0, dtype=np.float32).reshape(8, 4) + 1)
    saver.close()


def test_a_jit_saver_to_memory_without_a_job_identity_names_CKPT_JOB_ID(tmp_path, anonymous_job):
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    import ckpt.jax

    sharding = NamedSharding(Mesh(np.array(jax.devices()[:1]), ("x",)), PartitionSpec())
    saver = ckpt.jax.JitSaver({"w": sharding}, tier="memory")
    step = jax.jit(lambda w, path: (saver(path, {"w": w}), w)[1])
    with pytest.raises(Exception, match="CKPT_JOB_ID"):
        jax.block_until_ready(step(jax.device_put(jnp.ones(4), sharding), ckpt.jax.path_array(tmp_path / "c")))
    assert not (tmp_path / "c").exists()
    saver.close()


def test_the_readmes_memory_tier_loop_resumes_from_memory_and_saves_each_step_once(tmp_path, job_with_agent):
    import test_readme

    text = open(os.path.join(test_readme.REPO, "README.md")).read()
    loops = [b for b in re.findall(r"^  ```python\n(.*?)^  ```$", text, re.S | re.M) if "memory_tier=True" in b]
    assert len(loops) == 1, "README.md has one memory tier loop"
    root = str(tmp_path / "run-7")
    code = textwrap.dedent(loops[0]).replace('"/ckpt/run-7"', repr(root))
    first, second = [], []
    exec(code, test_readme.resume_loop_globals(3, first))
    exec(code, test_readme.resume_loop_globals(5, second))  # steps 1-3 are in the agent's memory only
    assert first == [1, 2, 3] and second == [4, 5], (first, second)
    with ckpt.CheckpointManager(root, memory_tier=True, storage_every=100) as manager:
        assert manager.resume_step() == 5
        restored = manager.restore(target={"w": np.zeros(4, np.float32), "steps": 0})
    assert restored["steps"] == 5 and np.array_equal(restored["w"], np.full(4, 5, np.float32))

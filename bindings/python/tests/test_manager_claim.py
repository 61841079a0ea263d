"""A manager root belongs to one job at a time: a second job, every rank of it, is refused naming the holder, and
the holder's steps stay intact, and a manager closed or dropped releases it. And a manager a script never closes
still commits its last save and exits quietly."""

import gc
import os
import subprocess
import sys

import numpy as np
import pytest

import ckpt

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "manager_job.py")


def launcher():
    found = os.environ.get("CKPT_LAUNCH")
    assert found, "CKPT_LAUNCH must name the ckpt-launch executable (ctest sets it)"
    return found


def test_a_second_job_on_the_root_is_refused_on_every_rank_and_the_holders_steps_stay(tmp_path):
    root = str(tmp_path / "run")
    holder = subprocess.Popen([sys.executable, JOB, "hold", root], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        line = holder.stdout.readline()
        assert line.startswith("holding "), f"the holder said {line!r}; stderr:\n{holder.stderr.read()}"
        holder_pid = int(line.split()[1])
        intruder = subprocess.run([launcher(), "-n", "2", "--timeout", "60", "--", sys.executable, JOB, "intrude", root,
                                   str(holder_pid)], capture_output=True, text=True, timeout=90)
        assert intruder.returncode == 0, f"the second job ({intruder.returncode}):\n{intruder.stdout}{intruder.stderr}"
        assert intruder.stdout.count("refused") == 2, intruder.stdout
        out, err = holder.communicate("go on\n", timeout=60)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert holder.returncode == 0, f"the holder ({holder.returncode}):\n{out}{err}"
    assert "the holder's steps are intact" in out
    assert sorted(name for name in os.listdir(root) if name.startswith("step-")) == [
        "step-000000000004", "step-000000000005"]


def test_a_manager_never_closed_commits_its_last_save_and_exits_quietly(tmp_path):
    root = str(tmp_path / "run")
    done = subprocess.run([sys.executable, JOB, "never-close", root], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{done.returncode}:\n{done.stdout}{done.stderr}"
    assert done.stderr == ""
    with ckpt.CheckpointManager(root) as manager:
        assert manager.all_steps() == [2, 3]
        assert manager.latest_step() == 3
        restored = manager.restore()
    assert restored["step"] == 3
    np.testing.assert_array_equal(restored["w"], np.arange(64, dtype=np.float32) * 3)


def test_a_manager_dropped_without_close_releases_its_root(tmp_path):
    dropped = ckpt.CheckpointManager(tmp_path / "run")
    dropped.save(1, {"step": 1})
    dropped.wait()
    del dropped
    gc.collect()
    with ckpt.CheckpointManager(tmp_path / "run") as again:
        again.wait()
        assert again.all_steps() == [1]


def test_a_second_manager_in_one_process_is_refused_until_the_first_closes(tmp_path):
    with ckpt.CheckpointManager(tmp_path / "run", keep_last=1) as first:
        first.save(1, {"step": 1})
        first.wait()
        with pytest.raises(ckpt.AlreadyExistsError, match=f"pid {os.getpid()}"):
            ckpt.CheckpointManager(tmp_path / "run")
        assert first.all_steps() == [1]
    with ckpt.CheckpointManager(tmp_path / "run") as second:
        assert second.all_steps() == [1]


def test_a_closed_manager_still_answers_queries_and_refuses_to_save_or_restore(tmp_path):
    with ckpt.CheckpointManager(tmp_path / "run") as first:
        first.save(1, {"step": 1})
    with ckpt.CheckpointManager(tmp_path / "run") as second:  # the closed one holds the root no more
        second.save(2, {"step": 2})
    assert first.latest_step() == 2 and first.all_steps() == [1, 2], "read afresh from the root"
    assert first.step_path(2).endswith("step-000000000002")
    first.close()  # again: nothing happens
    for attempt in (lambda: first.save(3, {"step": 3}), lambda: first.restore(), lambda: first.restore(2),
                    first.resume_step):
        with pytest.raises(ValueError, match="is closed"):
            attempt()
    assert first.all_steps() == [1, 2]

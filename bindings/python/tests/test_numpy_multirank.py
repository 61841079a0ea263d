"""numpy trees on several ranks started by ckpt-launch, the way a C or MPI job starts them: resharding 1 -> 3 -> 2
ranks, the manager's retention and resume, and mismatches refused on every rank."""

import os
import subprocess
import sys

import pytest

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "numpy_job.py")


def launcher():
    found = os.environ.get("CKPT_LAUNCH")
    if not found:
        pytest.fail("CKPT_LAUNCH must name the ckpt-launch executable (ctest sets it)")
    return found


def launch(ranks, command, directory):
    done = subprocess.run([launcher(), "-n", str(ranks), "--timeout", "120", "--", sys.executable, JOB, command,
                           str(directory)], capture_output=True, text=True)
    assert done.returncode == 0, f"{command} on {ranks} ranks failed ({done.returncode}):\n{done.stdout}{done.stderr}"
    return done.stdout


def test_reshard_1_to_3_to_2_ranks(tmp_path):
    launch(1, "save-whole", tmp_path)
    assert launch(3, "reshard-rows", tmp_path).count("restored rows") == 3
    assert launch(2, "reshard-columns", tmp_path).count("restored columns") == 2


def test_manager_retention_and_resume_on_2_ranks(tmp_path):
    assert launch(2, "manager", tmp_path).count("retention and resume") == 2


def test_mismatches_fail_on_every_rank(tmp_path):
    assert launch(2, "mismatch", tmp_path).count("refused on every rank") == 2


def test_replicas_that_differ_fail_the_save_on_3_ranks(tmp_path):
    assert launch(3, "check-replicas", tmp_path).count("a replica that differs is named before the commit") == 3


def test_incremental_steps_under_retention_restore_exactly_on_3_ranks(tmp_path):
    assert launch(3, "incremental", tmp_path).count("incremental steps under retention restore exactly") == 3


def test_a_context_bootstrapped_through_the_jobs_allgather_on_3_ranks(tmp_path):
    assert launch(3, "allgather", tmp_path).count("bootstrapped through the job's allgather") == 3


def test_a_context_over_the_jobs_collectives_on_3_ranks(tmp_path):
    assert launch(3, "collectives", tmp_path).count("saved and restored over the job's collectives") == 3

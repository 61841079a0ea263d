"""Checkpoints on S3 from Python and JAX, against the real server that the ctest fixture s3_server starts
(tools/s3_server.sh; CKPT_S3_TEST_ENV names its settings file): the job scripts of the POSIX tests, pointed at an
s3:// root instead of a directory."""

import os
import uuid

import pytest

import multiprocess
from test_numpy_multirank import launch

JAX_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jax_job.py")


@pytest.fixture
def s3_root(monkeypatch):
    """A fresh prefix of the test bucket, with the server's endpoint and keys in the environment (AWS_*)."""
    settings = os.environ.get("CKPT_S3_TEST_ENV")
    if not settings:
        pytest.fail("CKPT_S3_TEST_ENV must name the S3 server's settings file (ctest sets it)")
    with open(settings) as f:
        values = dict(line.strip().split("=", 1) for line in f if "=" in line)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return f"s3://{values['CKPT_S3_TEST_BUCKET']}/python-{uuid.uuid4().hex}"


def test_jax_saved_by_2_processes_is_restored_by_1_process_with_another_mesh(s3_root):
    multiprocess.run(JAX_JOB, 2, 2, "save", s3_root)
    outputs = multiprocess.run(JAX_JOB, 1, 4, "restore", s3_root, "model4")
    assert "elements checked" in outputs[0]


def test_a_manager_on_s3_keeps_what_its_retention_says_and_resumes_on_2_ranks(s3_root):
    assert launch(2, "manager", s3_root).count("retention and resume") == 2


def test_a_manager_on_s3_keeps_the_best_steps_and_reads_back_their_metrics(s3_root):
    import numpy as np

    import ckpt

    with ckpt.CheckpointManager(f"{s3_root}/run", keep_best=1, best_fn=lambda m: m["loss"], best_mode="min") as m:
        for step, loss in [(1, 0.5), (2, 0.1), (3, 0.9)]:
            m.save(step, {"w": np.full(2, step, np.float32)}, metrics={"loss": loss})
        m.wait()
        assert m.all_steps() == [2, 3]  # the lowest loss, and the newest
        assert m.metrics(2) == {"loss": 0.1} and m.metrics(3) == {"loss": 0.9} and m.metrics(1) is None
        assert m.restore(2)["w"].tolist() == [2.0, 2.0]

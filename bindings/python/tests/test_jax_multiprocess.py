"""JAX jobs of several processes on the CPU (jax.distributed, no MASTER_ADDR): a transformer-like training state
saved on 2 processes x 2 devices and restored on other meshes and process counts, every element checked; saves
issued from inside jax.jit; and processes that own no main replica."""

import os

import pytest

import multiprocess

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jax_job.py")


@pytest.fixture
def saved(tmp_path):
    multiprocess.run(JOB, 2, 2, "save", tmp_path)
    return tmp_path


def test_restore_2x2_into_one_process_with_4_devices(saved):
    outputs = multiprocess.run(JOB, 1, 4, "restore", saved, "model4")
    assert "elements checked" in outputs[0]


def test_restore_2x2_into_4_processes_with_1_device(saved):
    outputs = multiprocess.run(JOB, 4, 1, "restore", saved, "data4")
    assert all("elements checked" in out for out in outputs)


def test_restore_2x2_into_2x2(saved):
    outputs = multiprocess.run(JOB, 2, 2, "restore", saved, "model4")
    assert all("elements checked" in out for out in outputs)


def test_jit_save_through_the_ffi_custom_call(tmp_path):
    multiprocess.run(JOB, 2, 2, "jit-save", tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["step-0", "step-1", "step-2"]
    outputs = multiprocess.run(JOB, 1, 4, "jit-restore", tmp_path)
    assert "elements checked" in outputs[0]


def test_process_without_main_replica_neither_hangs_nor_fails(tmp_path):
    outputs = multiprocess.run(JOB, 2, 2, "replicas", tmp_path, timeout=90)
    assert all("every main replica on process 0" in out for out in outputs)

"""Runs a Python program as several processes of one JAX job on this machine, each with its own CPU devices, the
way a user runs a multi-process JAX job: jax.distributed over a local coordinator (JAX_COORDINATOR_ADDRESS,
NUM_PROCESSES, PROCESS_ID in the environment), no MASTER_ADDR, no launcher's rank variables. The processes are
killed if one fails or the time runs out, so a hang fails the test instead of stalling it."""

import os
import random
import socket
import subprocess
import sys
import time

# Launcher variables a test job must not inherit: ckpt must learn ranks from jax.distributed alone.
_LAUNCHER_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                       "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
                       "CKPT_STORE_PORT", "CKPT_JOB_SECRET")


def free_port():
    """A port free a moment ago, at random below Linux's ephemeral range (32768 on): a port from that range can be
    handed to another socket's connection before the coordinator binds it."""
    for _ in range(1000):
        port = random.randrange(10000, 32768)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below 32768")


def run(program, processes, devices, *args, timeout=150, env=None):
    """Runs `program args...` as `processes` processes with `devices` CPU devices each; returns their outputs.
    Raises AssertionError with every output if one fails or the timeout passes."""
    coordinator = f"127.0.0.1:{free_port()}"
    children = []
    for process_id in range(processes):
        child_env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARIABLES}
        child_env.update(env or {})
        child_env.update(JAX_COORDINATOR_ADDRESS=coordinator, NUM_PROCESSES=str(processes),
                         PROCESS_ID=str(process_id),
                         XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", JAX_PLATFORMS="cpu")
        children.append(subprocess.Popen([sys.executable, program, *map(str, args)], env=child_env,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    deadline = time.monotonic() + timeout
    failed = None
    while None in [c.poll() for c in children]:  # polls every child, so that a failed one is seen at once
        if time.monotonic() > deadline:
            failed = f"timed out after {timeout} s"
            break
        if any(c.returncode not in (None, 0) for c in children):
            failed = "a process failed"
            break
        time.sleep(0.05)
    if failed:
        for c in children:
            if c.poll() is None:
                c.kill()
    outputs = [c.communicate()[0] for c in children]
    if failed is None and any(c.returncode != 0 for c in children):
        failed = "a process failed"
    if failed:
        report = "\n".join(f"--- process {i} (exit {c.returncode}) ---\n{out}"
                           for i, (c, out) in enumerate(zip(children, outputs)))
        raise AssertionError(f"{program} on {processes} x {devices}: {failed}\n{report}")
    return outputs


def initialize_jax():
    """In a process started by run(): joins the job's jax.distributed. Returns (process_id, processes)."""
    import jax
    processes = int(os.environ["NUM_PROCESSES"])
    process_id = int(os.environ["PROCESS_ID"])
    if processes > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(num_processes=processes, process_id=process_id)  # JAX_COORDINATOR_ADDRESS
    return process_id, processes

"""Runs a Python program as N processes of one JAX job on this machine, the way a user starts one: jax.distributed
over a local coordinator (JAX_COORDINATOR_ADDRESS, NUM_PROCESSES, PROCESS_ID), each process with DEVICES CPU
devices. Kills the others when one fails or TIMEOUT passes, so a hang fails the check instead of stalling it.
Exit status: 0 when every process exits 0.

    Usage: jax_processes.py N DEVICES TIMEOUT PROGRAM [ARG...]"""

import os
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv):
    processes, devices, timeout = int(argv[0]), int(argv[1]), float(argv[2])
    command = [sys.executable, *argv[3:]]
    coordinator = f"127.0.0.1:{free_port()}"
    children = [subprocess.Popen(command, env=dict(os.environ, JAX_COORDINATOR_ADDRESS=coordinator,
                                                   NUM_PROCESSES=str(processes), PROCESS_ID=str(process_id),
                                                   XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
                                                   JAX_PLATFORMS="cpu"))
                for process_id in range(processes)]
    deadline = time.monotonic() + timeout
    while None in [child.poll() for child in children]:
        failed = [child.returncode for child in children if child.returncode not in (None, 0)]
        if failed or time.monotonic() > deadline:
            for child in children:
                child.kill()
            print(f"jax_processes: {argv[3]}: " + (f"a process exited {failed[0]}" if failed else
                                                     f"timed out after {timeout:g} s"), file=sys.stderr)
            return 1
        time.sleep(0.05)
    statuses = [child.returncode for child in children]
    if any(statuses):
        print(f"jax_processes: {argv[3]}: exit statuses {statuses}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

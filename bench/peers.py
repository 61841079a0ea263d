"""bench/peers: ckpt beside the checkpointing libraries JAX and PyTorch users compare it with, on the same sharded
state, the same directory and in the same run: Orbax (orbax-checkpoint's asynchronous StandardCheckpointer, restoring
to target shardings) and, where torch is installed, torch.distributed.checkpoint (async_save, load, with DTensors
over gloo). Prints one `name value unit` line per figure, each the median of the runs, each peer's figure beside
ckpt's and their ratio; `#` lines give the per-run values and the conditions.

Run it through bench/peers (which builds libckpt and the Python environment first); see --help.
"""

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
GIB = float(1 << 30)
PROCESSES = 4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(python, program, args, env_of, timeout):
    """Runs PROCESSES copies of `program`, the environment of process i from env_of(i); all are killed if one fails
    or the time runs out."""
    children = []
    for i in range(PROCESSES):
        env = dict(os.environ)
        env.update(env_of(i))
        children.append(subprocess.Popen([python, program, *args], env=env, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, text=True))
    deadline = time.monotonic() + timeout
    failure = None
    while None in [c.poll() for c in children]:
        if time.monotonic() > deadline:
            failure = f"timed out after {timeout} s"
        elif any(c.returncode not in (None, 0) for c in children):
            failure = "a process failed"
        if failure:
            for c in children:
                if c.poll() is None:
                    c.kill()
            break
        time.sleep(0.1)
    outputs = [c.communicate()[0] for c in children]
    if failure is None and any(c.returncode != 0 for c in children):
        failure = "a process failed"
    if failure:
        report = "\n".join(f"--- process {i} (exit {c.returncode}) ---\n{out}"
                           for i, (c, out) in enumerate(zip(children, outputs)))
        raise SystemExit(f"bench/peers: {os.path.basename(program)} {' '.join(args)}: {failure}\n{report}")


def jax_job(options, directory, peers, out, extra):
    coordinator = f"127.0.0.1:{free_port()}"
    library = os.path.join(options.build_dir, "runtime", "libckpt.so")

    def env_of(i):
        return {"JAX_COORDINATOR_ADDRESS": coordinator, "NUM_PROCESSES": str(PROCESSES), "PROCESS_ID": str(i),
                "XLA_FLAGS": "--xla_force_host_platform_device_count=1", "JAX_PLATFORMS": "cpu",
                "CKPT_LIB": library, "PYTHONPATH": os.path.join(REPO, "bindings", "python", "src"),
                # The processes share this host: the default staging arena is divided among them.
                "LOCAL_WORLD_SIZE": str(PROCESSES)}

    run_job(sys.executable, os.path.join(BENCH, "peers_jax.py"),
            ["--peers", ",".join(peers), "--dir", directory, "--mib", str(options.mib), "--arrays",
             str(options.arrays), "--out", out, *extra], env_of, options.timeout)


def dcp_job(options, directory, out, extra):
    port = str(free_port())

    def env_of(i):
        return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "RANK": str(i), "WORLD_SIZE": str(PROCESSES),
                "LOCAL_RANK": str(i), "OMP_NUM_THREADS": "1"}

    run_job(options.torch_python, os.path.join(BENCH, "peers_dcp.py"),
            ["--dir", directory, "--mib", str(options.mib), "--arrays", str(options.arrays), "--out", out, *extra],
            env_of, options.timeout)


def measured(job, peers, directory, out):
    """Runs job(peers, out, extra) to save and restore `peers` in turn, keeping their checkpoints, then for each peer
    one fresh job per layout (a resume) restoring its checkpoint; returns every peer's times, and removes the
    checkpoints."""
    job(peers, out, ["--keep"])
    with open(out) as f:
        results = json.load(f)
    for peer in peers:
        for layout in ("same", "reshard"):
            job([peer], out, ["--resume", layout])
            with open(out) as f:
                results[peer].update(json.load(f)[peer])
        shutil.rmtree(os.path.join(directory, peer))
    return results


def torch_unavailable(python):
    """Why torch.distributed.checkpoint cannot be measured with `python`, or None if it can."""
    if not python:
        return "no interpreter with torch was given (--torch-python) and this one cannot import torch"
    probe = subprocess.run([python, "-c", "import torch.distributed.checkpoint, torch.distributed.tensor"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"{python} cannot import torch.distributed.checkpoint ({last})"
    return None


def figures_of(results):
    """Per peer: blocking time, throughput until durable, restore throughputs; then ckpt's ratio to each peer."""
    gib = results["bytes"] / GIB
    f = {}
    for peer in ("ckpt", "orbax", "dcp"):
        r = results.get(peer)
        if r is None:
            continue
        f[f"{peer}_save_block_s"] = r["block_s"]
        f[f"{peer}_save_durable_gibps"] = gib / r["durable_s"]
        f[f"{peer}_restore_gibps"] = gib / r["restore_s"]
        f[f"{peer}_reshard_restore_gibps"] = gib / r["reshard_restore_s"]
        f[f"{peer}_warm_restore_gibps"] = gib / r["warm_restore_s"]
        f[f"{peer}_warm_reshard_restore_gibps"] = gib / r["warm_reshard_restore_s"]
        f[f"{peer}_resume_restore_gibps"] = gib / r["resume_restore_s"]
        f[f"{peer}_resume_reshard_restore_gibps"] = gib / r["resume_reshard_restore_s"]
        if peer != "ckpt":
            f[f"ckpt_vs_{peer}_block"] = f["ckpt_save_block_s"] / r["block_s"]
            f[f"ckpt_vs_{peer}_save_durable"] = f["ckpt_save_durable_gibps"] / f[f"{peer}_save_durable_gibps"]
            f[f"ckpt_vs_{peer}_restore"] = f["ckpt_restore_gibps"] / f[f"{peer}_restore_gibps"]
            for phase in ("reshard_restore", "warm_restore", "warm_reshard_restore", "resume_restore",
                          "resume_reshard_restore"):
                f[f"ckpt_vs_{peer}_{phase}"] = f[f"ckpt_{phase}_gibps"] / f[f"{peer}_{phase}_gibps"]
    return f


def unit_of(name):
    if name.endswith("_s"):
        return "s"
    if name.endswith("_gibps"):
        return "GiB/s"
    return "ratio"


ORDER = ["ckpt_save_block_s", "orbax_save_block_s", "dcp_save_block_s", "ckpt_vs_orbax_block", "ckpt_vs_dcp_block",
         "ckpt_save_durable_gibps", "orbax_save_durable_gibps", "dcp_save_durable_gibps",
         "ckpt_vs_orbax_save_durable", "ckpt_vs_dcp_save_durable",
         "ckpt_restore_gibps", "orbax_restore_gibps", "dcp_restore_gibps", "ckpt_vs_orbax_restore",
         "ckpt_vs_dcp_restore",
         "ckpt_reshard_restore_gibps", "orbax_reshard_restore_gibps", "dcp_reshard_restore_gibps",
         "ckpt_vs_orbax_reshard_restore", "ckpt_vs_dcp_reshard_restore",
         "ckpt_warm_restore_gibps", "orbax_warm_restore_gibps", "dcp_warm_restore_gibps",
         "ckpt_vs_orbax_warm_restore", "ckpt_vs_dcp_warm_restore",
         "ckpt_warm_reshard_restore_gibps", "orbax_warm_reshard_restore_gibps", "dcp_warm_reshard_restore_gibps",
         "ckpt_vs_orbax_warm_reshard_restore", "ckpt_vs_dcp_warm_reshard_restore",
         "ckpt_resume_restore_gibps", "orbax_resume_restore_gibps", "dcp_resume_restore_gibps",
         "ckpt_vs_orbax_resume_restore", "ckpt_vs_dcp_resume_restore",
         "ckpt_resume_reshard_restore_gibps", "orbax_resume_reshard_restore_gibps", "dcp_resume_reshard_restore_gibps",
         "ckpt_vs_orbax_resume_reshard_restore", "ckpt_vs_dcp_resume_reshard_restore"]


def caches_droppable():
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def main():
    parser = argparse.ArgumentParser(prog="bench/peers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=2048, help="size of the state (default 2048)")
    parser.add_argument("--arrays", type=int, default=64, help="F32 arrays in the state (default 64)")
    parser.add_argument("--runs", type=int, default=3, help="runs; figures are medians (default 3)")
    parser.add_argument("--dir", default=None, help="where to write (default <build>/bench-data)")
    parser.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    parser.add_argument("--torch-python", default=None,
                        help="an interpreter with torch, for torch.distributed.checkpoint (default: this one, if it "
                             "imports torch)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds a job may take (default 1800)")
    options = parser.parse_args()
    if options.torch_python is None:
        options.torch_python = sys.executable
    no_dcp = torch_unavailable(options.torch_python)

    parent = options.dir or os.path.join(options.build_dir, "bench-data")
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix="ckpt-peers.", dir=parent)
    per_run = []
    try:
        # ckpt's and Orbax's checkpoints are kept for their resume jobs; DCP's is written after both are removed.
        need = 2 * options.mib + 512
        free = shutil.disk_usage(work).free >> 20
        if free < need:
            raise SystemExit(f"bench/peers: {work} has {free} MiB free; the benchmark needs {need} MiB")
        print(f"# ckpt bench/peers {time.strftime('%Y-%m-%dT%H:%M:%S%z')}, kernel {platform.release()}, "
              f"{os.cpu_count()} cores")
        fs = subprocess.run(["df", "-T", work], capture_output=True, text=True).stdout.splitlines()[-1].split()
        print(f"# directory {work} ({fs[1]} on {fs[0]})")
        print(f"# state: {options.mib} MiB in {options.arrays} F32 arrays (pseudo-random), {PROCESSES} processes "
              "with 1 CPU device each, mesh data=2 x model=2: even arrays split over both axes, odd ones over model "
              "only (2 data-parallel replicas); reshard restore: into a mesh model=4, every array split by columns")
        print("# block: until the save call returned; durable: until the save's wait and sync(2) returned on every "
              "process; restore: until the restored arrays were ready on every process; the slowest process counts; "
              "every restored element checked; warm_*: the same restores right after each process touched and "
              "freed as much memory as it restores (bench/peers_memory.py), so that no peer's outputs land in memory "
              "colder than another's; resume_*: each restore alone in a fresh job (new processes) started after the "
              "save, as a training job resuming from the checkpoint, so that no peer's outputs reuse memory an earlier "
              "phase freed")
        print(f"# runs: {options.runs}, the peers' order alternating between runs")
        for run in range(options.runs):
            order = ["ckpt", "orbax"] if run % 2 == 0 else ["orbax", "ckpt"]
            print(f"bench/peers: run {run + 1}/{options.runs}: {' then '.join(order)}", file=sys.stderr)
            results = measured(lambda peers, out, extra: jax_job(options, work, peers, out, extra), order, work,
                               os.path.join(work, f"jax-{run}.json"))
            if not no_dcp:
                print(f"bench/peers: run {run + 1}/{options.runs}: torch.distributed.checkpoint", file=sys.stderr)
                results["dcp"] = measured(lambda _, out, extra: dcp_job(options, work, out, extra), ["dcp"], work,
                                          os.path.join(work, f"dcp-{run}.json"))["dcp"]
            per_run.append(figures_of(results))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    for name in ORDER:
        values = [f[name] for f in per_run if name in f]
        if values:
            print(f"{name} {statistics.median(values):.3f} {unit_of(name)}")
        elif "dcp" in name:
            print(f"{name} skipped {unit_of(name)}")
    for name in ORDER:
        values = [f[name] for f in per_run if name in f]
        if values:
            print(f"# {name} per run: {' '.join(f'{v:.3f}' for v in values)}")
    if no_dcp:
        print(f"# dcp: skipped: {no_dcp}")
    print("# page cache dropped before every restore" if caches_droppable() else
          "# page cache could not be dropped (needs root): restores may have been served from memory")


if __name__ == "__main__":
    main()

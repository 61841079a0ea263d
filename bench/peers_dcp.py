"""One rank of bench/peers' torch.distributed.checkpoint job: the same state as peers_jax.py (the same size, arrays,
mesh and placements) as DTensors on CPU over gloo, saved with dcp.async_save and loaded with dcp.load, in place, into
the same mesh and into another one, each cold and then right after the rank touched and freed as much memory as
it loads (peers_memory.py). --keep leaves the checkpoint in DIR/dcp; --resume same|reshard is a fresh job loading
it once, into the same mesh or the other one, as a training job resuming does, after making one small DTensor (what
torch does once per process is not timed). Started by bench/peers with torchrun's variables (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT); rank 0 writes the slowest rank's times to --out.
"""

import argparse
import json
import os
import shutil
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard

from peers_memory import touch_and_free

ROWS = 1024


def slowest(seconds):
    value = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float(value.item())


def drop_caches():
    os.sync()
    dist.barrier()
    if dist.get_rank() == 0:
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        except OSError:
            pass
    dist.barrier()


def expected_block(index, rows, columns, offset, shape):
    """Deterministic incompressible values of array `index` at the box (offset, shape), whatever the layout."""
    r = torch.arange(offset[0], offset[0] + shape[0], dtype=torch.float64).unsqueeze(1)
    c = torch.arange(offset[1], offset[1] + shape[1], dtype=torch.float64).unsqueeze(0)
    return torch.frac((r * columns + c + index * rows * columns) * 0.6180339887498949).to(torch.float32)


def dtensor(index, mesh, placements, rows, columns, fill):
    """A DTensor of [rows, columns] laid out by `placements`, each rank creating only its local block."""
    local_shape, offset = local_box(mesh, placements, rows, columns)
    local = expected_block(index, rows, columns, offset, local_shape) if fill else torch.empty(local_shape)
    return DTensor.from_local(local, mesh, placements, run_check=False, shape=(rows, columns),
                              stride=(columns, 1))


def local_box(mesh, placements, rows, columns):
    """The (shape, offset) of this rank's block: each Shard(d) placement splits dimension d over its mesh axis."""
    shape, offset = [rows, columns], [0, 0]
    coordinate = mesh.get_coordinate()
    for axis, placement in enumerate(placements):
        if isinstance(placement, Shard):
            parts = mesh.size(axis)
            shape[placement.dim] //= parts
            offset[placement.dim] += coordinate[axis] * shape[placement.dim]
    return tuple(shape), tuple(offset)


def state_dict(mesh, placements_of, arrays, rows, columns, fill):
    return {f"layer_{i:02d}": dtensor(i, mesh, placements_of(i), rows, columns, fill) for i in range(arrays)}


def check(state, arrays, rows, columns):
    for i in range(arrays):
        tensor = state[f"layer_{i:02d}"]
        shape, offset = local_box(tensor.device_mesh, tensor.placements, rows, columns)
        if not torch.equal(tensor.to_local(), expected_block(i, rows, columns, offset, shape)):
            raise AssertionError(f"layer_{i:02d}: block at {offset} restored wrong")


def timed_load(path, mesh, placements, arrays, columns, warm):
    """Loads `path` into new tensors laid out by `placements` with the page cache dropped (after warming memory if
    `warm`), checks every element, and gives the slowest rank's time."""
    drop_caches()
    if warm:
        shapes = (local_box(mesh, placements(i), ROWS, columns)[0] for i in range(arrays))
        touch_and_free(sum(4 * rows * cols for rows, cols in shapes))
        dist.barrier()
    start = time.perf_counter()
    target = state_dict(mesh, placements, arrays, ROWS, columns, fill=False)
    dcp.load(target, checkpoint_id=path)
    seconds = slowest(time.perf_counter() - start)
    check(target, arrays, ROWS, columns)
    return seconds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--mib", type=int, required=True)
    parser.add_argument("--arrays", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--resume", choices=("same", "reshard"))
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    columns = (args.mib << 20) // (args.arrays * ROWS * 4)
    saving = init_device_mesh("cpu", (2, 2), mesh_dim_names=("data", "model"))
    other = init_device_mesh("cpu", (4,), mesh_dim_names=("model",))
    # As in peers_jax.py: even arrays split over both axes, odd ones over model only (replicated over data).
    save_placements = lambda i: [Shard(0), Shard(1)] if i % 2 == 0 else [Replicate(), Shard(0)]  # noqa: E731
    reshard_placements = lambda i: [Shard(1)]  # noqa: E731
    path = os.path.join(args.dir, "dcp")
    if args.resume:
        # A resuming job has built its model before it loads: torch imports its compiler stack (torch._dynamo, about
        # 1.5 s here) at a process's first DTensor.from_local, which is not timed.
        dtensor(0, saving, save_placements(0), 4, 4, fill=True)
        phase, mesh, placements = (("resume_restore_s", saving, save_placements) if args.resume == "same" else
                                   ("resume_reshard_restore_s", other, reshard_placements))
        finish(args.out, {phase: timed_load(path, mesh, placements, args.arrays, columns, False)})
        return
    state = state_dict(saving, save_placements, args.arrays, ROWS, columns, fill=True)

    dist.barrier()
    start = time.perf_counter()
    pending = dcp.async_save(state, checkpoint_id=path)
    block = time.perf_counter() - start
    pending.result()
    os.sync()
    durable = time.perf_counter() - start
    results = {"block_s": slowest(block), "durable_s": slowest(durable)}

    layouts = (("restore_s", saving, save_placements), ("reshard_restore_s", other, reshard_placements))
    phases = [(p, m, pl, False) for p, m, pl in layouts] + [("warm_" + p, m, pl, True) for p, m, pl in layouts]
    for phase, mesh, placements, warm in phases:
        results[phase] = timed_load(path, mesh, placements, args.arrays, columns, warm)
    dist.barrier()
    if dist.get_rank() == 0 and not args.keep:
        shutil.rmtree(path)
    finish(args.out, results)


def finish(out, results):
    """Rank 0 writes `results`; every rank leaves the process group."""
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump({"dcp": results}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

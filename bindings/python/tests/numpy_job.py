"""One rank of a numpy job started by ckpt-launch (RANK, WORLD_SIZE, MASTER_ADDR from the launcher), checking
every element it restores.

    numpy_job.py save-whole DIR        (1 rank) whole arrays, Python values and metadata
    numpy_job.py reshard-rows DIR      (3 ranks) restores row blocks of DIR/whole, saves them as DIR/rows
    numpy_job.py reshard-columns DIR   (2 ranks) restores column blocks of DIR/rows, and the whole tree untargeted
    numpy_job.py manager DIR           (2 ranks) retention, save interval, resume from the latest step
    numpy_job.py mismatch DIR          (2 ranks) overlapping boxes and missing keys fail on every rank, named
    numpy_job.py check-replicas DIR    (3 ranks) replicas checked against each other: equal ones commit, one element
                                       changed on the last rank fails the save on every rank, naming it
    numpy_job.py allgather DIR         (3 ranks) a context bootstrapped through the job's own allgather
    numpy_job.py collectives DIR       (3 ranks) a context whose collectives are the job's own
"""

import os
import sys
import time
import zlib

import ml_dtypes
import numpy as np

import ckpt

SHAPES = {"layers/0/w": ((12, 10), np.float32), "layers/1/w": ((9, 4), ml_dtypes.bfloat16),
          "embedding": ((7, 3), np.int64), "scale": ((), np.float64)}


def expected(key):
    shape, dtype = SHAPES[key]
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    return np.asarray(rng.standard_normal(shape) * 100).astype(dtype)


def nested(flat):
    """{"layers/0/w": x, ...} as the nested tree ckpt flattens back to those keys."""
    tree = {}
    for key, value in flat.items():
        parts = key.split("/")
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    tree["layers"] = [tree["layers"]["0"], tree["layers"]["1"]]
    return tree


def split(length, parts, index):
    """The [start, stop) of block `index` when `length` is cut into `parts` nearly equal blocks."""
    base, extra = divmod(length, parts)
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


def block(key, ctx, axis):
    """This rank's block of `key` along `axis` (0-d arrays: the whole scalar on every rank)."""
    shape, _ = SHAPES[key]
    if not shape:
        return (), ()
    start, stop = split(shape[axis], ctx.world_size, ctx.rank)
    offset = tuple(start if d == axis else 0 for d in range(len(shape)))
    extent = tuple(stop - start if d == axis else n for d, n in enumerate(shape))
    return offset, extent


def shard_target(ctx, axis):
    flat = {}
    for key, (shape, dtype) in SHAPES.items():
        offset, extent = block(key, ctx, axis)
        flat[key] = ckpt.Shard(np.zeros(extent, dtype), shape, offset)
    return flat


def check_shards(flat):
    for key, shard in flat.items():
        index = tuple(slice(o, o + n) for o, n in zip(shard.offset, shard.data.shape))
        want = expected(key)[index]
        assert shard.data.dtype == want.dtype and np.array_equal(shard.data, want), f"{key}: block {index} differs"


def save_whole(directory):
    ctx = ckpt.Context()
    assert ctx.world_size == 1
    tree = dict(nested({key: expected(key) for key in SHAPES}), step=1200, loss=0.125, tag="run-7")
    request = ckpt.save(os.path.join(directory, "whole"), tree, metadata={"saved_by": "1 rank"})
    assert request.wait()
    print("saved on 1 rank")


def reshard_rows(directory):
    ctx = ckpt.Context()
    assert ctx.world_size == 3, ctx
    target = dict(nested(shard_target(ctx, axis=0)), step=0, loss=0.0, tag="")
    restored = ckpt.restore(os.path.join(directory, "whole"), target)
    assert (restored["step"], restored["loss"], restored["tag"]) == (1200, 0.125, "run-7")
    flat = dict(ckpt._tree.flatten({k: v for k, v in restored.items() if k in ("layers", "embedding", "scale")})[0])
    check_shards(flat)
    # Every rank saves its row blocks, and a bias replicated on every rank (written once).
    tree = dict(restored, bias=np.arange(5, dtype=np.float32))
    ckpt.save(os.path.join(directory, "rows"), tree).wait()
    # Without the job's own collectives, the TCP store carried the plans and agreements: the stats count them.
    stats = ctx.stats()
    assert stats["control_bytes_sent"] > 0 and stats["control_bytes_received"] > 0, stats
    assert stats["store_collectives"] > 0, stats
    print(f"rank {ctx.rank}: restored rows, saved them")


def reshard_columns(directory):
    ctx = ckpt.Context()
    assert ctx.world_size == 2, ctx
    path = os.path.join(directory, "rows")
    target = dict(nested(shard_target(ctx, axis=1)), step=0, loss=0.0, tag="", bias=np.zeros(5, np.float32))
    restored = ckpt.restore(path, target)
    check_shards(dict(ckpt._tree.flatten({k: restored[k] for k in ("layers", "embedding", "scale")})[0]))
    assert np.array_equal(restored["bias"], np.arange(5, dtype=np.float32))
    whole = ckpt.restore(path)  # no target: the saved tree, whole arrays on every rank
    assert whole["step"] == 1200 and isinstance(whole["layers"], list)
    for key in SHAPES:
        value = dict(ckpt._tree.flatten(whole)[0])[key]
        assert value.dtype == expected(key).dtype and np.array_equal(value, expected(key)), key
    with ckpt.Reader(path) as reader:
        assert reader.info.world_size == 3
        assert reader.tensors["bias"].chunks[0].shape == (5,) and len(reader.tensors["bias"].chunks) == 1
    print(f"rank {ctx.rank}: restored columns and the whole tree")


def manager(directory):
    ctx = ckpt.Context()
    root = os.path.join(directory, "run")
    with ckpt.CheckpointManager(root, keep_last=2, keep_every=4, save_interval_steps=2, context=ctx) as mgr:
        assert mgr.latest_step() is None
        with_saves = [step for step in range(10) if mgr.save(step, {"x": np.full((2, 3), step, np.int32),
                                                                     "step": step})]
        assert with_saves == [0, 2, 4, 6, 8], with_saves
        mgr.wait()
        # Collective: once process 0's removals have finished, which run in the background.
        assert mgr.resume_step() == 8
        assert mgr.all_steps() == [0, 4, 6, 8], mgr.all_steps()  # the last 2, and every 4th
        assert mgr.latest_step() == 8
    # A restarted job resumes from the latest step, and may go back to any kept one.
    with ckpt.CheckpointManager(root, keep_last=2, context=ctx) as mgr:
        assert mgr.resume_step() == 8, mgr.resume_step()
        resumed = mgr.restore(target={"x": np.zeros((2, 3), np.int32), "step": 0})
        assert resumed["step"] == 8 and (resumed["x"] == 8).all(), resumed
        assert mgr.restore(4)["step"] == 4
        assert mgr.restore()["step"] == 8
    print(f"rank {ctx.rank}: manager retention and resume")


def mismatch(directory):
    ctx = ckpt.Context(timeout=30)
    # Rank 0 holds rows 0..3 of a 6-row tensor, rank 1 rows 2..5: an overlap, refused on every rank before writing.
    overlapping = {"w": ckpt.Shard(np.zeros((4, 2), np.float32), (6, 2), (2 * ctx.rank, 0))}
    try:
        ckpt.save(os.path.join(directory, "bad"), overlapping)
        raise AssertionError("an overlapping save succeeded")
    except ckpt.MismatchError as e:
        assert "'w'" in str(e) and "overlap" in str(e), e
    assert not os.path.exists(os.path.join(directory, "bad"))
    good = {"w": ckpt.Shard(np.zeros((3, 2), np.float32), (6, 2), (3 * ctx.rank, 0))}
    ckpt.save(os.path.join(directory, "good"), good).wait()
    try:
        ckpt.restore(os.path.join(directory, "good"), {"w": good["w"], "missing": np.zeros(3)})
        raise AssertionError("a restore with a missing key succeeded")
    except ckpt.MismatchError as e:
        assert "missing" in str(e), e
    print(f"rank {ctx.rank}: mismatches refused on every rank")


def check_replicas(directory):
    ctx = ckpt.Context(timeout=30)
    # "w" is replicated on every rank (whole arrays are), "own" is each rank's row block.
    w = np.arange(3 << 18, dtype=np.float32).reshape(3, -1)
    tree = {"w": w, "own": ckpt.Shard(np.full((2, 4), ctx.rank, np.int32), (2 * ctx.world_size, 4), (2 * ctx.rank, 0))}
    ckpt.save(os.path.join(directory, "good"), tree, check_replicas=True).wait()
    restored = ckpt.restore(os.path.join(directory, "good"), {"w": np.zeros_like(w)}, partial=True)
    assert restored["w"].tobytes() == w.tobytes()
    odd = ctx.world_size - 1
    if ctx.rank == odd:
        w[2, 12345] += 1  # in the third of three 1 MiB blocks
    try:
        ckpt.save(os.path.join(directory, "flipped"), tree, check_replicas=True).wait()
        raise AssertionError("a save with a replica that differs committed")
    except ckpt.CorruptError as e:
        assert "tensor 'w'" in str(e) and "block 2 of 3" in str(e), e
        assert f"rank {odd} differs from them" in str(e) or f"rank {odd} (written) differs from them" in str(e), e
    assert not os.path.exists(os.path.join(directory, "flipped"))
    print(f"rank {ctx.rank}: a replica that differs is named before the commit")


def incremental(directory):
    ctx = ckpt.Context(timeout=30)
    root = os.path.join(directory, "run")
    rows = 512 * ctx.world_size
    # A fine-tuning state: "frozen" rows split over the ranks never change; "head", replicated, changes every step.
    frozen = np.arange(rows * 1024, dtype=np.float32).reshape(rows, 1024)[512 * ctx.rank:512 * (ctx.rank + 1)]

    def tree(step):
        return {"frozen": ckpt.Shard(frozen, (rows, 1024), (512 * ctx.rank, 0)),
                "head": np.full((16, 16), step, np.float32)}

    with ckpt.CheckpointManager(root, keep_last=1, context=ctx) as mgr:
        for step in (1, 2, 3):
            mgr.save(step, tree(step), incremental=True)
            mgr.wait()
        assert mgr.resume_step() == 3
        # Step 3 refers to step 1's frozen rows: retention keeps step 1 and removes step 2.
        assert mgr.all_steps() == [1, 3], mgr.all_steps()

        def data_bytes(step):
            data = os.path.join(mgr.step_path(step), "data")
            return sum(os.path.getsize(os.path.join(data, f)) for f in os.listdir(data))

        assert data_bytes(3) * 100 < data_bytes(1), (data_bytes(3), data_bytes(1))
        # Every rank restores the whole of step 3, another layout than any rank saved.
        restored = mgr.restore(3, {"frozen": np.zeros((rows, 1024), np.float32), "head": np.zeros((16, 16), np.float32)})
        assert restored["frozen"].tobytes() == np.arange(rows * 1024, dtype=np.float32).tobytes()
        assert (restored["head"] == 3).all()
    print(f"rank {ctx.rank}: incremental steps under retention restore exactly")


def file_allgather(directory, rank, world_size):
    """The job's own allgather, as an MPI or JAX job would bring: here, files in a shared directory."""
    calls = iter(range(1 << 30))

    def allgather(mine):
        call = next(calls)
        mine_path = os.path.join(directory, f"gather-{call}-{rank}")
        with open(mine_path + ".tmp", "wb") as f:
            f.write(mine)
        os.rename(mine_path + ".tmp", mine_path)  # whole, or not there at all
        blocks = []
        for r in range(world_size):
            path = os.path.join(directory, f"gather-{call}-{r}")
            while not os.path.exists(path):
                time.sleep(0.01)
            blocks.append(open(path, "rb").read())
        return blocks

    return allgather


def allgather(directory):
    """A context bootstrapped through the job's own allgather: no store address from the environment."""
    rank, world_size = int(os.environ.pop("RANK")), int(os.environ.pop("WORLD_SIZE"))
    for name in ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        os.environ.pop(name, None)
    ctx = ckpt.Context(rank=rank, world_size=world_size, allgather=file_allgather(directory, rank, world_size))
    shard = ckpt.Shard(np.full((2, 3), rank, np.int32), (2 * world_size, 3), (2 * rank, 0))
    ckpt.save(os.path.join(directory, "gathered"), {"x": shard}, context=ctx).wait()
    whole = ckpt.restore(os.path.join(directory, "gathered"), context=ctx)["x"]
    assert np.array_equal(whole, np.repeat(np.arange(world_size), 2)[:, None].repeat(3, axis=1)), whole
    print(f"rank {ctx.rank}: bootstrapped through the job's allgather")


class FileCollectives:
    """The job's own collectives, as an MPI job would bring its communicator's: here, files in a shared directory,
    one per message, each call numbered alike on every rank."""

    def __init__(self, directory, rank, world_size):
        self.directory, self.rank, self.world_size = directory, rank, world_size
        self.calls = iter(range(1 << 30))
        self.counts = {}

    def _post(self, name, data):
        path = os.path.join(self.directory, name)
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.rename(path + ".tmp", path)  # whole, or not there at all

    def _take(self, name):
        path = os.path.join(self.directory, name)
        while not os.path.exists(path):
            time.sleep(0.002)
        return open(path, "rb").read()

    def _count(self, kind):
        self.counts[kind] = self.counts.get(kind, 0) + 1
        return next(self.calls)

    def allgather(self, mine):
        call = self._count("allgather")
        self._post(f"c{call}-{self.rank}", mine)
        return [self._take(f"c{call}-{r}") for r in range(self.world_size)]

    def alltoall(self, messages):
        call = self._count("alltoall")
        for to, message in enumerate(messages):
            self._post(f"c{call}-{self.rank}-{to}", message)
        return [self._take(f"c{call}-{r}-{self.rank}") for r in range(self.world_size)]

    def broadcast(self, data, root):
        call = self._count("broadcast")
        if self.rank == root:
            self._post(f"c{call}", data)
        return self._take(f"c{call}")

    def barrier(self):
        self.allgather(b"")


def collectives(directory):
    """A context over the job's collectives: saves and a resharded restore, with no collective through the store."""
    rank, world_size = int(os.environ.pop("RANK")), int(os.environ.pop("WORLD_SIZE"))
    for name in ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        os.environ.pop(name, None)
    exchange = os.path.join(directory, "collectives")
    os.makedirs(exchange, exist_ok=True)
    job = FileCollectives(exchange, rank, world_size)
    ctx = ckpt.Context(rank=rank, world_size=world_size, collectives=job)
    rows = ckpt.Shard(np.arange(30 * rank, 30 * rank + 30, dtype=np.float64).reshape(3, 10), (3 * world_size, 10),
                      (3 * rank, 0))
    ckpt.save(os.path.join(directory, "over-collectives"), {"m": rows}, context=ctx).wait()
    start, stop = split(10, world_size, rank)
    target = {"m": ckpt.Shard(np.zeros((3 * world_size, stop - start)), (3 * world_size, 10), (0, start))}
    got = ckpt.restore(os.path.join(directory, "over-collectives"), target, context=ctx)["m"]
    whole = np.arange(30 * world_size, dtype=np.float64).reshape(3 * world_size, 10)
    assert np.array_equal(got.data, whole[:, start:stop]), got.data
    stats = ctx.stats()
    assert stats["store_collectives"] == 0, stats
    assert stats["control_bytes_sent"] > 0 and stats["control_bytes_received"] > 0, stats
    assert job.counts.get("alltoall", 0) > 0 and job.counts.get("broadcast", 0) > 0, job.counts
    print(f"rank {ctx.rank}: saved and restored over the job's collectives ({job.counts})")


def main(argv):
    command, directory = argv
    {"save-whole": save_whole, "reshard-rows": reshard_rows, "reshard-columns": reshard_columns,
     "manager": manager, "mismatch": mismatch, "check-replicas": check_replicas, "incremental": incremental,
     "allgather": allgather,
     "collectives": collectives}[command](directory)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

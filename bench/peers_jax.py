"""One process of bench/peers' JAX job: the same sharded pytree saved and restored by ckpt and by Orbax, in the
order given, with every phase timed on every process (the slowest process counts).

    peers_jax.py --peers ckpt,orbax --dir DIR --mib 2048 --arrays 64 --out RESULTS.json [--keep]
    peers_jax.py --resume same|reshard --peers ckpt --dir DIR --mib 2048 --arrays 64 --out RESULTS.json

Phases, for each peer: an asynchronous save (`block`: until the call returns and the arrays may change;
`durable`: until the save's wait returned and sync(2) returned), then, with the page cache dropped before each, a
restore into the same mesh and one into another mesh, then both again right after each process touched and freed
as much memory as it restores (peers_memory.py); every restored element is compared with its expected value.
--keep leaves each peer's checkpoint in DIR/<peer>. --resume is a fresh job restoring one kept checkpoint once, into
the same mesh or the other one, as a training job resuming does (`resume_restore_s`, `resume_reshard_restore_s`): no
earlier phase has left memory in its processes for the outputs to reuse. Before it, the job makes one small array of
the target's layout, as a job building its model would have (JAX's work done once per process is not timed).
The processes come from bench/peers (JAX_COORDINATOR_ADDRESS, NUM_PROCESSES, PROCESS_ID) with 1 CPU device each.
"""

import argparse
import json
import os
import shutil
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(num_processes=int(os.environ["NUM_PROCESSES"]), process_id=int(os.environ["PROCESS_ID"]))

import ckpt  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402
from jax._src import distributed  # noqa: E402
from peers_memory import touch_and_free  # noqa: E402

CLIENT = distributed.global_state.client
PROCESS = jax.process_index()
BARRIER_MS = 900_000
_barriers = 0


def barrier():
    global _barriers
    _barriers += 1
    CLIENT.wait_at_barrier(f"peers-{_barriers}", BARRIER_MS)


def slowest(name, seconds):
    """The largest of every process's `seconds` (through the coordination service's key-value store)."""
    CLIENT.key_value_set(f"peers/{name}/{PROCESS}", repr(seconds))
    return max(float(CLIENT.blocking_key_value_get(f"peers/{name}/{p}", BARRIER_MS))
               for p in range(jax.process_count()))


def drop_caches():
    """Every process syncs; then one empties the page cache, so that restores read the disk."""
    os.sync()
    barrier()
    if PROCESS == 0:
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        except OSError:
            pass  # bench/peers says so in its report
    barrier()


def layouts(arrays):
    """The specs of the saving mesh (data=2, model=2): half the arrays split over both axes, half over model only
    (2 data-parallel replicas); the restore mesh (model=4) splits every array by columns."""
    saving = jax.make_mesh((2, 2), ("data", "model"), devices=jax.devices())
    other = jax.make_mesh((4,), ("model",), devices=jax.devices())
    save_specs = [P("data", "model") if i % 2 == 0 else P("model", None) for i in range(arrays)]
    return ([NamedSharding(saving, s) for s in save_specs], [NamedSharding(other, P(None, "model"))] * arrays)


def make_array(index, shape, sharding):
    """Pseudo-random F32 values (incompressible), the same whatever the sharding; each process computes only its
    own blocks."""
    return jax.jit(lambda: jax.random.normal(jax.random.key(index), shape, jnp.float32), out_shardings=sharding)()


def make_state(shape, shardings):
    return {f"layer_{i:02d}": make_array(i, shape, s) for i, s in enumerate(shardings)}


def targets(shape, shardings):
    """Restore targets for the state of arrays of `shape` laid out by `shardings`."""
    return {f"layer_{i:02d}": jax.ShapeDtypeStruct(shape, jnp.float32, sharding=s) for i, s in enumerate(shardings)}


def restored_bytes(shape, shardings):
    """The bytes this process holds of the state of F32 arrays of `shape` laid out by `shardings`."""
    return sum(int(np.prod(s.shard_shape(shape))) * 4 * len(s.addressable_devices) for s in shardings)


def check(restored):
    """Compares every element this process holds with its expected value, one array at a time."""
    for index, (key, array) in enumerate(sorted(restored.items())):
        expected = make_array(index, array.shape, array.sharding)
        for got, want in zip(array.addressable_shards, expected.addressable_shards):
            if got.index != want.index or not np.array_equal(np.asarray(got.data), np.asarray(want.data)):
                raise AssertionError(f"{key}: block {got.index} restored wrong")
        del expected


class Ckpt:
    name = "ckpt"

    def __init__(self):
        self.context = ckpt.Context.from_jax()

    def save(self, path, state):
        return ckpt.save(path, state, context=self.context)

    @staticmethod
    def wait(request):
        request.wait()

    def restore(self, path, target):
        return ckpt.restore(path, target, context=self.context)


class Orbax:
    """Orbax's StandardCheckpointer: an AsyncCheckpointer (save returns after the device-to-host copy; a background
    thread writes through TensorStore), restoring to the target's shardings."""
    name = "orbax"

    def __init__(self):
        self.checkpointer = ocp.StandardCheckpointer()

    def save(self, path, state):
        self.checkpointer.save(path, state)

    def wait(self, _):
        self.checkpointer.wait_until_finished()

    def restore(self, path, target):
        return self.checkpointer.restore(path, target)


def timed_restore(peer, path, shape, shardings, phase, warm):
    """Restores `path` into `shardings` with the page cache dropped (after warming memory if `warm`), checks every
    element, and gives the slowest process's time."""
    drop_caches()
    if warm:
        touch_and_free(restored_bytes(shape, shardings))
        barrier()
    start = time.perf_counter()
    restored = peer.restore(path, targets(shape, shardings))
    jax.block_until_ready(restored)
    seconds = slowest(f"{peer.name}-{phase}", time.perf_counter() - start)
    check(restored)
    return seconds


def measure(peer, directory, state, save_shardings, other_shardings, keep):
    path = os.path.join(directory, peer.name)
    shape = next(iter(state.values())).shape
    barrier()
    start = time.perf_counter()
    pending = peer.save(path, state)
    block = time.perf_counter() - start
    peer.wait(pending)
    os.sync()
    durable = time.perf_counter() - start
    results = {"block_s": slowest(f"{peer.name}-block", block), "durable_s": slowest(f"{peer.name}-durable", durable)}

    layouts = (("restore_s", save_shardings), ("reshard_restore_s", other_shardings))
    phases = [(p, s, False) for p, s in layouts] + [("warm_" + p, s, True) for p, s in layouts]
    for phase, shardings, warm in phases:
        results[phase] = timed_restore(peer, path, shape, shardings, phase, warm)
    barrier()
    if PROCESS == 0 and not keep:
        shutil.rmtree(path)
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--peers", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--mib", type=int, required=True)
    parser.add_argument("--arrays", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--resume", choices=("same", "reshard"))
    args = parser.parse_args()
    if jax.device_count() != 4:
        raise SystemExit(f"bench/peers needs 4 devices in all, not {jax.device_count()}")
    rows = 1024
    columns = (args.mib << 20) // (args.arrays * rows * 4)
    save_shardings, other_shardings = layouts(args.arrays)
    peers = {"ckpt": Ckpt, "orbax": Orbax}
    made = [peers[name]() for name in args.peers.split(",")]
    if args.resume:
        shardings = save_shardings if args.resume == "same" else other_shardings
        phase = "resume_restore_s" if args.resume == "same" else "resume_reshard_restore_s"
        # A resuming job has built its model before it restores: what JAX does once per process is done here.
        jax.block_until_ready(make_array(0, (4, 4), shardings[0]))
        results = {peer.name: {phase: timed_restore(peer, os.path.join(args.dir, peer.name), (rows, columns),
                                                    shardings, phase, False)} for peer in made}
    else:
        state = make_state((rows, columns), save_shardings)
        jax.block_until_ready(state)
        results = {peer.name: measure(peer, args.dir, state, save_shardings, other_shardings, args.keep)
                   for peer in made}
    results["bytes"] = args.arrays * rows * columns * 4
    if PROCESS == 0:
        with open(args.out, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    main()

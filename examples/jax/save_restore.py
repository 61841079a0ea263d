#!/usr/bin/env python3
"""Saves sharded JAX arrays through ckpt's XLA FFI custom calls, restores them under other shardings, and checks
every element.

    python3 save_restore.py HANDLER_LIBRARY [CHECKPOINT_DIR]

HANDLER_LIBRARY is the built libckpt_jax_ffi.so (examples/jax/ckpt_jax_ffi.cc). CHECKPOINT_DIR must not exist yet;
without it, the checkpoint goes to a new temporary directory, removed at the end. The arrays are sharded over every
device JAX sees; on a machine without accelerators the script asks XLA for four CPU devices, so that they really
are sharded. One process: the handlers create a single-rank ckpt context unless a launcher's environment says
otherwise, and then every process must hold at least one main-replica shard of the checkpoint.
"""

import ctypes
import os
import shutil
import sys
import tempfile

# Read when JAX starts its CPU backend, so it must be set before the import.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

SAVE_TARGET = "ckpt_save_array"
LOAD_TARGET = "ckpt_load_array"


def register_handlers(library_path):
    """Registers the CPU handlers, and the CUDA ones when the library has them. Returns the loaded library, which
    must stay loaded while JAX may call it."""
    library = ctypes.cdll.LoadLibrary(library_path)
    platforms = {"cpu": "cpu"}
    if hasattr(library, "ckpt_jax_save_array_cuda"):
        platforms["CUDA"] = "cuda"
    for platform, suffix in platforms.items():
        for target, symbol in ((SAVE_TARGET, "ckpt_jax_save_array_"), (LOAD_TARGET, "ckpt_jax_load_array_")):
            handler = jax.ffi.pycapsule(getattr(library, symbol + suffix))
            jax.ffi.register_ffi_target(target, handler, platform=platform)
    return library


def box_of(index, shape):
    """The (offset, extent) of the box that a shard index (a tuple of slices, one per dimension) selects."""
    ranges = [range(*piece.indices(length)) for piece, length in zip(index, shape)]
    return [r.start for r in ranges], [len(r) for r in ranges]


def int64s(values):
    """An array attribute: the handlers read global_shape and offset as Span<const int64_t>."""
    return np.asarray(values, dtype=np.int64)


def save_arrays(path, arrays):
    """Saves {key: array} as the checkpoint `path`: one custom call per main-replica shard this process holds (a
    replica is written once, so the others are left out). The call that brings the last shard writes them all."""
    shards = [(key, array, shard) for key, array in arrays.items() for shard in array.addressable_shards
              if shard.replica_id == 0]
    if not shards:
        raise ValueError(f"this process holds no main-replica shard of {sorted(arrays)}: nothing would save {path}")
    save = jax.ffi.ffi_call(SAVE_TARGET, jax.ShapeDtypeStruct((), jnp.int32), has_side_effect=True)
    saved_by = []
    for key, array, shard in shards:
        offset, _ = box_of(shard.index, array.shape)
        committed = save(shard.data, path=path, key=key, global_shape=int64s(array.shape), offset=int64s(offset),
                         shards_in_checkpoint=len(shards))
        if int(committed) == 1:  # waits for the call, so the last one has saved on return
            saved_by.append(key)
    if len(saved_by) != 1:
        raise RuntimeError(f"{len(saved_by)} calls reported saving {path}, expected exactly 1")


def restore_array(path, key, shape, dtype, sharding):
    """Reads tensor `key` of the checkpoint into a new array laid out by `sharding`: each device reads its own box."""
    pieces = []
    for device, index in sharding.addressable_devices_indices_map(shape).items():
        offset, extent = box_of(index, shape)
        load = jax.ffi.ffi_call(LOAD_TARGET, jax.ShapeDtypeStruct(tuple(extent), dtype), has_side_effect=True)
        with jax.default_device(device):
            piece = load(path=path, key=key, offset=int64s(offset))
        pieces.append(jax.device_put(piece, device))
    return jax.make_array_from_single_device_arrays(shape, sharding, pieces)


def check(name, restored, original, sharding):
    """Prints a line and returns True if `restored` equals `original` element for element, laid out by `sharding`."""
    same_values = np.array_equal(np.asarray(restored), np.asarray(original))
    same_layout = restored.sharding == sharding
    if not (same_values and same_layout):
        print(f"{name}: values {'match' if same_values else 'DIFFER'}, sharding "
              f"{'as asked' if same_layout else restored.sharding}", file=sys.stderr)
    return same_values and same_layout


def run(checkpoint):
    devices = np.array(jax.devices())
    count = devices.size
    mesh = Mesh(devices, ("x",))
    by_rows = NamedSharding(mesh, PartitionSpec("x", None))
    by_columns = NamedSharding(mesh, PartitionSpec(None, "x"))
    replicated = NamedSharding(mesh, PartitionSpec())

    rows, columns = 4 * count, 2 * count
    weight = jax.device_put(jnp.arange(rows * columns, dtype=jnp.float32).reshape(rows, columns), by_rows)
    bias = jax.device_put(jnp.linspace(-1, 1, rows, dtype=jnp.bfloat16), NamedSharding(mesh, PartitionSpec("x")))
    step = jax.device_put(jnp.arange(5, dtype=jnp.int32), replicated)
    save_arrays(checkpoint, {"weight": weight, "bias": bias, "step": step})

    # Restored under other shardings than saved: the reader gives each device any box it asks for.
    ok = check("weight", restore_array(checkpoint, "weight", weight.shape, weight.dtype, by_columns), weight,
               by_columns)
    ok &= check("bias", restore_array(checkpoint, "bias", bias.shape, bias.dtype, replicated), bias, replicated)
    ok &= check("step", restore_array(checkpoint, "step", step.shape, step.dtype, replicated), step, replicated)
    if ok:
        print(f"save_restore: {count} {devices.flat[0].platform} device(s) saved weight F32{list(weight.shape)} by "
              f"rows, bias BF16{list(bias.shape)} by rows and step I32{list(step.shape)} replicated, then restored "
              f"weight by columns and bias replicated from {checkpoint}: all elements match")
    return ok


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    library = register_handlers(argv[1])  # noqa: F841 (kept loaded until the end)
    if len(argv) == 3:
        return 0 if run(argv[2]) else 1
    scratch = tempfile.mkdtemp(prefix="ckpt-jax-")
    try:
        return 0 if run(os.path.join(scratch, "checkpoint")) else 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))

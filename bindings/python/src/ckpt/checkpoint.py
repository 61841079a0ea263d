"""ckpt.save and ckpt.restore: pytrees of numpy arrays, jax.Arrays, ckpt.Shards and Python values, saved and
restored collectively by every rank."""

from __future__ import annotations

import ctypes
import os
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from . import _native, _tree
from ._native import call
from ._options import key_map_pairs, load_flags, load_options, missing_code
from ._restore import Finisher, Saved, finish_restore, register_target, target_from_checkpoint
from ._save import Request, start_save
from ._state import State
from ._types import KeyMap, Missing, Progress, PyTree, StrPath, Tier
from .context import Context, default_context

__all__ = ["Request", "restore", "save"]


def save(path: StrPath, tree: PyTree, *, context: Optional[Context] = None,
         metadata: Optional[Mapping[str, str]] = None, progress: Optional[Progress] = None, tier: Tier = "storage",
         in_place: bool = False, copy_on_write: bool = False, check_replicas: bool = False,
         incremental: bool = False, base: Optional[StrPath] = None, compress: bool = False,
         compress_keys: Iterable[str] = ()) -> Request:
    """Collective: every rank calls it with its part of the tree. Saves `tree` as the checkpoint directory `path`
    and returns a Request as soon as this rank's arrays may change; the checkpoint is written and committed in the
    background, and exists only once the Request succeeds.

    Leaves: numpy arrays (the same whole array on every rank that has it), jax.Arrays (any sharding; replicas are
    written once), ckpt.Shard (a rank's box of a global array), and bool, int, float, str and bytes (saved once, as
    common entries). `metadata` is a str -> str mapping stored in the manifest (ckpt.Reader(path).metadata).

    A tree of jax.Arrays returns before the staging copy even starts: the arrays cannot change (and XLA does not
    donate a buffer the save still references); errors found by the collective checks are then raised by the
    Request. A tree with numpy buffers returns once they are staged, raising such errors itself.

    `progress`, if given, is called as progress(phase, done, total) with this rank's bytes: "planning", "staging"
    (on the thread that stages), then "writing", "committing" and "committed" or "failed" (on the library's save
    thread, before the Request finishes), once as each phase starts and at most every 100 ms in between. It should
    return quickly. Request.stats() gives the same figures and the time of each phase.

    `tier` says where the checkpoint goes: "storage" (the default: the directory `path`), "memory" (the shared
    memory of the node's ckpt-agent, which the first save to memory starts and which outlives the trainers; `path`
    receives it only if they die) or "both" (memory, then `path`, written by the agent in the background). A save to
    memory succeeds once the checkpoint is complete in memory, and restore(path) then reads that copy. It needs the
    job's identity, the same on every rank and across restarts: CKPT_JOB_ID (or SLURM_JOB_ID, TORCHELASTIC_RUN_ID),
    else InvalidArgumentError; NoSpaceError past the agent's budget (CKPT_AGENT_BUDGET_BYTES, default half of the
    node's memory). Across nodes, each node's agent copies its files to CKPT_MEMORY_REPLICAS other nodes (default
    1) before the Request succeeds.

    `in_place=True` writes this rank's bytes straight from its arrays, with no staging copy: save() then returns
    only once they are durable (the Request still finishes with the commit), and the arrays must not change until
    it returns. It suits a save that is waited for anyway: the last one of a job, or a blocking checkpoint.

    `copy_on_write=True` (CKPT_SAVE_COPY_ON_WRITE, host memory, Linux) returns once this rank's numpy buffers are
    write-protected, before any copy: a page written before the library copied it is copied first, so the
    checkpoint holds the values at the call. The Request keeps the arrays alive until it finishes; resizing or
    freeing their memory otherwise (an unmap, madvise) fails the save. Refused with in_place or a memory tier;
    where the kernel refuses userfaultfd the save copies at the call, as without it.

    `check_replicas=True` (CKPT_SAVE_CHECK_REPLICAS): the ranks holding replicas of a box compare their copies'
    block checksums before the save commits; a difference fails the save (CKPT_E_CORRUPT, ckpt.CorruptError)
    naming the tensor, box, blocks and ranks. It must be the same on every rank. The replicas are read after the
    call (write-protected meanwhile, as copy_on_write's arrays): the Request keeps them alive until it finishes.

    `incremental=True` (CKPT_SAVE_INCREMENTAL) hashes every array box the save writes (SHA-256 per 1 MiB block, at
    the call) into the manifest, so that a later save can name this one as its `base`. With `base`, a committed
    checkpoint beside `path` (in the same directory) saved with incremental=True, the rows of each box whose blocks
    all hash as the base's are not written: `path` refers to the base's bytes instead, and needs the base to stay
    (a load or verify after it was deleted raises CorruptError naming it). A base without digests, or an array whose
    box, dtype or shape changed, is written in full. Storage tier only (InvalidArgumentError); `base` without
    incremental=True is refused the same way, and NotFoundError says the base holds no checkpoint.

    `compress=True` (CKPT_SAVE_COMPRESS) stores everything the save writes losslessly compressed, each 1 MiB block
    on its own (floating-point arrays with their bytes grouped by significance, then zstd), so that restores of any
    box still read only the blocks they need; a block that does not shrink is stored as it is. It suits storage
    slower than about a GiB/s per I/O worker. The checkpoint is format 3 (Reader(path).info.format_version[0]), which
    libraries before it refuse. Refused (InvalidArgumentError) with in_place=True, a tier other than "storage", or
    on object storage (s3://). `compress_keys` asks the same for the arrays of those keys only (leaf keys, as
    Reader.tensors lists them, "params/layer_0/kernel"; CKPT_SHARD_COMPRESS on their shards): a key that names no
    array of the tree is a ValueError. Unlike compress=True, it is never refused: a save in place or to the memory
    tier (or object storage) stores those arrays as they are."""
    ctx = context or default_context()
    target = os.fsencode(os.fspath(path))

    def submit(state: State, opts: _native.SaveOptions) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        call("ckpt_save", ctx.handle, state.handle, target, ctypes.byref(opts), ctypes.byref(handle))
        return handle

    return start_save(ctx, tree, os.fspath(path), metadata, submit, progress, tier, in_place, copy_on_write,
                      check_replicas, incremental, base, compress, compress_keys)


def restore(path: StrPath, target: Optional[PyTree] = None, *, context: Optional[Context] = None,
            partial: bool = False, allow_dtype_cast: bool = False, progress: Optional[Progress] = None,
            key_map: Optional[KeyMap] = None, missing: Missing = "error") -> PyTree:
    """Collective: every rank calls it. Returns the checkpoint at `path` as a tree shaped like `target`, each leaf
    filled with its part of the saved tensor, whatever layout and number of ranks saved it: numpy arrays whole,
    ckpt.Shards their box, jax.Arrays and jax.ShapeDtypeStructs in their sharding (read once across the ranks,
    then exchanged).

    Without a target, the saved tree comes back to resume from, whole on every rank: arrays as numpy arrays, typed
    PRNG keys as jax key arrays of their saved implementation (on this process's first device), None leaves and
    dict key order as saved, and namedtuples, dataclasses and types registered with jax.tree_util (flax structs,
    FrozenDict, optax states) as their types. A restore never imports a module the checkpoint names: a type is
    rebuilt only from a module this program has already imported, and only while its fields are those saved (and,
    for a jax.tree_util node, its static data could be saved: None, bool, int, float, str, tuples and lists of
    them). Otherwise it comes back as a dict of its fields, with a UserWarning naming the type and why. Typed keys
    come back as their uint32 key data, with a warning, where jax is not imported. Checkpoints written before types
    were recorded give dicts for them.

    Every key of the target must be in the checkpoint (MismatchError otherwise); so must every tensor of the
    checkpoint be in some rank's target, unless `partial`. A leaf's dtype must be the saved one (MismatchError),
    unless `allow_dtype_cast` and both are floating (float16, bfloat16, float32, float64): the saved values are then
    converted, rounded to nearest even, as numpy's astype does (float32 master weights into a bfloat16 target). A
    bool, int, float, str or bytes leaf must have the saved value's type (MismatchError naming both): never converted.

    `key_map` restores a target whose keys changed since the save (a renamed layer, Linen paths become NNX ones): a
    dict from target keys to the checkpoint's keys (a target key it does not name is looked up as itself; naming a
    key the target lacks is a ValueError), or a callable giving a target key's checkpoint key (None: the key
    itself). Two target keys mapped to one checkpoint key are refused (InvalidArgumentError); it needs a target
    (ValueError without one). `missing` says what a target key the checkpoint lacks does: "error" (MismatchError
    naming the first few, with the keys they were looked up as, and the checkpoint's keys nobody asked for),
    "warn" (the library logs that warning) or "ignore"; under both, such a leaf comes back as the target's own
    (where the checkpoint holds the pytree the package saves: one written by another language cannot say which
    of its keys a leaf lacks, and an array left unfilled holds whatever its new buffer held).

    `progress`, if given, is called as progress(phase, done, total) with the bytes of this rank's arrays filled:
    "planning", "reading", then "loaded" or "failed", from the context's thread, at most every 100 ms in between.

    When the job has an identity (CKPT_JOB_ID) and every rank's node agent holds `path` in memory (a save with
    tier "memory" or "both"), the restore reads that copy, verified the same way, and touches no storage; without a
    target too, where the Python package saved it (its pytree records each array's shape and dtype)."""
    ctx = context or default_context()
    source = os.fsencode(os.fspath(path))
    if target is None:
        if key_map is not None:
            raise ValueError("key_map maps the keys of a target to the checkpoint's: pass the target to restore "
                             "into (without one, restore gives the saved tree under its saved keys)")
        target = target_from_checkpoint(ctx, source, os.fspath(path))

    def load(state: State, opts: _native.LoadOptions) -> None:
        ctx.run(lambda: call("ckpt_load", ctx.handle, state.handle, source, ctypes.byref(opts)))

    return restore_target(target, load, partial=partial, allow_dtype_cast=allow_dtype_cast, progress=progress,
                          key_map=key_map, missing=missing)


def restore_target(target: PyTree, load: Callable[[State, _native.LoadOptions], None], *, partial: bool,
                   allow_dtype_cast: bool, progress: Optional[Progress], key_map: Optional[KeyMap],
                   missing: Missing) -> PyTree:
    """The restore of ckpt.restore and CheckpointManager.restore: registers the target's leaves, runs `load` (the
    C call) with the load options their arguments make, and returns the tree the load filled."""
    missing_code(missing)  # refused before anything is registered
    keyed = key_map is not None or missing != "error"
    leaves = _tree.flatten(target)[0] if keyed else []
    pairs = key_map_pairs(key_map, [key for key, _ in leaves])
    with State() as state:
        structure, finishers = register_target(state, target, load_flags(allow_dtype_cast))
        opts, _referenced = load_options(partial, progress, missing, pairs)
        load(state, opts)
        if keyed:
            finishers = _finishers_by_saved_key(leaves, finishers, dict(pairs), missing)
        return finish_restore(state, structure, finishers)


def _finishers_by_saved_key(leaves: List[Tuple[str, Any]], finishers: List[Finisher], saved_keys: Dict[str, str],
                            missing: Missing) -> List[Finisher]:
    """The finishers (one per leaf, in flatten's order) of a restore through a key map or allowing missing keys:
    each sees its leaf's description in the checkpoint's pytree under the key it was looked up as, and where
    missing keys are allowed, a leaf whose key the pytree lacks comes back as the target's own."""

    def finisher(key: str, leaf: Any, finish: Finisher) -> Finisher:
        looked_up = saved_keys.get(key, key)

        def finish_saved(saved: Saved) -> Any:
            if missing != "error" and saved and looked_up not in saved:
                return leaf
            return finish({key: saved[looked_up]} if looked_up in saved else {})

        return finish_saved

    return [finisher(key, leaf, finish) for (key, leaf), finish in zip(leaves, finishers)]

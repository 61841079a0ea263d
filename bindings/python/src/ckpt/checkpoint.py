"""ckpt.save and ckpt.restore: pytrees of numpy arrays, jax.Arrays, ckpt.Shards and Python values, saved and
restored collectively by every rank."""

from __future__ import annotations

import ctypes
import os
from typing import Mapping, Optional

from . import _native
from ._native import call
from ._options import load_flags, load_options
from ._restore import finish_restore, register_target, target_from_checkpoint
from ._save import Request, start_save
from ._state import State
from ._types import Progress, PyTree, StrPath, Tier
from .context import Context, default_context

__all__ = ["Request", "restore", "save"]


def save(path: StrPath, tree: PyTree, *, context: Optional[Context] = None,
         metadata: Optional[Mapping[str, str]] = None, progress: Optional[Progress] = None, tier: Tier = "storage",
         in_place: bool = False) -> Request:
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
    it returns. It suits a save that is waited for anyway: the last one of a job, or a blocking checkpoint."""
    ctx = context or default_context()
    target = os.fsencode(os.fspath(path))

    def submit(state: State, opts: _native.SaveOptions) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        call("ckpt_save", ctx.handle, state.handle, target, ctypes.byref(opts), ctypes.byref(handle))
        return handle

    return start_save(ctx, tree, os.fspath(path), metadata, submit, progress, tier, in_place)


def restore(path: StrPath, target: Optional[PyTree] = None, *, context: Optional[Context] = None,
            partial: bool = False, allow_dtype_cast: bool = False, progress: Optional[Progress] = None) -> PyTree:
    """Collective: every rank calls it. Returns the checkpoint at `path` as a tree shaped like `target`, each leaf
    filled with its part of the saved tensor, whatever layout and number of ranks saved it: numpy arrays whole,
    ckpt.Shards their box, jax.Arrays and jax.ShapeDtypeStructs in their sharding (read once across the ranks,
    then exchanged). Without a target, the saved tree comes back with numpy arrays, whole on every rank.

    Every key of the target must be in the checkpoint (MismatchError otherwise); so must every tensor of the
    checkpoint be in some rank's target, unless `partial`. A leaf's dtype must be the saved one (MismatchError),
    unless `allow_dtype_cast` and both are floating (float16, bfloat16, float32, float64): the saved values are then
    converted, rounded to nearest even, as numpy's astype does (float32 master weights into a bfloat16 target). A
    bool, int, float, str or bytes leaf must have the saved value's type (MismatchError naming both): never converted.

    `progress`, if given, is called as progress(phase, done, total) with the bytes of this rank's arrays filled:
    "planning", "reading", then "loaded" or "failed", from the context's thread, at most every 100 ms in between.

    When the job has an identity (CKPT_JOB_ID) and every rank's node agent holds `path` in memory (a save with
    tier "memory" or "both"), the restore reads that copy, verified the same way, and touches no storage; without a
    target too, where the Python package saved it (its pytree records each array's shape and dtype)."""
    ctx = context or default_context()
    source = os.fsencode(os.fspath(path))
    if target is None:
        target = target_from_checkpoint(ctx, source, os.fspath(path))
    with State() as state:
        structure, finishers = register_target(state, target, load_flags(allow_dtype_cast))
        opts, _c_progress = load_options(partial, progress)
        ctx.run(lambda: call("ckpt_load", ctx.handle, state.handle, source, ctypes.byref(opts)))
        return finish_restore(state, structure, finishers)

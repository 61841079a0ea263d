"""ckpt.save and ckpt.restore: pytrees of numpy arrays, jax.Arrays, ckpt.Shards and Python values, saved and
restored collectively by every rank."""

import concurrent.futures
import ctypes
import os
import sys
import threading
import time

import numpy as np

from . import _native, context as context_module, dtypes, errors, progress as progress_module, tree as tree_module
from ._native import call, call_status, lib
from ._state import State, empty, encode_key
from .tree import Shard

_COMMON_KINDS = {bool: "bool", int: "int", float: "float", str: "str", bytes: "bytes"}


def _jax_module():
    """ckpt.jax, imported only when a tree holds JAX values (numpy users never import jax)."""
    from . import jax as ckpt_jax
    return ckpt_jax


def _is_jax(leaf):
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct))


def _encode_common(value):
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, (int, float)):
        return repr(value).encode()
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def _decode_common(kind, raw, key):
    try:
        if kind == "bool":
            return raw == b"true"
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "str":
            return raw.decode()
        return raw
    except ValueError as e:
        raise errors.CorruptError(f"common entry '{key}' does not hold a {kind}: {raw[:40]!r}") from e


class Request:
    """An asynchronous save: the tree's arrays may be changed as soon as save() returned; the checkpoint is written
    and committed in the background. done() and wait() report its outcome, the same on every rank.

    `started` is the ckpt_save call's Future: it resolves to the library's request once the arrays are staged (for
    numpy leaves, before save() returns; for jax.Arrays, which cannot change, on the context's thread meanwhile).
    `options` (the save's _SaveOptions) stays referenced until the save finished: the library calls its progress
    callback until then."""

    def __init__(self, started, path, options):
        self.path = path
        self._started = started
        self._options = options
        self._handle = None
        self._lock = threading.Lock()
        # Guards the handle against being freed during stats(), which must not wait while another thread is in
        # wait() holding _lock.
        self._handle_lock = threading.Lock()
        self._released = False
        self._final_stats = progress_module.NO_STATS
        self._finished = False
        self._failure = None

    def _release(self):
        """Keeps the final figures, then frees the handle."""
        with self._handle_lock:
            self._final_stats = progress_module.read_stats(self._handle)
            lib.ckpt_request_free(self._handle)
            self._handle = None
            self._released = True
        self._options = None

    def _settle(self, status):
        """Records a final status and frees the handle."""
        if status != errors.IN_PROGRESS:
            self._finished = True
            self._release()

    def _fail(self, error):
        self._failure = error
        self._finished = True
        if self._handle is not None:
            self._release()

    def stats(self):
        """What the save has done on this rank (a RequestStats): a snapshot while it runs, final once it finished;
        all zeros while a tree of jax.Arrays waits to be staged. Never blocks; any thread may call it."""
        with self._handle_lock:
            if self._released:
                return self._final_stats
            handle = self._handle
            if handle is None and self._started.done() and self._started.exception() is None:
                handle = self._started.result()  # staged, not yet taken by done() or wait(); freed under this lock
            return progress_module.read_stats(handle) if handle is not None else progress_module.NO_STATS

    def _start(self, timeout):
        """Waits up to `timeout` seconds (None: no limit) for the staging; False if it is still going on."""
        if self._handle is not None or self._finished:
            return True
        try:
            self._handle = self._started.result(timeout)
        except concurrent.futures.TimeoutError:
            return False
        except Exception as e:  # the staging failed: that is the outcome
            self._fail(e)
        return True

    def done(self):
        """True once the checkpoint is committed; False while it is being staged or written; raises the error
        that failed it."""
        with self._lock:
            if not self._finished and self._start(0) and not self._finished:
                try:
                    self._settle(call_status("ckpt_request_test", self._handle))
                except errors.Error as e:
                    self._fail(e)
            if self._failure is not None:
                raise self._failure
            return self._finished

    def wait(self, timeout=None):
        """Blocks until the checkpoint is committed (returns True) or `timeout` seconds pass (returns False);
        raises the error that failed it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            if not self._start(timeout):
                return False
            while not self._finished:
                remaining_ms = 0 if deadline is None else int(max(0.0, deadline - time.monotonic()) * 1000)
                if deadline is not None and remaining_ms == 0:
                    remaining_ms = 1
                try:
                    self._settle(call_status("ckpt_request_wait", self._handle, remaining_ms))
                except errors.Error as e:
                    self._fail(e)
                if not self._finished and deadline is not None and time.monotonic() >= deadline:
                    return False
            if self._failure is not None:
                raise self._failure
            return True

    def __repr__(self):
        state = "failed" if self._failure else "committed" if self._finished else "in progress"
        return f"ckpt.Request({self.path!r}, {state})"


def tier_code(tier):
    """The CKPT_TIER_* of a `tier` argument: "storage", "memory" or "both"."""
    try:
        return _native.TIERS[tier]
    except (KeyError, TypeError):
        raise ValueError(f"tier must be 'storage', 'memory' or 'both', not {tier!r}") from None


def save_flags(in_place):
    """The CKPT_SAVE_* bits of an `in_place` argument: True or False."""
    if in_place not in (True, False):
        raise ValueError(f"in_place must be True or False, not {in_place!r}")
    return _native.SAVE_IN_PLACE if in_place else 0


class _SaveOptions:
    """ckpt_save_options for user metadata (a str -> str mapping), a progress callable, a tier and the in_place
    flag, with the C arrays and the C callback they point at."""

    def __init__(self, metadata, progress, tier, in_place=False):
        self.struct = _native.new(_native.SaveOptions, tier=tier_code(tier), flags=save_flags(in_place))
        self._progress = progress_module.callback(progress)
        if self._progress is not None:
            self.struct.progress = self._progress
        if not metadata:
            return
        keys, values = [], []
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"metadata must map str to str; got {type(key).__name__} -> {type(value).__name__}")
            keys.append(encode_key(key, "metadata key"))
            values.append(encode_key(value, f"metadata {key!r}: value"))
        self._keys = (ctypes.c_char_p * len(keys))(*keys)
        self._values = (ctypes.c_char_p * len(values))(*values)
        self.struct.metadata_count = len(keys)
        self.struct.metadata_keys = self._keys
        self.struct.metadata_values = self._values


def register_tree(state, tree):
    """Registers every leaf of `tree` in `state` for a save. Returns whether every registered buffer is immutable
    (jax.Arrays, or copies this package owns), so that the staging copy may run after save() returns."""
    leaves, structure = tree_module.flatten(tree)
    descriptions = []
    jax_leaves = []
    immutable = True
    for key, leaf in leaves:
        if isinstance(leaf, (Shard, np.ndarray, np.generic)):
            immutable = False
        if isinstance(leaf, Shard):
            data = dtypes.native(np.asarray(leaf.data))
            state.add_tensor(key, data, leaf.global_shape, leaf.offset, leaf.replica)
            descriptions.append(array_description(key, "array", leaf.global_shape, data.dtype))
        elif isinstance(leaf, (np.ndarray, np.generic)):
            array = dtypes.native(np.asarray(leaf))
            state.add_tensor(key, array, array.shape, (0,) * array.ndim)
            descriptions.append(array_description(key, "array", array.shape, array.dtype))
        elif type(leaf) in _COMMON_KINDS:
            state.add_common(key, _encode_common(leaf))
            descriptions.append({"key": key, "kind": _COMMON_KINDS[type(leaf)]})
        elif _is_jax(leaf):
            descriptions.append(None)  # filled below, once every array's shards are gathered in one batch
            jax_leaves.append((len(descriptions) - 1, key, leaf))
        else:
            raise TypeError(f"'{key}': ckpt cannot save a {type(leaf).__module__}.{type(leaf).__qualname__}; leaves "
                            "are arrays (numpy, jax), ckpt.Shard, bool, int, float, str or bytes")
    if jax_leaves:
        for index, description in _jax_module().register_for_save(state, [(k, v) for _, k, v in jax_leaves]):
            descriptions[jax_leaves[index][0]] = description
    text = tree_module.describe(structure, descriptions)
    state.add_common(tree_module.STRUCTURE_KEY, text.encode())
    return immutable


def start_save(ctx, tree, path, metadata, submit, progress=None, tier="storage", in_place=False):
    """Registers `tree`, then has the context's thread call submit(state, options) -> request handle: at once when
    the tree holds numpy buffers (the caller may change them as soon as this returns) or the save is in place (it
    returns once this rank's bytes are durable), else in the background. Returns a Request, tracked by the
    context."""
    options = _SaveOptions(metadata, progress, tier, in_place)
    state = State()
    try:
        immutable = register_tree(state, tree)
    except BaseException:
        state.close()
        raise

    def stage():
        try:
            return submit(state, ctypes.byref(options.struct))
        finally:
            state.close()

    started = ctx.submit_staging(stage)
    if not immutable or in_place:
        concurrent.futures.wait([started])
        if started.exception() is not None:
            raise started.exception()
    request = Request(started, path, options)
    ctx.track(request)
    return request


def save(path, tree, *, context=None, metadata=None, progress=None, tier="storage", in_place=False):
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
    ctx = context_module.resolve(context)
    target = os.fsencode(os.fspath(path))

    def submit(state, opts):
        handle = ctypes.c_void_p()
        call("ckpt_save", ctx.handle, state.handle, target, opts, ctypes.byref(handle))
        return handle

    return start_save(ctx, tree, os.fspath(path), metadata, submit, progress, tier, in_place)


def _load_options(partial, progress):
    """ckpt_load_options, and the C callback they point at (keep it referenced until the load returned)."""
    opts = _native.new(_native.LoadOptions, missing_keys=_native.STRICT_FAIL,
                       unexpected_keys=_native.STRICT_IGNORE if partial else _native.STRICT_FAIL)
    c_progress = progress_module.callback(progress)
    if c_progress is not None:
        opts.progress = c_progress
    return opts, c_progress


def array_description(key, kind, shape, dtype, **extra):
    """A leaf's description in the saved pytree for a stored tensor of `shape` and `dtype` (for a PRNG key, its key
    data's): with them, a restore without a target needs nothing but the pytree."""
    return dict(key=key, kind=kind, shape=[int(n) for n in shape], dtype=dtypes.code_of(dtype), **extra)


def _target_from_checkpoint(ctx, source, path):
    """The target that restores a checkpoint whole, as numpy arrays. Collective: a first load registers nothing and
    brings back the common entries wherever the checkpoint lies (on storage, or in the memory tier alone), and the
    saved pytree records every array's shape and dtype. A pytree written before it did, or a checkpoint written by
    another language (a flat dict of its tensors and common entries), is listed from storage."""
    with State() as state:
        opts, _c_progress = _load_options(True, None)
        ctx.run(lambda: call("ckpt_load", ctx.handle, state.handle, source, ctypes.byref(opts)))
        text = state.common(tree_module.STRUCTURE_KEY)
    if text is not None:
        encoded = tree_module.parse(text.decode())
        stored = [d for d in tree_module.leaves_of(encoded) if d["kind"] in ("array", "prng_key")]
        if all("shape" in d and "dtype" in d for d in stored):
            return tree_module.build(encoded, _described_placeholder)
    return _target_from_storage(path)


def _described_placeholder(description):
    kind = description["kind"]
    if kind in ("array", "prng_key"):
        return np.broadcast_to(np.empty((), dtypes.dtype_of(description["dtype"])), tuple(description["shape"]))
    return _COMMON_PLACEHOLDER[kind]


def _target_from_storage(path):
    """_target_from_checkpoint's target, from the checkpoint's files on storage."""
    from .reader import Reader
    with Reader(path) as reader:
        tensors = reader.tensors
        common = reader.common
    text = common.get(tree_module.STRUCTURE_KEY)
    if text is None:
        target = {key: _placeholder(info) for key, info in tensors.items()}
        target.update({key: value for key, value in common.items()})
        return target
    encoded = tree_module.parse(text.decode())

    def spec(description):
        key, kind = description["key"], description["kind"]
        if kind in ("array", "prng_key"):
            info = tensors.get(key)
            if info is None:
                raise errors.CorruptError(f"{path}: the pytree names tensor '{key}', which the checkpoint lacks")
            return _placeholder(info)
        return _COMMON_PLACEHOLDER[kind]

    return tree_module.build(encoded, spec)


def _placeholder(info):
    """A target leaf with a tensor's shape and dtype that holds no memory (the restore allocates the real one)."""
    return np.broadcast_to(np.empty((), info.dtype), info.shape)


# Target leaves that stand for a common entry of each kind when no target is given.
_COMMON_PLACEHOLDER = {"bool": False, "int": 0, "float": 0.0, "str": "", "bytes": b""}


def load_flags(allow_dtype_cast):
    """The shard flags of a restore's targets: with `allow_dtype_cast`, a target leaf of another floating dtype than
    the checkpoint's (float16, bfloat16, float32, float64) receives the stored values converted."""
    return _native.SHARD_ALLOW_DTYPE_CAST if allow_dtype_cast else 0


def register_target(state, target, flags=0):
    """Registers buffers for every leaf of `target`, with the shard `flags` (load_flags); returns (structure,
    finishers), where finish(saved) gives the restored leaves once the load has filled them."""
    leaves, structure = tree_module.flatten(target)
    finishers = []
    jax_leaves = []
    for key, leaf in leaves:
        if isinstance(leaf, Shard):
            like = np.asarray(leaf.data)
            buffer = empty(like.shape, like.dtype)
            state.add_tensor(key, buffer, leaf.global_shape, leaf.offset, leaf.replica, flags)
            finishers.append(lambda saved, b=buffer, s=leaf: Shard(b, s.global_shape, s.offset, s.replica))
        elif isinstance(leaf, (np.ndarray, np.generic)):
            buffer = empty(np.shape(leaf), leaf.dtype)
            state.add_tensor(key, buffer, buffer.shape, (0,) * buffer.ndim, flags=flags)
            scalar = isinstance(leaf, np.generic)
            finishers.append(lambda saved, b=buffer, s=scalar: b[()] if s else b)
        elif type(leaf) in _COMMON_KINDS:
            finishers.append(lambda saved, k=key, t=_COMMON_KINDS[type(leaf)]: _restore_common(state, k, saved, t))
        elif _is_jax(leaf):
            finishers.append(None)
            jax_leaves.append((len(finishers) - 1, key, leaf))
        else:
            raise TypeError(f"'{key}': a restore target leaf must be an array (numpy, jax), a jax.ShapeDtypeStruct, a "
                            f"ckpt.Shard, or a bool, int, float, str or bytes; not a {type(leaf).__qualname__}")
    if jax_leaves:
        made = _jax_module().register_for_restore(state, [(k, v) for _, k, v in jax_leaves], flags)
        for (index, _, _), finish in zip(jax_leaves, made):
            finishers[index] = finish
    return structure, finishers


def _restore_common(state, key, saved, target_kind):
    """The common entry `key` as the target leaf's type, which must be the saved value's where the checkpoint's
    pytree records it: a restore never hands back another type than the target asked for."""
    saved_kind = saved.get(key, {}).get("kind", target_kind)
    if saved_kind != target_kind:
        raise errors.MismatchError(f"'{key}': the restore target's leaf is of type {target_kind}, but the checkpoint "
                                   f"saved a value of type {saved_kind} there; restore it into a {saved_kind} leaf")
    raw = state.common(key)
    if raw is None:
        raise errors.NotFoundError(f"the checkpoint has no entry '{key}'")
    return _decode_common(target_kind, raw, key)


def finish_restore(state, structure, finishers):
    text = state.common(tree_module.STRUCTURE_KEY)
    saved = {}
    if text is not None:
        saved = {d["key"]: d for d in tree_module.leaves_of(tree_module.parse(text.decode()))}
    return tree_module.unflatten(structure, [finish(saved) for finish in finishers])


def restore(path, target=None, *, context=None, partial=False, allow_dtype_cast=False, progress=None):
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
    ctx = context_module.resolve(context)
    source = os.fsencode(os.fspath(path))
    if target is None:
        target = _target_from_checkpoint(ctx, source, os.fspath(path))
    with State() as state:
        structure, finishers = register_target(state, target, load_flags(allow_dtype_cast))
        opts, _c_progress = _load_options(partial, progress)
        ctx.run(lambda: call("ckpt_load", ctx.handle, state.handle, source, ctypes.byref(opts)))
        return finish_restore(state, structure, finishers)

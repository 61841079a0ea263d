"""A save in flight: a tree registered in a ckpt_state_t, staged on its context's thread, and the ckpt.Request that
reports its outcome. ckpt.save and CheckpointManager.save start one."""

from __future__ import annotations

import concurrent.futures
import ctypes
import threading
import time
from typing import AbstractSet, Any, Callable, Iterable, List, Mapping, Optional, Tuple, Union

import numpy as np

from . import _dtypes, _native, _tree, errors
from ._native import call, call_status, lib
from ._options import SaveOptions, check_compressed, compressed_keys
from ._state import State
from ._types import Progress, PyTree, StrPath, Tier
from .context import Context
from .progress import RequestStats
from .tree import Shard

# submit(state, options) -> the library's request: the ckpt_save or ckpt_manager_save call of a save.
Submit = Callable[[State, _native.SaveOptions], ctypes.c_void_p]


def read_stats(handle: ctypes.c_void_p) -> RequestStats:
    """The RequestStats of a live ckpt_request_t."""
    stats = _native.new(_native.RequestStats)
    call("ckpt_request_stats_get", handle, ctypes.byref(stats))
    values = {name: getattr(stats, name) for name in RequestStats._fields}
    values["committed"] = bool(stats.committed)
    return RequestStats(**values)


NO_STATS = RequestStats(False, *([0] * (len(RequestStats._fields) - 1)))


class Request:
    """An asynchronous save: the tree's arrays may be changed as soon as save() returned; the checkpoint is written
    and committed in the background. done() and wait() report its outcome, the same on every rank.

    `started` is the ckpt_save call's Future: it resolves to the library's request once the arrays are staged (for
    numpy leaves, before save() returns; for jax.Arrays, which cannot change, on the context's thread meanwhile).
    `options` (the save's SaveOptions) stays referenced until the save finished: the library calls its progress
    callback until then."""

    def __init__(self, started: concurrent.futures.Future[ctypes.c_void_p], path: str,
                 options: SaveOptions) -> None:
        self.path = path
        self._started = started
        self._options: Optional[SaveOptions] = options
        self._handle: Optional[ctypes.c_void_p] = None
        self._lock = threading.Lock()
        # Guards the handle against being freed during stats(), which must not wait while another thread is in
        # wait() holding _lock.
        self._handle_lock = threading.Lock()
        self._released = False
        self._final_stats = NO_STATS
        self._finished = False
        self._failure: Optional[BaseException] = None

    def _release(self) -> None:
        """Keeps the final figures, then frees the handle (which _start took)."""
        with self._handle_lock:
            handle, self._handle = self._handle, None
            if handle is not None:
                self._final_stats = read_stats(handle)
                lib.ckpt_request_free(handle)
            self._released = True
        self._options = None

    def _settle(self, status: int) -> None:
        """Records a final status and frees the handle."""
        if status != _native.IN_PROGRESS:
            self._finished = True
            self._release()

    def _fail(self, error: BaseException) -> None:
        self._failure = error
        self._finished = True
        if self._handle is not None:
            self._release()

    def stats(self) -> RequestStats:
        """What the save has done on this rank (a RequestStats): a snapshot while it runs, final once it finished;
        all zeros while a tree of jax.Arrays waits to be staged. Never blocks; any thread may call it."""
        with self._handle_lock:
            if self._released:
                return self._final_stats
            handle = self._handle
            if handle is None and self._started.done() and self._started.exception() is None:
                handle = self._started.result()  # staged, not yet taken by done() or wait(); freed under this lock
            return read_stats(handle) if handle is not None else NO_STATS

    def _start(self, timeout: Optional[float]) -> bool:
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

    def done(self) -> bool:
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

    def wait(self, timeout: Optional[float] = None) -> bool:
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

    def __repr__(self) -> str:
        state = "failed" if self._failure else "committed" if self._finished else "in progress"
        return f"ckpt.Request({self.path!r}, {state})"


def _encode_common(value: Union[bool, int, float, str, bytes]) -> bytes:
    """A Python leaf as its common entry's bytes (a restore decodes them by the kind the pytree records)."""
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, (int, float)):
        return repr(value).encode()
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def register_tree(state: State, tree: PyTree, compressed: AbstractSet[str] = frozenset()) -> bool:
    """Registers every leaf of `tree` in `state` for a save, the arrays whose keys are in `compressed` with
    CKPT_SHARD_COMPRESS. Returns whether every registered buffer is immutable (jax.Arrays, or copies this package
    owns), so that the staging copy may run after save() returns."""
    leaves, structure = _tree.flatten(tree)
    check_compressed(compressed, [key for key, leaf in leaves if type(leaf) not in _tree.COMMON_KINDS])
    descriptions: List[Optional[_tree.Description]] = []
    jax_leaves: List[Tuple[int, str, Any]] = []
    immutable = True
    for key, leaf in leaves:
        if isinstance(leaf, (Shard, np.ndarray, np.generic)):
            immutable = False
        flags = _native.SHARD_COMPRESS if key in compressed else 0
        if isinstance(leaf, Shard):
            data = _dtypes.native(np.asarray(leaf.data))
            state.add_tensor(key, data, leaf.global_shape, leaf.offset, leaf.replica, flags)
            descriptions.append(_tree.array_description(key, "array", leaf.global_shape, data.dtype))
        elif isinstance(leaf, (np.ndarray, np.generic)):
            array = _dtypes.native(np.asarray(leaf))
            state.add_tensor(key, array, array.shape, (0,) * array.ndim, flags=flags)
            descriptions.append(_tree.array_description(key, "array", array.shape, array.dtype))
        elif type(leaf) in _tree.COMMON_KINDS:
            state.add_common(key, _encode_common(leaf))
            descriptions.append({"key": key, "kind": _tree.COMMON_KINDS[type(leaf)]})
        elif _tree.is_jax_leaf(leaf):
            descriptions.append(None)  # filled below, once every array's shards are gathered in one batch
            jax_leaves.append((len(descriptions) - 1, key, leaf))
        else:
            raise TypeError(f"'{key}': ckpt cannot save a {type(leaf).__module__}.{type(leaf).__qualname__}; leaves "
                            "are arrays (numpy, jax), ckpt.Shard, bool, int, float, str or bytes")
    if jax_leaves:
        from . import _jax_arrays  # imports jax, which numpy users never need
        for index, description in _jax_arrays.register_for_save(state, [(k, v) for _, k, v in jax_leaves],
                                                                    compressed):
            descriptions[jax_leaves[index][0]] = description
    text = _tree.describe(structure, [d for d in descriptions if d is not None])
    state.add_common(_tree.STRUCTURE_KEY, text.encode())
    return immutable


def start_save(ctx: Context, tree: PyTree, path: str, metadata: Optional[Mapping[str, str]], submit: Submit,
               progress: Optional[Progress] = None, tier: Tier = "storage", in_place: bool = False,
               copy_on_write: bool = False, check_replicas: bool = False, incremental: bool = False,
               base: Optional[StrPath] = None, compress: bool = False, compress_keys: Iterable[str] = ()) -> Request:
    """Registers `tree` (the arrays named by `compress_keys` to be stored compressed), then has the context's thread
    call submit(state, options) -> request handle: at once when the tree holds numpy buffers (the caller may change
    them as soon as this returns) or the save is in place (it returns once this rank's bytes are durable), else in
    the background. Returns a Request, tracked by the context."""
    options = SaveOptions(metadata, progress, tier, in_place, copy_on_write, check_replicas, incremental, base,
                          compress)
    compressed = compressed_keys(compress_keys)
    state = State()
    try:
        immutable = register_tree(state, tree, compressed)
    except BaseException:
        state.close()
        raise

    def stage() -> ctypes.c_void_p:
        try:
            return submit(state, options.struct)
        finally:
            # A copy-on-write save, or one checking replicas, may read the buffers after the call: the Request keeps
            # them alive (through its options) until it finishes, the copies register_tree made as well as the
            # caller's arrays.
            if options.reads_after_call:
                options.buffers = list(state._buffers)
            state.close()

    started = ctx._submit_staging(stage)
    if not immutable or in_place or copy_on_write:
        concurrent.futures.wait([started])
        failure = started.exception()
        if failure is not None:
            raise failure
    request = Request(started, path, options)
    ctx._track(request)
    return request

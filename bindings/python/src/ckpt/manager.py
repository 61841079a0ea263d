"""ckpt.CheckpointManager: a root directory of numbered steps, with a `latest` pointer, retention and resume."""

from __future__ import annotations

import ctypes
import datetime
import json
import math
import numbers
import os
import weakref
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from . import _native, errors
from ._native import call, lib
from ._options import compressed_keys, save_flags, tier_code
from ._save import Request, start_save
from ._state import State
from ._types import KeyMap, Missing, Progress, PyTree, StrPath, Tier
from .checkpoint import restore, restore_target
from .context import Context, default_context


class CheckpointManager:
    """Steps of one run under `root` (root/step-000000001200, ...). Opening is collective: rank 0 claims the root
    for this job until close() (or the process's end) and removes what crashed runs left behind; a root another job
    holds is refused on every rank with AlreadyExistsError naming the holder (host, pid, job id). Reading a root
    needs no manager: ckpt.restore(manager's step path) and `ckpt ls ROOT` work while a job holds it. After each
    save commits, rank 0 moves the `latest` pointer and, on a thread of its own (never delaying a save), removes the
    steps the policy no longer keeps among those of this job or found when it claimed the root. A step is kept if
    any rule keeps it, as Orbax's preservation policies combine: the newest `keep_last`; every step divisible by
    `keep_period` (`keep_every` is its older name); the `keep_best` steps whose metrics score best by
    `best_fn(metrics) -> float`, the highest with best_mode "max", the lowest with "min" (a step saved without
    metrics is judged by the other rules alone); those saved within the last `keep_for` seconds (or a timedelta).
    With none of keep_last, keep_best and keep_for, every step is kept; the newest step is always kept, since a
    resume needs it. save() saves only the steps divisible by `save_interval_steps` (should_save(step)).

    With `memory_tier`, every step goes to the node's memory tier (ckpt.save's tier "memory": the ckpt-agent's shared
    memory, which outlives the trainers), and the steps divisible by `storage_every` to storage as well (tier
    "both": the agent writes them there in the background and moves `latest`); with `storage_every` None, a step
    reaches storage only when the trainers die. The job then needs an identity: CKPT_JOB_ID (see ckpt.save).
    restore() resumes from the newest step of either tier, read from memory when it is at least as new as the
    newest on storage; resume_step() says which step that is, while latest_step() and all_steps() see storage only."""

    def __init__(self, root: StrPath, *, keep_last: Optional[int] = None, keep_period: Optional[int] = None,
                 keep_best: Optional[int] = None, best_fn: Optional[Callable[[Dict[str, Any]], float]] = None,
                 best_mode: str = "max", keep_for: Union[None, float, datetime.timedelta] = None,
                 keep_every: Optional[int] = None, save_interval_steps: int = 1, memory_tier: bool = False,
                 storage_every: Optional[int] = None, context: Optional[Context] = None) -> None:
        if save_interval_steps < 1:
            raise ValueError(f"save_interval_steps must be at least 1, not {save_interval_steps}")
        if keep_every is not None and keep_period is not None:
            raise ValueError("keep_every is the older name of keep_period: pass one of them")
        keep_period = keep_every if keep_period is None else keep_period
        for name, value in (("keep_last", keep_last), ("keep_period", keep_period), ("keep_best", keep_best),
                            ("storage_every", storage_every)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1 (or None), not {value}")
        if (keep_best is None) != (best_fn is None):
            raise ValueError("keep_best and best_fn go together: best_fn(metrics) scores the steps of which keep_best "
                             "keeps the best")
        if best_fn is not None and not callable(best_fn):
            raise TypeError(f"best_fn must be callable (metrics -> float), not {type(best_fn).__name__}")
        if best_mode not in _native.BEST_MODES:
            raise ValueError(f"best_mode must be 'max' or 'min', not {best_mode!r}")
        keep_for_seconds = _seconds(keep_for)
        if memory_tier not in (True, False):
            raise ValueError(f"memory_tier must be True or False, not {memory_tier!r}")
        if storage_every is not None and not memory_tier:
            raise ValueError("storage_every applies to the memory tier: pass memory_tier=True with it (without it, "
                             "every saved step goes to storage)")
        self.directory = os.fspath(root)
        self.save_interval_steps = int(save_interval_steps)
        self.memory_tier = bool(memory_tier)
        self.storage_every = storage_every
        self.best_fn = best_fn
        self._context = context or default_context()
        opts = _native.new(_native.ManagerOptions, keep_last=keep_last or 0, keep_every=keep_period or 0,
                           memory_tier=int(self.memory_tier), storage_every=storage_every or 0,
                           keep_best=keep_best or 0, best_mode=_native.BEST_MODES[best_mode],
                           keep_for_seconds=keep_for_seconds)
        handle = ctypes.c_void_p()
        self._context.run(lambda: call("ckpt_manager_open", self._context.handle, os.fsencode(self.directory),
                                       ctypes.byref(opts), ctypes.byref(handle)))
        self._handle: Optional[ctypes.c_void_p] = handle
        self._closed = False
        # A manager dropped without close() still releases its root; at exit, _close_all closes the live ones.
        self._collected = weakref.finalize(self, _free_collected, self._context, handle)
        self._collected.atexit = False
        self._requests: List[Request] = []
        self.last_request: Optional[Request] = None  # the Request of the latest save()
        self._context._adopt(self)

    def _call(self, function_name: str, *args: Any) -> None:
        """A libckpt call on the manager's handle, made on its context's thread (one thread per handle)."""
        self._context.run(lambda: call(function_name, *args))

    @property
    def handle(self) -> ctypes.c_void_p:
        if self._handle is None:
            raise ValueError(f"the CheckpointManager of {self.directory} was freed with its context: it answers "
                             "nothing more")
        return self._handle

    def _open_handle(self, doing: str) -> ctypes.c_void_p:
        """The handle, for what only an open manager does."""
        if self._closed:
            raise ValueError(f"cannot {doing}: the CheckpointManager of {self.directory} is closed (it answers "
                             "latest_step(), all_steps(), step_path() and metrics() only)")
        return self.handle

    def should_save(self, step: int) -> bool:
        return step % self.save_interval_steps == 0

    def step_path(self, step: int) -> str:
        """The directory that holds (or will hold) `step`."""
        buffer = ctypes.create_string_buffer(len(os.fsencode(self.directory)) + 64)
        self._call("ckpt_manager_step_path", self.handle, int(step), buffer, len(buffer))
        return os.fsdecode(buffer.value)

    def save(self, step: int, tree: PyTree, *, metrics: Optional[Mapping[str, Any]] = None,
             metadata: Optional[Mapping[str, str]] = None, force: bool = False, progress: Optional[Progress] = None,
             tier: Optional[Tier] = None, in_place: bool = False, copy_on_write: bool = False,
             check_replicas: bool = False, incremental: bool = False, base: Optional[StrPath] = None,
             compress: bool = False, compress_keys: Iterable[str] = ()) -> bool:
        """Collective. Saves `tree` as `step` when should_save(step) or `force`, and returns whether it did. Returns
        once this rank's buffers are staged; the step commits in the background (wait() waits for it). `progress`
        is called as ckpt.save's is; last_request holds the step's Request (its stats()).

        `tier` overrides the manager's choice for this step: "memory" or "both", as ckpt.save's. None follows the
        manager: storage, or with memory_tier its policy. "storage" is refused with memory_tier, since the library
        applies the manager's policy to every save that asks for storage. `in_place` is ckpt.save's: no staging
        copy, and save() returns once this rank's bytes are durable. `copy_on_write` is ckpt.save's too: save()
        returns once the buffers are write-protected, and pages written before they were copied are copied first.
        `check_replicas` is ckpt.save's: the ranks holding replicas of a box compare their copies' block checksums
        before the step commits; a difference fails the save (CorruptError) naming the tensor, box, blocks and
        ranks. `incremental` is ckpt.save's: the step records its blocks' digests and writes only the rows that
        changed since `base`, by default the latest committed step (a step_path of this root otherwise); retention
        keeps every step a kept step refers to. `compress` and `compress_keys` are ckpt.save's: the step's blocks
        (or those of the named arrays) are stored losslessly compressed, a format 3 checkpoint.

        `metrics` (a JSON-serialisable mapping, at most 1 MiB as JSON) is stored with the step, committing with it;
        metrics(step) reads it back. With keep_best, best_fn(metrics) scores the step: every process computes it
        (so that one failing fails on every process before the collective save), and process 0's metrics and score
        are stored. Metrics do not go through the memory tier (the agents copy the checkpoint alone): saving a step
        there with metrics raises InvalidArgumentError."""
        save_flags(in_place, copy_on_write, check_replicas, incremental, compress)
        compress_keys = compressed_keys(compress_keys)  # checked before should_save, once (an iterator ends)
        if tier is not None:
            tier_code(tier)
            if tier == "storage" and self.memory_tier:
                raise ValueError("tier='storage' cannot override memory_tier=True: every step goes to memory, and "
                                 "to storage too when divisible by storage_every; pass tier='both' to force storage")
        if not force and not self.should_save(step):
            return False
        handle_of_manager = self._open_handle(f"save step {step}")
        encoded, score = self._annotations(step, metrics)

        def submit(state: State, opts: _native.SaveOptions) -> ctypes.c_void_p:
            opts.metrics = encoded
            if score is not None:
                opts.best_value, opts.has_best_value = score, 1
            handle = ctypes.c_void_p()
            call("ckpt_manager_save", handle_of_manager, state.handle, int(step), ctypes.byref(opts),
                 ctypes.byref(handle))
            return handle

        request = start_save(self._context, tree, self.step_path(step), metadata, submit, progress,
                             "storage" if tier is None else tier, in_place, copy_on_write, check_replicas,
                             incremental, base, compress, compress_keys)
        self._requests = [r for r in self._requests if not r._finished] + [request]
        self.last_request = request
        return True

    def _annotations(self, step: int, metrics: Optional[Mapping[str, Any]]) -> Tuple[Optional[bytes], Optional[float]]:
        """The JSON text of `metrics` and, with keep_best, best_fn's score of them, for ckpt_save_options."""
        if metrics is None:
            return None, None
        if not isinstance(metrics, Mapping):
            raise TypeError(f"metrics of step {step} must be a mapping (str -> JSON value), not "
                            f"{type(metrics).__name__}")
        try:
            encoded = json.dumps(dict(metrics), allow_nan=False).encode()
        except (TypeError, ValueError) as e:
            raise type(e)(f"metrics of step {step} cannot be stored as JSON: {e}") from e
        if self.best_fn is None:
            return encoded, None
        score: object = self.best_fn(dict(metrics))  # checked: a callable may return anything
        if isinstance(score, bool) or not isinstance(score, numbers.Real) or not math.isfinite(float(score)):
            raise ValueError(f"best_fn returned {score!r} for the metrics of step {step}: it must return a finite "
                             "number")
        return encoded, float(score)

    def metrics(self, step: int) -> Optional[Dict[str, Any]]:
        """The metrics saved with `step` (save(..., metrics=)), as JSON gives them back (keys sorted, tuples as
        lists); None when it was saved without any or is not a committed step. Not collective; read from the step,
        also once the manager is closed."""
        length = ctypes.c_uint64()
        try:
            self._call("ckpt_manager_metrics", self.handle, int(step), None, 0, ctypes.byref(length))
            buffer = ctypes.create_string_buffer(length.value + 1)
            self._call("ckpt_manager_metrics", self.handle, int(step), buffer, len(buffer), ctypes.byref(length))
        except errors.NotFoundError:
            return None
        metrics: Dict[str, Any] = json.loads(buffer.value.decode())
        return metrics

    def restore(self, step: Optional[int] = None, target: Optional[PyTree] = None, *, partial: bool = False,
                allow_dtype_cast: bool = False, progress: Optional[Progress] = None,
                key_map: Optional[KeyMap] = None, missing: Missing = "error") -> PyTree:
        """Collective. The tree saved as `step` (None: resume_step()'s), shaped like `target` as ckpt.restore does
        (`partial`, `allow_dtype_cast`, `progress`, `key_map` and `missing` too; without a target, the saved tree as
        ckpt.restore gives it).
        NotFoundError on every rank when there is no committed step. A step in the memory tier is read from there."""
        self._open_handle("restore")
        if step is None and target is None:
            step = self.resume_step()
            if step is None:
                raise errors.NotFoundError(f"no committed step under {self.directory}, on storage or in memory")
        if step is not None:
            return restore(self.step_path(step), target, context=self._context, partial=partial,
                           allow_dtype_cast=allow_dtype_cast, progress=progress, key_map=key_map, missing=missing)

        def load(state: State, opts: _native.LoadOptions) -> None:
            loaded = ctypes.c_uint64()
            self._context.run(lambda: call("ckpt_manager_load_latest", self.handle, state.handle,
                                           ctypes.byref(opts), ctypes.byref(loaded)))

        return restore_target(target, load, partial=partial, allow_dtype_cast=allow_dtype_cast, progress=progress,
                              key_map=key_map, missing=missing)

    def resume_step(self) -> Optional[int]:
        """Collective. The step restore() without a step loads, the same on every process: the latest on storage,
        or the newest step the job's node agents hold in memory when it is at least as new (which latest_step()
        does not see). None when there is none: a fresh start."""
        step = ctypes.c_uint64()
        try:
            self._call("ckpt_manager_resume_step", self._open_handle("resume"), ctypes.byref(step))
        except errors.NotFoundError:
            return None
        return step.value

    def latest_step(self) -> Optional[int]:
        """The newest committed step that `latest` names (or, if the pointer is stale, the newest committed one);
        None if there is none. Not collective; read afresh from the root, also once the manager is closed."""
        step = ctypes.c_uint64()
        try:
            self._call("ckpt_manager_latest", self.handle, ctypes.byref(step))
        except errors.NotFoundError:
            return None
        return step.value

    def all_steps(self) -> List[int]:
        """Every committed step under the root, ascending. Not collective; also once the manager is closed."""
        count = ctypes.c_uint64()
        self._call("ckpt_manager_steps", self.handle, None, 0, ctypes.byref(count))
        while True:
            steps = (ctypes.c_uint64 * max(count.value, 1))()
            capacity = count.value
            self._call("ckpt_manager_steps", self.handle, steps, capacity, ctypes.byref(count))
            if count.value <= capacity:
                return [steps[i] for i in range(count.value)]

    def wait(self) -> None:
        """Waits for this manager's saves in flight and, on process 0, for the removals of old steps they asked for
        (which otherwise go on in the background; resume_step(), and restore() of the resume step, wait for them
        too); raises the first failure of a save. Not collective: another process sees the removals once it hears from process 0."""
        requests, self._requests = self._requests, []
        first: Optional[errors.Error] = None
        for request in requests:
            try:
                request.wait()
            except errors.Error as e:
                first = first or e
        if self._handle is not None:
            self._call("ckpt_manager_wait", self._handle)
        if first is not None:
            raise first

    def close(self) -> None:
        """Waits for the saves in flight (raising the first failure), then releases the root's claim, so that another
        job may claim it. The closed manager still answers latest_step(), all_steps(), step_path() and metrics(),
        reading the root afresh; save(), restore() and resume_step() raise ValueError. Closing again does nothing."""
        if self._closed or self._handle is None:
            return
        self._closed = True
        try:
            self.wait()
        finally:
            self._call("ckpt_manager_close", self.handle)

    def _free(self) -> None:
        """Its context is closing: closes the manager, then frees its handle, after which it answers nothing."""
        if self._handle is None:
            return
        try:
            self.close()
        finally:
            handle, self._handle = self._handle, None
            self._collected.detach()
            self._context.run(lambda: lib.ckpt_manager_free(handle))

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, exc_type: Optional[type], *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:  # already failing: free without masking the original exception
            try:
                self.close()
            except errors.Error:
                pass

    def __repr__(self) -> str:
        return f"ckpt.CheckpointManager({self.directory!r})"


def _seconds(keep_for: Union[None, float, datetime.timedelta]) -> int:
    """keep_for as whole seconds for ckpt_manager_options (0: no such rule), rounded up: a step is never kept for less
    time than asked."""
    if keep_for is None:
        return 0
    seconds: object = keep_for.total_seconds() if isinstance(keep_for, datetime.timedelta) else keep_for
    if (isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or not math.isfinite(float(seconds))
            or float(seconds) <= 0):
        raise ValueError(f"keep_for must be a positive number of seconds or a timedelta (or None), not {keep_for!r}")
    return math.ceil(float(seconds))


def _free_collected(context: Context, handle: ctypes.c_void_p) -> None:
    """Frees the handle of a manager collected without close(), on its context's thread (after the calls queued
    there), which releases the manager's claim on its root."""
    try:
        context.submit(lambda: lib.ckpt_manager_free(handle))
    except ValueError:  # the context is closed, and the library freed everything it held
        pass

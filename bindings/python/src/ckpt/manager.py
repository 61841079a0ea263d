"""ckpt.CheckpointManager: a root directory of numbered steps, with a `latest` pointer, retention and resume."""

from __future__ import annotations

import ctypes
import os
import weakref
from typing import Any, List, Mapping, Optional

from . import _native, errors
from ._native import call, lib
from ._options import load_flags, load_options, save_flags, tier_code
from ._restore import finish_restore, register_target
from ._save import Request, start_save
from ._state import State
from ._types import Progress, PyTree, StrPath, Tier
from .checkpoint import restore
from .context import Context, default_context


class CheckpointManager:
    """Steps of one run under `root` (root/step-000000001200, ...). Opening is collective: rank 0 claims the root
    for this job until close() (or the process's end) and removes what crashed runs left behind; a root another job
    holds is refused on every rank with AlreadyExistsError naming the holder (host, pid, job id). Reading a root
    needs no manager: ckpt.restore(manager's step path) and `ckpt ls ROOT` work while a job holds it. After each
    save commits, rank 0 moves the `latest` pointer and removes the steps the policy no longer keeps among those of
    this job or found when it claimed the root: the newest `keep_last` (None: all), plus every step divisible by
    `keep_every`. save() saves only the steps divisible by `save_interval_steps`.

    With `memory_tier`, every step goes to the node's memory tier (ckpt.save's tier "memory": the ckpt-agent's shared
    memory, which outlives the trainers), and the steps divisible by `storage_every` to storage as well (tier
    "both": the agent writes them there in the background and moves `latest`); with `storage_every` None, a step
    reaches storage only when the trainers die. The job then needs an identity: CKPT_JOB_ID (see ckpt.save).
    restore() resumes from the newest step of either tier, read from memory when it is at least as new as the
    newest on storage; resume_step() says which step that is, while latest_step() and all_steps() see storage only."""

    def __init__(self, root: StrPath, *, keep_last: Optional[int] = None, keep_every: Optional[int] = None,
                 save_interval_steps: int = 1, memory_tier: bool = False, storage_every: Optional[int] = None,
                 context: Optional[Context] = None) -> None:
        if save_interval_steps < 1:
            raise ValueError(f"save_interval_steps must be at least 1, not {save_interval_steps}")
        for name, value in (("keep_last", keep_last), ("keep_every", keep_every), ("storage_every", storage_every)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1 (or None), not {value}")
        if memory_tier not in (True, False):
            raise ValueError(f"memory_tier must be True or False, not {memory_tier!r}")
        if storage_every is not None and not memory_tier:
            raise ValueError("storage_every applies to the memory tier: pass memory_tier=True with it (without it, "
                             "every saved step goes to storage)")
        self.directory = os.fspath(root)
        self.save_interval_steps = int(save_interval_steps)
        self.memory_tier = bool(memory_tier)
        self.storage_every = storage_every
        self._context = context or default_context()
        opts = _native.new(_native.ManagerOptions, keep_last=keep_last or 0, keep_every=keep_every or 0,
                           memory_tier=int(self.memory_tier), storage_every=storage_every or 0)
        handle = ctypes.c_void_p()
        self._context.run(lambda: call("ckpt_manager_open", self._context.handle, os.fsencode(self.directory),
                                       ctypes.byref(opts), ctypes.byref(handle)))
        self._handle: Optional[ctypes.c_void_p] = handle
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
            raise ValueError(f"the CheckpointManager of {self.directory} is closed")
        return self._handle

    def should_save(self, step: int) -> bool:
        return step % self.save_interval_steps == 0

    def step_path(self, step: int) -> str:
        """The directory that holds (or will hold) `step`."""
        buffer = ctypes.create_string_buffer(len(os.fsencode(self.directory)) + 64)
        self._call("ckpt_manager_step_path", self.handle, int(step), buffer, len(buffer))
        return os.fsdecode(buffer.value)

    def save(self, step: int, tree: PyTree, *, metadata: Optional[Mapping[str, str]] = None, force: bool = False,
             progress: Optional[Progress] = None, tier: Optional[Tier] = None, in_place: bool = False) -> bool:
        """Collective. Saves `tree` as `step` when should_save(step) or `force`, and returns whether it did. Returns
        once this rank's buffers are staged; the step commits in the background (wait() waits for it). `progress`
        is called as ckpt.save's is; last_request holds the step's Request (its stats()).

        `tier` overrides the manager's choice for this step: "memory" or "both", as ckpt.save's. None follows the
        manager: storage, or with memory_tier its policy. "storage" is refused with memory_tier, since the library
        applies the manager's policy to every save that asks for storage. `in_place` is ckpt.save's: no staging
        copy, and save() returns once this rank's bytes are durable."""
        save_flags(in_place)
        if tier is not None:
            tier_code(tier)
            if tier == "storage" and self.memory_tier:
                raise ValueError("tier='storage' cannot override memory_tier=True: every step goes to memory, and "
                                 "to storage too when divisible by storage_every; pass tier='both' to force storage")
        if not force and not self.should_save(step):
            return False

        def submit(state: State, opts: _native.SaveOptions) -> ctypes.c_void_p:
            handle = ctypes.c_void_p()
            call("ckpt_manager_save", self.handle, state.handle, int(step), ctypes.byref(opts), ctypes.byref(handle))
            return handle

        request = start_save(self._context, tree, self.step_path(step), metadata, submit, progress,
                             "storage" if tier is None else tier, in_place)
        self._requests = [r for r in self._requests if not r._finished] + [request]
        self.last_request = request
        return True

    def restore(self, step: Optional[int] = None, target: Optional[PyTree] = None, *, partial: bool = False,
                allow_dtype_cast: bool = False, progress: Optional[Progress] = None) -> PyTree:
        """Collective. The tree saved as `step` (None: resume_step()'s), shaped like `target` as ckpt.restore does
        (`partial`, `allow_dtype_cast` and `progress` too; without a target, the saved tree of numpy arrays).
        NotFoundError on every rank when there is no committed step. A step in the memory tier is read from there."""
        if step is None and target is None:
            step = self.resume_step()
            if step is None:
                raise errors.NotFoundError(f"no committed step under {self.directory}, on storage or in memory")
        if step is not None:
            return restore(self.step_path(step), target, context=self._context, partial=partial,
                           allow_dtype_cast=allow_dtype_cast, progress=progress)
        with State() as state:
            structure, finishers = register_target(state, target, load_flags(allow_dtype_cast))
            opts, _c_progress = load_options(partial, progress)
            loaded = ctypes.c_uint64()
            self._context.run(lambda: call("ckpt_manager_load_latest", self.handle, state.handle,
                                           ctypes.byref(opts), ctypes.byref(loaded)))
            return finish_restore(state, structure, finishers)

    def resume_step(self) -> Optional[int]:
        """Collective. The step restore() without a step loads, the same on every process: the latest on storage,
        or the newest step the job's node agents hold in memory when it is at least as new (which latest_step()
        does not see). None when there is none: a fresh start."""
        step = ctypes.c_uint64()
        try:
            self._call("ckpt_manager_resume_step", self.handle, ctypes.byref(step))
        except errors.NotFoundError:
            return None
        return step.value

    def latest_step(self) -> Optional[int]:
        """The newest committed step that `latest` names (or, if the pointer is stale, the newest committed one);
        None if there is none. Not collective."""
        step = ctypes.c_uint64()
        try:
            self._call("ckpt_manager_latest", self.handle, ctypes.byref(step))
        except errors.NotFoundError:
            return None
        return step.value

    def all_steps(self) -> List[int]:
        """Every committed step under the root, ascending. Not collective."""
        count = ctypes.c_uint64()
        self._call("ckpt_manager_steps", self.handle, None, 0, ctypes.byref(count))
        while True:
            steps = (ctypes.c_uint64 * max(count.value, 1))()
            capacity = count.value
            self._call("ckpt_manager_steps", self.handle, steps, capacity, ctypes.byref(count))
            if count.value <= capacity:
                return [steps[i] for i in range(count.value)]

    def wait(self) -> None:
        """Waits for this manager's saves in flight; raises the first failure."""
        requests, self._requests = self._requests, []
        first: Optional[errors.Error] = None
        for request in requests:
            try:
                request.wait()
            except errors.Error as e:
                first = first or e
        if first is not None:
            raise first

    def close(self) -> None:
        """Waits for the saves in flight (raising the first failure), then frees the manager."""
        if self._handle is None:
            return
        try:
            self.wait()
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


def _free_collected(context: Context, handle: ctypes.c_void_p) -> None:
    """Frees the handle of a manager collected without close(), on its context's thread (after the calls queued
    there), which releases the manager's claim on its root."""
    try:
        context.submit(lambda: lib.ckpt_manager_free(handle))
    except ValueError:  # the context is closed, and the library freed everything it held
        pass

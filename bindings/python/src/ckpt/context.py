"""ckpt.Context: this process's handle on the job (one per rank), and the default context that save, restore and
CheckpointManager use when none is given."""

from __future__ import annotations

import atexit
import concurrent.futures
import ctypes
import itertools
import os
import sys
import threading
import weakref
from typing import Any, Callable, Iterable, List, Literal, Optional, Protocol, TypedDict, TypeVar, Union, cast

from . import _native
from ._native import call, lib

_T = TypeVar("_T")
# allgather(this rank's bytes) -> every rank's bytes, in rank order.
Allgather = Callable[[bytes], Iterable[bytes]]
Transport = Literal["auto", "none", "ucx", "nccl"]


class JobCollectives(Protocol):
    """The job's own collectives, which Context(collectives=...) carries ckpt's collective metadata over."""

    def allgather(self, data: bytes) -> Iterable[bytes]:
        """Every rank's bytes, in rank order."""

    def alltoall(self, blocks: List[bytes]) -> Iterable[bytes]:
        """Given one block per rank, the blocks every rank sent this one, in rank order."""

    def broadcast(self, data: bytes, root: int) -> bytes:
        """The root's bytes (what other ranks pass is to be ignored)."""

    def barrier(self) -> object:
        """Returns once every rank called it."""


class _Dependent(Protocol):
    def _free(self) -> None: ...


class ContextStats(TypedDict):
    """Context.stats(): this rank's counters since the context was created (ckpt_context_stats)."""

    io_workers: int
    arena_bytes: int
    saves_committed: int
    plans_computed: int
    plans_reused: int
    bytes_staged: int
    bytes_written: int
    bytes_read: int
    bytes_sent: int
    bytes_received: int
    transport: Union[str, int]  # by name; a number this package does not know stays a number
    exchange_ns: int
    control_bytes_sent: int
    control_bytes_received: int
    store_collectives: int
    last_load_reads: int  # ckpt_context_stats: CKPT_LOAD_READS_ONCE (1) or _OWN (2); 0 before any load
    last_load_read_amplification_milli: int


_live_contexts: weakref.WeakSet[Context] = weakref.WeakSet()
_default_lock = threading.Lock()
_default: Optional[Context] = None
_jax_generation = itertools.count()


class Context:
    """One rank's context: its place in the job, the I/O worker processes, the staging arena and the data transport.

    Creating one is collective: every rank of the job creates its own, in the same order as its other contexts.
    The first context a process creates becomes its default context (what save, restore and CheckpointManager use
    when given none). With no argument, rank and world size come from the launcher's environment (torchrun's RANK,
    WORLD_SIZE, MASTER_ADDR, MASTER_PORT; OpenMPI; SLURM) and a process launched alone is a one-rank job.
    Context.from_jax() takes them from jax.distributed and needs no MASTER_ADDR. Explicit arguments override both.

    rank, world_size, local_rank: this process's place. store_host, store_port: the TCP store rank 0 hosts.
    timeout: seconds any wait on a peer may take. io_workers: I/O worker processes (0: threads of this process).
    arena_bytes: size of the staging arena. transport: "auto", "ucx", "nccl" or "none", how loads exchange data.
    node_name: ranks with the same name share a host. allgather: a function (bytes) -> list of every rank's bytes,
    used once, while the context is created, to spread the store's address (so no MASTER_ADDR is needed).
    collectives: the job's own collectives (an MPI communicator's, say), which then carry all of ckpt's collective
    metadata instead of its TCP store: an object with allgather(bytes) -> list of every rank's bytes,
    alltoall(list of bytes, one per rank) -> list of the bytes each rank sent this one, broadcast(bytes, root) ->
    root's bytes (what other ranks pass is to be ignored), and barrier(). Every call comes from the context's own thread, in the same order on every
    rank; needs rank and world_size; not with allgather.
    """

    def __init__(self, *, rank: Optional[int] = None, world_size: Optional[int] = None,
                 local_rank: Optional[int] = None, store_host: Optional[str] = None, store_port: Optional[int] = None,
                 timeout: Optional[float] = None, io_workers: Optional[int] = None, arena_bytes: Optional[int] = None,
                 transport: Optional[Transport] = None, node_name: Optional[str] = None,
                 allgather: Optional[Allgather] = None, collectives: Optional[JobCollectives] = None,
                 _private: bool = False) -> None:
        opts = _native.new(_native.ContextOptions, rank=-1, world_size=-1, local_rank=-1, store_port=-1,
                           io_workers=-1, transport=_native.TRANSPORT_DEFAULT)
        if rank is not None or world_size is not None:
            opts.rank = -1 if rank is None else int(rank)
            opts.world_size = -1 if world_size is None else int(world_size)
        if local_rank is not None:
            opts.local_rank = int(local_rank)
        if store_host is not None:
            opts.store_host = str(store_host).encode()
        if store_port is not None:
            opts.store_port = int(store_port)
        if timeout is not None:
            if timeout <= 0:
                raise ValueError(f"timeout must be positive, not {timeout}")
            opts.timeout_ms = max(1, int(timeout * 1000))
        if io_workers is not None:
            opts.io_workers = int(io_workers)
        if arena_bytes is not None:
            opts.arena_bytes = int(arena_bytes)
        if transport is not None:
            if transport not in _native.TRANSPORTS:
                raise ValueError(f"transport {transport!r}: expected one of {', '.join(_native.TRANSPORTS)}")
            opts.transport = _native.TRANSPORTS[transport]
        if node_name is not None:
            opts.node_name = str(node_name).encode()
        failure: List[BaseException] = []
        if allgather is not None:
            if rank is None or world_size is None:
                raise ValueError("a context bootstrapped through an allgather needs rank and world_size")
            callback = _allgather_callback(allgather, int(world_size), failure)
            opts.allgather = callback  # referenced by opts until the call below returns
        self._collectives: Optional[_CollectivesTable] = None
        if collectives is not None:
            if rank is None or world_size is None:
                raise ValueError("a context over the job's collectives needs rank and world_size")
            # Kept for the context's life: the library calls them in every save and load.
            self._collectives = _CollectivesTable(collectives, int(world_size), failure)
            opts.collectives = ctypes.pointer(self._collectives.table)
        handle = ctypes.c_void_p()
        try:
            call("ckpt_context_create", ctypes.byref(opts), ctypes.byref(handle))
        except Exception as e:
            if failure:
                raise e from failure[0]
            raise
        self._handle: Optional[ctypes.c_void_p] = handle
        self._lock = threading.RLock()
        # Every call that uses the handle runs on this one thread, in the order submitted: a context must not be
        # used by two threads at once, and its collectives must reach the library in the same order on every rank.
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-context")
        self._executor_thread: Optional[threading.Thread] = None
        self._staging: Optional[concurrent.futures.Future[Any]] = None  # the last save's staging
        self._requests: List[_Pending] = []  # unfinished saves, waited for before the context is freed
        # Managers and savers that use the handle: closed before it is freed.
        self._dependents: weakref.WeakSet[_Dependent] = weakref.WeakSet()
        self.rank: int = lib.ckpt_context_rank(handle)
        self.world_size: int = lib.ckpt_context_world_size(handle)
        self.local_rank: int = lib.ckpt_context_local_rank(handle)
        _live_contexts.add(self)
        if not _private:
            _become_default_if_none(self)

    @classmethod
    def from_env(cls, **options: Any) -> Context:
        """A context from the launcher's environment (the same as Context(**options))."""
        return cls(**options)

    @classmethod
    def from_jax(cls, **options: Any) -> Context:
        """A context whose rank and world size are jax.process_index() and jax.process_count(), bootstrapped over
        JAX's coordination service (the key-value store jax.distributed.initialize starts), so that no MASTER_ADDR
        or MASTER_PORT is needed. Every process must call it in the same order."""
        import jax
        from jax._src import distributed
        rank, world = jax.process_index(), jax.process_count()
        options.setdefault("rank", rank)
        options.setdefault("world_size", world)
        if "local_rank" not in options and os.environ.get("LOCAL_RANK", "").isdigit():
            options["local_rank"] = int(os.environ["LOCAL_RANK"])
        client = distributed.global_state.client
        if world > 1 and "allgather" not in options:
            if client is None:
                raise RuntimeError("jax runs several processes but jax.distributed has no client: call "
                                   "jax.distributed.initialize() first")
            options["allgather"] = _jax_allgather(client, rank, world, next(_jax_generation), options.get("timeout"))
        return cls(**options)

    @property
    def handle(self) -> ctypes.c_void_p:
        """The ckpt_context_t* (as a ctypes pointer), for calls into the C library."""
        if self._handle is None:
            raise ValueError("this ckpt.Context is closed")
        return self._handle

    def submit(self, fn: Callable[[], _T]) -> concurrent.futures.Future[_T]:
        """Runs fn() on the context's thread, after everything submitted before; returns its Future."""
        if self._handle is None:
            raise ValueError("this ckpt.Context is closed")

        def on_context_thread() -> _T:
            self._executor_thread = threading.current_thread()
            return fn()

        return self._executor.submit(on_context_thread)

    def _submit_staging(self, fn: Callable[[], _T]) -> concurrent.futures.Future[_T]:
        """Submits a save's staging (see submit) once the previous save's staging is over: at most one tree waits to
        be staged, so that a loop saving faster than the staging keeps no more than one state alive for it."""
        if self._staging is not None:
            concurrent.futures.wait([self._staging])
        staging = self._staging = self.submit(fn)
        return staging

    def run(self, fn: Callable[[], _T]) -> _T:
        """Runs fn() on the context's thread after everything submitted before, and returns its result."""
        if threading.current_thread() is self._executor_thread or self._thread_stopped_at_exit():
            return fn()
        return self.submit(fn).result()

    def _thread_stopped_at_exit(self) -> bool:
        """Whether the interpreter, exiting, has already stopped the context's thread: concurrent.futures ends its
        workers (after their queued work) before atexit handlers run, and _close_all then closes what was left
        open. No other thread is left to use the handle then, so the calling thread may."""
        return self._executor_thread is not None and not self._executor_thread.is_alive()

    def stats(self) -> ContextStats:
        """This rank's counters since the context was created (the ckpt_context_stats fields)."""
        stats = _native.new(_native.ContextStats)
        self.run(lambda: call("ckpt_context_stats_get", self.handle, ctypes.byref(stats)))
        names = [field[0] for field in _native.ContextStats._fields_ if field[0] != "struct_size"]
        out = {name: getattr(stats, name) for name in names}
        out["transport"] = {v: k for k, v in _native.TRANSPORTS.items()}.get(stats.transport, stats.transport)
        return cast(ContextStats, out)

    def _track(self, request: _Pending) -> None:
        """Keeps a save request so that close() waits for it, and forgets those that finished."""
        with self._lock:
            self._requests = [r for r in self._requests if not r._finished]
            self._requests.append(request)

    def _adopt(self, dependent: _Dependent) -> None:
        """Registers an object holding C handles tied to this context, whose _free() frees them before the context
        is freed."""
        self._dependents.add(dependent)

    def wait(self) -> None:
        """Waits for every save issued through this context; raises the first failure."""
        with self._lock:
            requests, self._requests = self._requests, []
        first: Optional[Exception] = None
        for request in requests:
            try:
                request.wait()
            except Exception as e:  # every request is waited for; the first failure is reported
                first = first or e
        if first is not None:
            raise first

    def close(self) -> None:
        """Waits for this context's saves in flight, then frees it. Every rank should close its context (or exit):
        a rank that leaves early is seen by the others as dead. Saves that fail are logged, not raised."""
        global _default
        with self._lock:
            if self._handle is None:
                return
            for dependent in list(self._dependents):
                try:
                    dependent._free()
                except Exception as e:
                    print(f"ckpt: closing {dependent!r} with its context: {e}", file=sys.stderr)
            try:
                self.wait()
            except Exception as e:
                print(f"ckpt: a save failed before its context closed: {e}", file=sys.stderr)
            self._executor.shutdown(wait=True)
            lib.ckpt_context_free(self._handle)
            self._handle = None
        with _default_lock:
            if _default is self:
                _default = None

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else f"rank {self.rank} of {self.world_size}"
        return f"ckpt.Context({state})"


class _Pending(Protocol):
    """A save in flight (a ckpt.Request), as the context that waits for it sees it."""

    _finished: bool

    def wait(self) -> bool: ...


def _allgather_callback(allgather: Allgather, world_size: int, failure: List[BaseException]) -> _native.CFunction:
    """Wraps a Python allgather (bytes -> list of every rank's bytes) as a ckpt_allgather_fn; a Python exception,
    or an answer of the wrong shape, is kept in `failure` and reported as a failed call."""

    def trampoline(_user: Optional[int], send: Optional[int], size: int, recv: Optional[int]) -> int:
        try:
            mine = ctypes.string_at(send, size) if size and send is not None else b""
            blocks = [bytes(b) for b in allgather(mine)]
            if len(blocks) != world_size or any(len(b) != size for b in blocks):
                raise ValueError(f"the allgather returned {len(blocks)} blocks of sizes {[len(b) for b in blocks]}; "
                                 f"expected {world_size} blocks of {size} bytes")
            total = b"".join(blocks)
            if recv is not None:  # NULL only where every block is empty
                ctypes.memmove(recv, total, len(total))
            return 0
        except BaseException as e:  # never let an exception unwind through C
            failure.append(e)
            return 1

    return _native.ALLGATHER_FN(trampoline)


class _U64s(Protocol):
    """A uint64_t array the library passes: sizes or offsets, one per rank."""

    def __getitem__(self, index: int) -> int: ...


class _CollectivesTable:
    """The job's collectives (see Context) as a ckpt_collectives table. A Python exception, or an answer of the wrong
    shape, fails the call: the library reports the function's failure on this rank, and the exception is printed."""

    def __init__(self, collectives: JobCollectives, world_size: int, failure: List[BaseException]) -> None:
        self._collectives = collectives
        self._world_size = world_size
        self._failure = failure
        self.table = _native.new(_native.Collectives)
        self.table.allgatherv = _native.ALLGATHERV_FN(self._guarded("allgather", self._allgatherv))
        self.table.alltoallv = _native.ALLTOALLV_FN(self._guarded("alltoall", self._alltoallv))
        self.table.broadcast = _native.BROADCAST_FN(self._guarded("broadcast", self._broadcast))
        self.table.barrier = _native.BARRIER_FN(self._guarded("barrier", lambda _user: self._collectives.barrier()))

    def _guarded(self, name: str, fn: Callable[..., object]) -> Callable[..., int]:
        def trampoline(*args: Any) -> int:
            try:
                fn(*args)
                return 0
            except BaseException as e:  # never let an exception unwind through C
                self._failure.append(e)
                print(f"ckpt: the job's {name} failed: {e!r}", file=sys.stderr)
                return 1
        return trampoline

    def _answer(self, name: str, answer: Iterable[bytes], sizes: List[int]) -> List[bytes]:
        blocks = [bytes(b) for b in answer]
        if [len(b) for b in blocks] != sizes:
            raise ValueError(f"{name} returned blocks of sizes {[len(b) for b in blocks]}, expected {sizes}")
        return blocks

    def _allgatherv(self, _user: Optional[int], send: int, size: int, recv: int, recv_sizes: _U64s,
                    recv_offsets: _U64s) -> None:
        sizes = [recv_sizes[r] for r in range(self._world_size)]
        mine = ctypes.string_at(send, size) if size else b""
        for r, block in enumerate(self._answer("allgather", self._collectives.allgather(mine), sizes)):
            if block:
                ctypes.memmove(recv + recv_offsets[r], block, len(block))

    def _alltoallv(self, _user: Optional[int], send: int, send_sizes: _U64s, send_offsets: _U64s, recv: int,
                   recv_sizes: _U64s, recv_offsets: _U64s) -> None:
        world = self._world_size
        outgoing = [ctypes.string_at(send + send_offsets[r], send_sizes[r]) if send_sizes[r] else b""
                    for r in range(world)]
        sizes = [recv_sizes[r] for r in range(world)]
        for r, block in enumerate(self._answer("alltoall", self._collectives.alltoall(outgoing), sizes)):
            if block:
                ctypes.memmove(recv + recv_offsets[r], block, len(block))

    def _broadcast(self, _user: Optional[int], buffer: int, size: int, root: int) -> None:
        mine = ctypes.string_at(buffer, size) if size else b""
        got = bytes(self._collectives.broadcast(mine, root))
        if len(got) != size:
            raise ValueError(f"broadcast returned {len(got)} bytes, expected {size}")
        if size:
            ctypes.memmove(buffer, got, size)


def _jax_allgather(client: Any, rank: int, world: int, generation: int, timeout: Optional[float]) -> Allgather:
    """An allgather over the key-value store of JAX's coordination service."""
    counter = itertools.count()
    timeout_ms = int((timeout or 300) * 1000)

    def allgather(data: bytes) -> List[bytes]:
        prefix = f"ckpt/context-{generation}/allgather-{next(counter)}"
        client.key_value_set_bytes(f"{prefix}/{rank}", data)
        return [client.blocking_key_value_get_bytes(f"{prefix}/{r}", timeout_ms) for r in range(world)]

    return allgather


def _jax_is_distributed() -> bool:
    jax = sys.modules.get("jax")
    if jax is None:
        return False
    from jax._src import distributed
    return distributed.global_state.client is not None


def _become_default_if_none(context: Context) -> None:
    global _default
    with _default_lock:
        if _default is None or _default._handle is None:
            _default = context


def default_context() -> Context:
    """The context save, restore and CheckpointManager use when given none: the first context this process
    created, else one made now (collectively) from jax.distributed when JAX runs several processes, or from the
    launcher's environment."""
    with _default_lock:
        if _default is not None and _default._handle is not None:
            return _default
    made = Context.from_jax() if _jax_is_distributed() else Context()
    return made


@atexit.register
def _close_all() -> None:
    """At exit, saves still in flight are waited for (so that the last checkpoint of a script is durable), then
    every context is freed."""
    for context in list(_live_contexts):
        context.close()

"""The memory of the large arrays that restores and reads fill: page-aligned, every page present before the load
writes, and, where the process freed such an array a moment ago, the same pages again.

Memory a process has never used costs the kernel a fault, the zeroing and the bookkeeping of every page (0.12-0.27 s
per 384 MiB on the build machines, seconds where the virtual machine's host had taken the pages back); pages the
process still holds cost none of it. torch's and glibc's allocators keep freed memory for the next tensors, so a
library loading into them meets warm pages from its second load on; the memory of arrays handed to JAX would go back
to the kernel when they are freed, unless kept here. A freed array's pages are kept for `KEEP_SECONDS`, marked
MADV_FREE: the kernel may still take them back whenever it needs memory (they are clean to it until written again),
so keeping them never costs the machine memory it needs; a run that the kernel did take comes back zeroed on the next
write, as fresh memory would.
"""

from __future__ import annotations

import bisect
import collections
import ctypes
import mmap
import os
import sys
import threading
import time
from typing import Any, Deque, Dict, List, Optional, Tuple

import numpy as np
import numpy.typing as npt

from .errors import NoMemoryError

# How long a freed array's pages wait for the next restore (the interval between a job's restores in one process, as
# an evaluation of several checkpoints or a rollback does, is seconds; jemalloc keeps its freed pages about as long).
KEEP_SECONDS = 10.0

_MADV_FREE = 8  # Linux 4.5
_MADV_POPULATE_WRITE = 23  # Linux 5.14
_PAGE = mmap.PAGESIZE

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mmap.restype = ctypes.c_void_p
_LIBC.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_LIBC.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_MAP_FAILED = ctypes.c_void_p(-1).value


class _Run:
    """Page-aligned memory taken from a PagePool, given back when the last array viewing it goes (numpy keeps this
    object as the arrays' base; JAX's CPU client keeps the array it adopted)."""

    def __init__(self, pool: PagePool, address: int, size: int) -> None:
        self._pool: Optional[PagePool] = pool
        self.address = address
        self.size = size
        self.__array_interface__: Dict[str, Any] = {"data": (address, False), "shape": (size,), "typestr": "|u1",
                                                    "version": 3}

    # The finalizing check is bound here: when the interpreter exits, the module's globals are gone before the last
    # arrays, and the process's memory goes with it anyway.
    def __del__(self, finalizing: Any = sys.is_finalizing) -> None:
        pool, self._pool = self._pool, None
        if pool is not None and not finalizing():
            pool.give_back(self.address, self.size)


class PagePool:
    """Page runs of freed arrays, reused by the next array of their size or less (best fit; what a run holds beyond the
    array stays kept), joined with the runs next to them (the two parts of a run split by an earlier array), forgotten
    (unmapped) `keep_seconds` after they were last freed."""

    def __init__(self, keep_seconds: float = KEEP_SECONDS) -> None:
        self._keep_seconds = keep_seconds
        self._lock = threading.Lock()
        self._runs: List[Tuple[int, int, float]] = []  # (address, size, freed at), by address
        # Runs given back while the lock was held. An array is freed wherever the garbage collector runs, so also in
        # this thread while it holds the lock (any allocation may start a collection): it never waits for the lock,
        # and whoever holds it takes these in before letting go.
        self._returned: Deque[Tuple[int, int]] = collections.deque()
        self._timer: Optional[threading.Timer] = None

    @property
    def kept_bytes(self) -> int:
        self._lock.acquire()
        try:
            self._take_returned()
            return sum(size for _, size, _ in self._runs)
        finally:
            self._unlock()

    def array(self, size: int) -> npt.NDArray[np.uint8]:
        """`size` bytes (at least one) as a uint8 array starting on a page boundary, every page present."""
        rounded = -(-size // _PAGE) * _PAGE
        address = self._reuse(rounded)
        if address is None:
            address = _LIBC.mmap(None, rounded, mmap.PROT_READ | mmap.PROT_WRITE,
                                 mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
            if address in (None, _MAP_FAILED):
                raise NoMemoryError(f"mapping {rounded} bytes for a restored array failed: "
                                    f"{os.strerror(ctypes.get_errno())}")
        # One call makes every page present: kept pages are marked in use again (a write would do it too), pages the
        # kernel took back and fresh ones are zeroed here, several times faster than faults taken while the load
        # writes. Where the kernel lacks it (before 5.14), pages fault in as they are written.
        _LIBC.madvise(address, rounded, _MADV_POPULATE_WRITE)
        return np.asarray(_Run(self, address, rounded))[:size]

    def give_back(self, address: int, size: int) -> None:
        # Until written again the pages are clean to the kernel: it may take them back rather than swap or kill.
        _LIBC.madvise(address, size, _MADV_FREE)
        self._returned.append((address, size))
        if self._lock.acquire(blocking=False):
            self._unlock()

    def _reuse(self, size: int) -> Optional[int]:
        self._lock.acquire()
        try:
            self._take_returned()
            self._forget_idle(time.monotonic())
            fitting = [i for i, (_, run_size, _) in enumerate(self._runs) if run_size >= size]
            if not fitting:
                return None
            best = min(fitting, key=lambda i: self._runs[i][1])
            address, run_size, freed_at = self._runs.pop(best)
            if run_size > size:
                self._runs.insert(best, (address + size, run_size - size, freed_at))
            return address
        finally:
            self._unlock()

    def _unlock(self) -> None:
        """Takes in the runs given back meanwhile, then lets go of the lock; again if more came back and the lock is
        free (a thread that found it held left them here)."""
        while True:
            self._take_returned()
            if self._runs and self._timer is None:
                self._start_timer(self._keep_seconds)
            self._lock.release()
            if not self._returned or not self._lock.acquire(blocking=False):
                return

    def _take_returned(self) -> None:
        while self._returned:
            address, size = self._returned.popleft()
            at = bisect.bisect(self._runs, (address,))
            if at < len(self._runs) and self._runs[at][0] == address + size:
                size += self._runs.pop(at)[1]
            if at > 0 and sum(self._runs[at - 1][:2]) == address:
                address, before, _ = self._runs.pop(at - 1)
                size += before
                at -= 1
            self._runs.insert(at, (address, size, time.monotonic()))

    def _start_timer(self, delay: float) -> None:
        # A daemon thread, so that an interpreter exiting does not wait for it (the process's memory goes anyway).
        self._timer = threading.Timer(delay, self._on_timer)
        self._timer.daemon = True
        self._timer.start()

    def _on_timer(self) -> None:
        self._lock.acquire()
        try:
            self._timer = None
            self._take_returned()
            now = time.monotonic()
            self._forget_idle(now)
            if self._runs:
                oldest = min(freed_at for _, _, freed_at in self._runs)
                self._start_timer(max(oldest + self._keep_seconds - now, 0.0))
        finally:
            self._unlock()

    def after_fork_in_child(self) -> None:
        """A forked child has this thread alone: the lock may have been held by a thread that is not there, and the
        timer's thread is not there either. The kept runs are the child's own copies, kept as long as in the parent."""
        self._lock = threading.Lock()
        self._timer = None
        if self._runs or self._returned:
            self._lock.acquire()
            self._unlock()

    def _forget_idle(self, now: float) -> None:
        kept = []
        for address, size, freed_at in self._runs:
            if now - freed_at >= self._keep_seconds:
                _LIBC.munmap(address, size)
            else:
                kept.append((address, size, freed_at))
        self._runs = kept


# The process's pool, for every restore and read of the package.
POOL = PagePool()
os.register_at_fork(after_in_child=POOL.after_fork_in_child)

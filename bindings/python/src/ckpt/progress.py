"""What a save or a restore reports while it runs: Request.stats() (ckpt_request_stats) and the progress= callables
of save and restore (ckpt_progress_fn)."""

import ctypes
import sys
import traceback
import typing

from . import _native
from ._native import call


class RequestStats(typing.NamedTuple):
    """What a save has done on this rank: a snapshot while it runs, final once it finished. Bytes are this rank's;
    the phases follow one another (planning, staging: together blocking_ns, what save() cost the caller; writing,
    until this rank's data is durable; committing), total_ns spans them all. A phase still running counts until
    now, one not reached counts 0."""

    committed: bool
    state_bytes: int  # tensor and object bytes this rank registered, replicas included
    bytes_to_write: int  # this rank's share of the unique bytes
    bytes_staged: int
    bytes_written: int
    bytes_committed: int  # bytes_written once committed, else 0
    files_written: int
    planning_ns: int
    staging_ns: int
    blocking_ns: int
    writing_ns: int
    committing_ns: int
    total_ns: int

    @property
    def gbps(self):
        """This rank's save throughput: bytes written per nanosecond of the whole save, i.e. GB/s."""
        return self.bytes_written / self.total_ns if self.total_ns else 0.0


def read_stats(handle):
    """The RequestStats of a live ckpt_request_t."""
    stats = _native.new(_native.RequestStats)
    call("ckpt_request_stats_get", handle, ctypes.byref(stats))
    values = {name: getattr(stats, name) for name in RequestStats._fields}
    values["committed"] = bool(stats.committed)
    return RequestStats(**values)


NO_STATS = RequestStats(False, *([0] * (len(RequestStats._fields) - 1)))


def callback(progress):
    """A ckpt_progress_fn that calls progress(phase, done, total), the phase by name ("planning", "staging",
    "writing", "committing", "committed"; "reading", "loaded"; "failed"); None without a callable. The first
    exception it raises is printed and ends the calls: none may unwind through the library."""
    if progress is None:
        return None
    if not callable(progress):
        raise TypeError(f"progress must be a callable (phase, done, total), not a {type(progress).__name__}")
    failed = []

    def trampoline(_user, phase, done, total):
        if failed:
            return
        try:
            progress(_native.PHASES.get(phase, str(phase)), done, total)
        except BaseException:
            failed.append(True)
            print("ckpt: the progress callback raised, and is called no more for this request:", file=sys.stderr)
            traceback.print_exc()

    return _native.PROGRESS_FN(trampoline)

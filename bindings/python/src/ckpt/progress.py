"""ckpt.RequestStats: what a save reports while it runs (Request.stats(), from ckpt_request_stats)."""

import typing


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
    def gbps(self) -> float:
        """This rank's save throughput: bytes written per nanosecond of the whole save, i.e. GB/s."""
        return self.bytes_written / self.total_ns if self.total_ns else 0.0

//! Counters of a context's work and figures of one save, for monitoring and benchmarks.

use crate::context::{Context, Transport};
use crate::error::{call, Result};
use crate::sys;

/// What this rank's context has done since it was created ([`Context::stats`]). More counters may be added.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextStats {
    /// I/O worker processes (0: the I/O runs on threads of this process).
    pub io_workers: u32,
    /// The staging arena's size in bytes.
    pub arena_bytes: u64,
    /// Saves whose request succeeded.
    pub saves_committed: u64,
    /// Saves that exchanged and validated the full state.
    pub plans_computed: u64,
    /// Saves that reused the previous plan, the structure of the state being unchanged on every rank.
    pub plans_reused: u64,
    /// Bytes copied into the staging arena by saves.
    pub bytes_staged: u64,
    /// Bytes this rank's workers wrote to data files.
    pub bytes_written: u64,
    /// Bytes this rank read from data files during loads.
    pub bytes_read: u64,
    /// Tensor bytes this rank sent to other ranks during loads.
    pub bytes_sent: u64,
    /// Tensor bytes this rank received from other ranks during loads.
    pub bytes_received: u64,
    /// The transport in use: [`Transport::NONE`], [`Transport::UCX`] or [`Transport::NCCL`].
    pub transport: Transport,
    /// Nanoseconds spent moving tensor data between ranks during loads, waits for peers included.
    pub exchange_ns: u64,
    /// Bytes of ckpt's collective metadata (plans, agreements, addresses) this rank sent, over the TCP store or
    /// the job's collectives.
    pub control_bytes_sent: u64,
    /// Bytes of ckpt's collective metadata this rank received.
    pub control_bytes_received: u64,
    /// Collectives that went through the TCP store (0 when the job's collectives carry them, or on one rank).
    pub store_collectives: u64,
    /// How the last load read its tensors: [`sys::CKPT_LOAD_READS_ONCE`] (read once + exchange) or
    /// [`sys::CKPT_LOAD_READS_OWN`] (each rank its own pieces); 0 before any load.
    pub last_load_reads: u64,
    /// The last load's read amplification × 1000: bytes read by all ranks over the stored bytes of the tensors
    /// asked for.
    pub last_load_read_amplification_milli: u64,
}

impl From<sys::ckpt_context_stats> for ContextStats {
    fn from(raw: sys::ckpt_context_stats) -> Self {
        ContextStats {
            io_workers: raw.io_workers,
            arena_bytes: raw.arena_bytes,
            saves_committed: raw.saves_committed,
            plans_computed: raw.plans_computed,
            plans_reused: raw.plans_reused,
            bytes_staged: raw.bytes_staged,
            bytes_written: raw.bytes_written,
            bytes_read: raw.bytes_read,
            bytes_sent: raw.bytes_sent,
            bytes_received: raw.bytes_received,
            transport: Transport(raw.transport),
            exchange_ns: raw.exchange_ns,
            control_bytes_sent: raw.control_bytes_sent,
            control_bytes_received: raw.control_bytes_received,
            store_collectives: raw.store_collectives,
            last_load_reads: raw.last_load_reads,
            last_load_read_amplification_milli: raw.last_load_read_amplification_milli,
        }
    }
}

/// What a save has done on this rank ([`SaveRequest::stats`](crate::SaveRequest::stats)): a snapshot while it
/// runs, final once it finished. The phases follow one another: planning and staging (together `blocking_ns`, what
/// the save call cost the caller), writing, committing; `total_ns` spans them all. A phase still running counts
/// until now, one not reached counts 0. More fields may be added.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestStats {
    /// The save committed (on every rank).
    pub committed: bool,
    /// Tensor and object bytes this rank registered, replicas included.
    pub state_bytes: u64,
    /// What this rank writes: its share of the unique bytes.
    pub bytes_to_write: u64,
    pub bytes_staged: u64,
    /// Written by the I/O workers so far; all durable once writing ends.
    pub bytes_written: u64,
    /// `bytes_written` once committed, else 0.
    pub bytes_committed: u64,
    /// Data files this rank finished: written, synced and closed.
    pub files_written: u64,
    pub planning_ns: u64,
    pub staging_ns: u64,
    pub blocking_ns: u64,
    /// From the save call's return until this rank's data is durable.
    pub writing_ns: u64,
    /// From then until the request finished: every rank's reports, the manifest, the rename.
    pub committing_ns: u64,
    pub total_ns: u64,
}

impl RequestStats {
    /// This rank's save throughput: bytes written per nanosecond of the whole save, i.e. GB/s.
    pub fn gbps(&self) -> f64 {
        if self.total_ns == 0 {
            return 0.0;
        }
        self.bytes_written as f64 / self.total_ns as f64
    }
}

impl From<sys::ckpt_request_stats> for RequestStats {
    fn from(raw: sys::ckpt_request_stats) -> Self {
        RequestStats {
            committed: raw.committed != 0,
            state_bytes: raw.state_bytes,
            bytes_to_write: raw.bytes_to_write,
            bytes_staged: raw.bytes_staged,
            bytes_written: raw.bytes_written,
            bytes_committed: raw.bytes_committed,
            files_written: raw.files_written,
            planning_ns: raw.planning_ns,
            staging_ns: raw.staging_ns,
            blocking_ns: raw.blocking_ns,
            writing_ns: raw.writing_ns,
            committing_ns: raw.committing_ns,
            total_ns: raw.total_ns,
        }
    }
}

impl Context {
    /// This rank's counters. Not collective.
    pub fn stats(&self) -> Result<ContextStats> {
        let mut raw = sys::ckpt_context_stats::init();
        // SAFETY: a live context; the library writes at most `struct_size` bytes.
        call(|err| unsafe { sys::ckpt_context_stats_get(self.as_ptr(), &mut raw, err) })?;
        Ok(ContextStats::from(raw))
    }
}

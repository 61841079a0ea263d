//! Counters of a context's work, for monitoring and benchmarks.

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

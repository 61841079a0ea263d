//! The per-rank context: creation from the launcher's environment or explicit options, and the optional log and
//! allgather callbacks.

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::time::Duration;

use crate::cmem::{bytes_or_empty, bytes_or_empty_mut};
use crate::error::{call, Error, Result};
use crate::sys;

/// The level of a log line (`sys::CKPT_LOG_*`); a newtype because the value comes from the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LogLevel(pub i32);

impl LogLevel {
    pub const ERROR: LogLevel = LogLevel(sys::CKPT_LOG_ERROR);
    pub const WARNING: LogLevel = LogLevel(sys::CKPT_LOG_WARNING);
    pub const INFO: LogLevel = LogLevel(sys::CKPT_LOG_INFO);
}

/// A data transport between ranks during loads (`sys::CKPT_TRANSPORT_*`); a newtype because the transport in use
/// ([`ContextStats::transport`](crate::ContextStats::transport)) comes from the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Transport(pub i32);

impl Transport {
    /// UCX for host memory and NCCL for CUDA memory where they load, else [`NONE`](Self::NONE).
    pub const AUTO: Transport = Transport(sys::CKPT_TRANSPORT_AUTO);
    /// No exchange: every rank reads what it needs itself.
    pub const NONE: Transport = Transport(sys::CKPT_TRANSPORT_NONE);
    /// UCX: shared memory on one host, TCP across hosts.
    pub const UCX: Transport = Transport(sys::CKPT_TRANSPORT_UCX);
    /// NCCL, for CUDA memory.
    pub const NCCL: Transport = Transport(sys::CKPT_TRANSPORT_NCCL);
}

type LogFn = Box<dyn Fn(LogLevel, &str) + Send + Sync>;
type AllgatherFn = Box<dyn Fn(&[u8], &mut [u8]) -> bool + Send + Sync>;

/// What the C callbacks reach through their `user` pointer. Boxed so that its address stays fixed while the
/// context lives; the library may call it from its own threads, hence Send + Sync closures.
struct Callbacks {
    log: Option<LogFn>,
    allgather: Option<AllgatherFn>,
    world_size: usize,
}

/// Builds a [`Context`]. Every setting left alone keeps the library's default, which reads the launcher's
/// environment (torchrun, OpenMPI or SLURM variables, MASTER_ADDR / MASTER_PORT, CKPT_TIMEOUT_MS, CKPT_IO_WORKERS,
/// CKPT_ARENA_BYTES, CKPT_TRANSPORT).
#[derive(Default)]
pub struct ContextBuilder {
    rank: Option<u32>,
    world_size: Option<u32>,
    local_rank: Option<u32>,
    store_host: Option<String>,
    store_port: Option<u16>,
    timeout: Option<Duration>,
    node_name: Option<String>,
    io_workers: Option<u32>,
    arena_bytes: Option<u64>,
    transport: Option<Transport>,
    log: Option<LogFn>,
    allgather: Option<AllgatherFn>,
}

impl ContextBuilder {
    pub fn rank(mut self, rank: u32) -> Self {
        self.rank = Some(rank);
        self
    }

    pub fn world_size(mut self, world_size: u32) -> Self {
        self.world_size = Some(world_size);
        self
    }

    pub fn local_rank(mut self, local_rank: u32) -> Self {
        self.local_rank = Some(local_rank);
        self
    }

    /// The host of the TCP store that rank 0 serves.
    pub fn store_host(mut self, host: impl Into<String>) -> Self {
        self.store_host = Some(host.into());
        self
    }

    pub fn store_port(mut self, port: u16) -> Self {
        self.store_port = Some(port);
        self
    }

    /// How long any wait on a peer may take before failing with `CKPT_E_TIMEOUT`; rounded up to whole
    /// milliseconds (at least one).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Ranks with the same node name share a host.
    pub fn node_name(mut self, name: impl Into<String>) -> Self {
        self.node_name = Some(name.into());
        self
    }

    /// I/O worker processes of this rank, spawned from the `ckpt-io-worker` executable beside the library. 0 runs
    /// the I/O on threads of this process instead, which needs no helper executable.
    pub fn io_workers(mut self, workers: u32) -> Self {
        self.io_workers = Some(workers);
        self
    }

    /// Bytes of the staging arena, the shared memory that every save copies into before returning; a state
    /// larger than the arena is staged in a pipeline. 0 keeps the default.
    pub fn arena_bytes(mut self, bytes: u64) -> Self {
        self.arena_bytes = Some(bytes);
        self
    }

    /// How ranks exchange tensor data during loads. A transport asked for by name that cannot load here fails
    /// [`create`](Self::create) with `CKPT_E_UNSUPPORTED`.
    pub fn transport(mut self, transport: Transport) -> Self {
        self.transport = Some(transport);
        self
    }

    /// Receives the library's log lines instead of standard error. A panic in `log` is caught and dropped.
    pub fn log<F>(mut self, log: F) -> Self
    where
        F: Fn(LogLevel, &str) + Send + Sync + 'static,
    {
        self.log = Some(Box::new(log));
        self
    }

    /// Runs the control plane over `allgather` instead of the TCP store. Every rank calls it with the same number
    /// of bytes; it must fill `recv` (world size times that many bytes) with rank r's bytes at offset r * len and
    /// return true, or return false on failure (a panic counts as a failure). Needs an explicit
    /// [`world_size`](Self::world_size).
    pub fn allgather<F>(mut self, allgather: F) -> Self
    where
        F: Fn(&[u8], &mut [u8]) -> bool + Send + Sync + 'static,
    {
        self.allgather = Some(Box::new(allgather));
        self
    }

    /// Collective: creates this rank's context and connects to the other ranks.
    pub fn create(self) -> Result<Context> {
        let store_host = optional_c_string(self.store_host, "store host")?;
        let node_name = optional_c_string(self.node_name, "node name")?;
        let world_size = self.world_size;
        if self.allgather.is_some() && world_size.is_none() {
            return Err(Error::invalid_argument("an allgather callback needs an explicit world_size"));
        }
        let mut callbacks = Box::new(Callbacks {
            log: self.log,
            allgather: self.allgather,
            world_size: world_size.unwrap_or(0) as usize,
        });

        let mut opts = sys::ckpt_context_options::init();
        opts.rank = i32_or_from_env(self.rank, "rank")?;
        opts.world_size = i32_or_from_env(world_size, "world_size")?;
        opts.local_rank = i32_or_from_env(self.local_rank, "local_rank")?;
        opts.store_host = store_host.as_ref().map_or(ptr::null(), |host| host.as_ptr());
        opts.store_port = self.store_port.map_or(opts.store_port, i32::from);
        opts.timeout_ms = self.timeout.map_or(opts.timeout_ms, whole_milliseconds);
        opts.node_name = node_name.as_ref().map_or(ptr::null(), |name| name.as_ptr());
        opts.io_workers = i32_or_from_env(self.io_workers, "io_workers")?;
        opts.arena_bytes = self.arena_bytes.unwrap_or(opts.arena_bytes);
        opts.transport = self.transport.map_or(opts.transport, |transport| transport.0);
        let user = &mut *callbacks as *mut Callbacks as *mut c_void;
        if callbacks.log.is_some() {
            opts.log = Some(log_trampoline);
            opts.log_user = user;
        }
        if callbacks.allgather.is_some() {
            opts.allgather = Some(allgather_trampoline);
            opts.allgather_user = user;
        }

        let mut raw = ptr::null_mut();
        // SAFETY: the options and the strings they point to live across the call; `callbacks` outlives the
        // context because Context owns it and frees the context first.
        call(|err| unsafe { sys::ckpt_context_create(&opts, &mut raw, err) })?;
        let raw = NonNull::new(raw).ok_or_else(|| Error::new(sys::CKPT_E_INTERNAL, "ckpt_context_create gave NULL"))?;
        Ok(Context { raw, _callbacks: callbacks })
    }
}

fn optional_c_string(value: Option<String>, what: &str) -> Result<Option<CString>> {
    match value {
        None => Ok(None),
        Some(text) => CString::new(text)
            .map(Some)
            .map_err(|_| Error::invalid_argument(format!("the {} contains a NUL byte", what))),
    }
}

/// A rank, world size, local rank or worker count for the C options, where -1 means "from the environment".
fn i32_or_from_env(value: Option<u32>, what: &str) -> Result<i32> {
    match value {
        None => Ok(-1),
        Some(v) => i32::try_from(v).map_err(|_| Error::invalid_argument(format!("{} {} is too large", what, v))),
    }
}

/// A timeout in whole milliseconds, rounded up; never 0, which the library reads as "the default".
pub(crate) fn whole_milliseconds(timeout: Duration) -> u32 {
    let millis = timeout.as_nanos().saturating_add(999_999) / 1_000_000;
    millis.clamp(1, u128::from(u32::MAX)) as u32
}

unsafe extern "C" fn log_trampoline(user: *mut c_void, level: i32, message: *const c_char) {
    // Unwinding into C is undefined behaviour: a panicking logger loses its line instead.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `user` is the Callbacks box the context owns; `message` is NUL-terminated for this call.
        let callbacks = &*(user as *const Callbacks);
        if let (Some(log), false) = (&callbacks.log, message.is_null()) {
            log(LogLevel(level), &CStr::from_ptr(message).to_string_lossy());
        }
    }));
}

unsafe extern "C" fn allgather_trampoline(user: *mut c_void, send: *const c_void, size: u64, recv: *mut c_void) -> i32 {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `user` is the Callbacks box the context owns; the library passes `size` bytes at `send` and
        // world_size * size writable bytes at `recv`.
        let callbacks = &*(user as *const Callbacks);
        let allgather = match &callbacks.allgather {
            Some(allgather) => allgather,
            None => return false,
        };
        let size = match usize::try_from(size) {
            Ok(size) => size,
            Err(_) => return false,
        };
        let recv_size = match size.checked_mul(callbacks.world_size) {
            Some(recv_size) => recv_size,
            None => return false,
        };
        allgather(bytes_or_empty(send as *const u8, size), bytes_or_empty_mut(recv as *mut u8, recv_size))
    }));
    match outcome {
        Ok(true) => 0,
        _ => 1,
    }
}

/// One rank's connection to the job: created collectively, freed on drop. Every rank should keep its context
/// until the end of the job; a rank that drops it early is seen as dead by the others.
///
/// `Send` but not `Sync`: the library allows a context to move between threads but not to be used by two threads
/// at once, which `&self` methods on a `!Sync` type guarantee.
pub struct Context {
    raw: NonNull<sys::ckpt_context_t>,
    _callbacks: Box<Callbacks>,
}

// SAFETY: ckpt.h: "distinct handles may be used from distinct threads; one handle must not be used by two threads
// at once". Moving the context moves its only handle; the callbacks it owns are Send + Sync.
unsafe impl Send for Context {}

impl Context {
    /// Options for a context; see [`ContextBuilder`].
    pub fn builder() -> ContextBuilder {
        ContextBuilder::default()
    }

    /// Collective: a context whose rank, world size and store address all come from the launcher's environment
    /// (a single-rank job when none is set).
    pub fn from_env() -> Result<Context> {
        Context::builder().create()
    }

    pub fn rank(&self) -> u32 {
        // SAFETY: a live context; never negative for a non-NULL one.
        unsafe { sys::ckpt_context_rank(self.raw.as_ptr()) as u32 }
    }

    pub fn world_size(&self) -> u32 {
        // SAFETY: as for rank().
        unsafe { sys::ckpt_context_world_size(self.raw.as_ptr()) as u32 }
    }

    pub fn local_rank(&self) -> u32 {
        // SAFETY: as for rank().
        unsafe { sys::ckpt_context_local_rank(self.raw.as_ptr()) as u32 }
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::ckpt_context_t {
        self.raw.as_ptr()
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: created by ckpt_context_create and freed once; the callbacks box is dropped after this.
        unsafe { sys::ckpt_context_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("rank", &self.rank())
            .field("world_size", &self.world_size())
            .field("local_rank", &self.local_rank())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_round_up_to_at_least_one_millisecond() {
        assert_eq!(whole_milliseconds(Duration::ZERO), 1);
        assert_eq!(whole_milliseconds(Duration::from_micros(1500)), 2);
        assert_eq!(whole_milliseconds(Duration::from_secs(3)), 3000);
        assert_eq!(whole_milliseconds(Duration::from_secs(u64::MAX)), u32::MAX);
    }

    #[test]
    fn allgather_without_world_size_is_refused_before_calling_the_library() {
        let error = Context::builder().allgather(|_, _| true).create().expect_err("needs a world size");
        assert_eq!(error.status(), sys::CKPT_E_INVALID_ARGUMENT);
        assert!(error.message().contains("world_size"), "{}", error);
    }

    #[test]
    fn store_host_with_nul_byte_is_refused() {
        let error = Context::builder().store_host("local\0host").create().expect_err("NUL in host");
        assert_eq!(error.status(), sys::CKPT_E_INVALID_ARGUMENT);
    }
}

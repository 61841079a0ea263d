//! Collective save and the request that tracks it.

use std::ffi::CString;
use std::marker::PhantomData;
use std::os::raw::c_char;
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};
use std::time::Duration;

use crate::context::{whole_milliseconds, Context};
use crate::error::{call, call_status, Error, Result};
use crate::progress::{Progress, ProgressFn, RawProgress};
use crate::state::SaveState;
use crate::stats::RequestStats;
use crate::sys;

/// Where a save puts the checkpoint (`sys::CKPT_TIER_*`). The memory tier is the node's `ckpt-agent`, which the
/// first save to memory starts and which outlives the trainers: it keeps the newest complete checkpoint in shared
/// memory, and a load of its path (or [`Manager::load_latest`](crate::Manager::load_latest)) reads that copy. It
/// needs the job's identity, the same on every rank and across restarts: `CKPT_JOB_ID` (or `SLURM_JOB_ID`,
/// `TORCHELASTIC_RUN_ID`), else the save fails with
/// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument). A save past the agent's budget
/// (`CKPT_AGENT_BUDGET_BYTES`, default half of the node's memory) fails with
/// [`ErrorKind::NoSpace`](crate::ErrorKind::NoSpace); so far the memory tier serves jobs whose ranks share one
/// node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Tier {
    /// The checkpoint directory on storage.
    #[default]
    Storage,
    /// The agent's memory only: the save succeeds once the checkpoint is complete there, and storage receives it
    /// only if the trainers die.
    Memory,
    /// The agent's memory, then the checkpoint directory on storage, written by the agent in the background.
    Both,
}

impl Tier {
    fn to_c(self) -> u64 {
        match self {
            Tier::Storage => sys::CKPT_TIER_STORAGE,
            Tier::Memory => sys::CKPT_TIER_MEMORY,
            Tier::Both => sys::CKPT_TIER_BOTH,
        }
    }
}

/// Options of a save. The defaults are the library's.
#[derive(Clone, Default)]
pub struct SaveOptions {
    metadata: Vec<(String, String)>,
    progress: Option<ProgressFn>,
    tier: Tier,
    in_place: bool,
    copy_on_write: bool,
    check_replicas: bool,
    incremental: bool,
    compress: bool,
    base: Option<PathBuf>,
    metrics: Option<String>,
    best_value: Option<f64>,
}

impl std::fmt::Debug for SaveOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaveOptions")
            .field("metadata", &self.metadata)
            .field("progress", &self.progress.is_some())
            .field("tier", &self.tier)
            .field("in_place", &self.in_place)
            .field("copy_on_write", &self.copy_on_write)
            .field("check_replicas", &self.check_replicas)
            .field("incremental", &self.incremental)
            .field("compress", &self.compress)
            .field("base", &self.base)
            .field("metrics", &self.metrics)
            .field("best_value", &self.best_value)
            .finish()
    }
}

impl SaveOptions {
    pub fn new() -> Self {
        SaveOptions::default()
    }

    /// User metadata stored in the manifest (taken from rank 0), read back with
    /// [`Reader::metadata`](crate::Reader::metadata).
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.push((key.into(), value.into()));
        self
    }

    /// Receives this rank's progress: PLANNING, STAGING and WRITING's first report on the saving thread, before
    /// the save call returns; WRITING, COMMITTING and COMMITTED or FAILED later, on the library's save thread.
    /// Called once as each phase starts and at most every 100 ms in between; it should return quickly. A panic
    /// in it is caught and loses that report.
    pub fn progress<F>(mut self, progress: F) -> Self
    where
        F: Fn(Progress) + Send + Sync + 'static,
    {
        self.progress = Some(std::sync::Arc::new(progress));
        self
    }

    /// Where the checkpoint goes ([`Tier::Storage`] by default). Through a [`Manager`](crate::Manager),
    /// [`Tier::Memory`] and [`Tier::Both`] override its memory tier policy for this step, and [`Tier::Storage`]
    /// follows it.
    pub fn tier(mut self, tier: Tier) -> Self {
        self.tier = tier;
        self
    }

    /// Writes this rank's bytes straight from the registered buffers, with no staging copy
    /// (`sys::CKPT_SAVE_IN_PLACE`; off by default). The save call then returns only once they are durable, and the
    /// buffers must not change until it returns; the request still finishes with the commit. It suits a save that
    /// is waited for anyway: the last one of a job, or a blocking checkpoint.
    pub fn in_place(mut self, in_place: bool) -> Self {
        self.in_place = in_place;
        self
    }

    /// Returns from the save call once this rank's host buffers are write-protected, before any copy
    /// (`sys::CKPT_SAVE_COPY_ON_WRITE`, Linux userfaultfd; off by default): the copy runs in the background, and a
    /// page written before it was copied is copied first, so the checkpoint holds the values at the call. The
    /// buffers must stay allocated and mapped until the request finishes (one unmapped or released meanwhile fails
    /// the save, naming its tensor). Refused with [`SaveOptions::in_place`] or a memory [`Tier`]; where the kernel
    /// refuses userfaultfd the save copies at the call, as without it.
    pub fn copy_on_write(mut self, copy_on_write: bool) -> Self {
        self.copy_on_write = copy_on_write;
        self
    }

    /// The ranks holding replicas of a box compare their copies' block checksums before the save commits
    /// (`sys::CKPT_SAVE_CHECK_REPLICAS`; off by default); a difference fails the save (`CKPT_E_CORRUPT`) naming the
    /// tensor, box, blocks and ranks. The same on every rank. The replicas' host buffers are read after the save
    /// call (write-protected meanwhile, as [`SaveOptions::copy_on_write`]'s): they must stay allocated and mapped
    /// until the request finishes.
    pub fn check_replicas(mut self, check_replicas: bool) -> Self {
        self.check_replicas = check_replicas;
        self
    }

    /// Hashes every tensor box the save writes (SHA-256 per block of 1 MiB, at the call) into the manifest, so
    /// that a later save can name this one as its [`base`](SaveOptions::base) (`sys::CKPT_SAVE_INCREMENTAL`; off
    /// by default); with a base, writes only the rows that changed since it. Storage tier only
    /// (`CKPT_E_INVALID_ARGUMENT`); with [`SaveOptions::check_replicas`] the replicas are compared with the writer's
    /// whole copy, written or not.
    pub fn incremental(mut self, incremental: bool) -> Self {
        self.incremental = incremental;
        self
    }

    /// Stores everything the save writes losslessly compressed (`sys::CKPT_SAVE_COMPRESS`; off by default): each
    /// block of 1 MiB on its own, in the I/O workers, so that ranged and resharded loads decode only the blocks they
    /// read; floating-point tensors with their bytes grouped by significance, then zstd (BF16 weights shrink by
    /// about 1.5x). Worth it on storage slower than about a GiB/s per I/O worker. The checkpoint is format 3
    /// ([`CheckpointInfo::format_major`](crate::CheckpointInfo)). Refused (`CKPT_E_INVALID_ARGUMENT`) with
    /// [`SaveOptions::in_place`], a memory [`Tier`] or on object storage. One tensor alone:
    /// [`Shard::compress`](crate::Shard::compress).
    pub fn compress(mut self, compress: bool) -> Self {
        self.compress = compress;
        self
    }

    /// With [`SaveOptions::incremental`] only (`CKPT_E_INVALID_ARGUMENT` without it): the committed checkpoint,
    /// beside the save's path and saved incrementally, whose bytes the save refers to instead of writing the rows
    /// whose blocks all hash as its blocks do. The new checkpoint needs it: a load after it was deleted fails with
    /// `CKPT_E_CORRUPT` naming it; `CKPT_E_NOT_FOUND` when it holds no checkpoint. Without it a save to a path
    /// writes everything, and a [`Manager`](crate::Manager)'s save takes the latest committed step.
    pub fn base(mut self, path: impl Into<PathBuf>) -> Self {
        self.base = Some(path.into());
        self
    }

    /// Through a [`Manager`](crate::Manager) only: the text of a JSON object (at most 1 MiB) stored with the step,
    /// which commits with it; [`Manager::metrics`](crate::Manager::metrics) reads it back. Rank 0's is stored.
    pub fn metrics(mut self, json: impl Into<String>) -> Self {
        self.metrics = Some(json.into());
        self
    }

    /// Through a [`Manager`](crate::Manager) only: the step's score (finite), which
    /// [`ManagerOptions::keep_best`](crate::ManagerOptions::keep_best) ranks it by. Rank 0's is stored.
    pub fn best_value(mut self, score: f64) -> Self {
        self.best_value = Some(score);
        self
    }
}

/// The C strings of the metadata and the pointer arrays that reference them, alive together for one call.
struct RawMetadata {
    _strings: Vec<CString>,
    keys: Vec<*const c_char>,
    values: Vec<*const c_char>,
}

impl RawMetadata {
    fn new(metadata: &[(String, String)]) -> Result<Self> {
        let mut strings = Vec::with_capacity(metadata.len() * 2);
        for (key, value) in metadata {
            for text in [key, value] {
                let c_text = CString::new(text.as_str())
                    .map_err(|_| Error::invalid_argument(format!("metadata {:?} contains a NUL byte", text)))?;
                strings.push(c_text);
            }
        }
        // The CStrings' heap buffers do not move when the Vec holding them is moved into the struct.
        let keys = strings.iter().step_by(2).map(|s| s.as_ptr()).collect();
        let values = strings.iter().skip(1).step_by(2).map(|s| s.as_ptr()).collect();
        Ok(RawMetadata { _strings: strings, keys, values })
    }
}

pub(crate) fn c_path(path: &Path) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::invalid_argument(format!("path {} contains a NUL byte", path.display())))
}

/// Runs a C call that starts a save with the C form of `options`, and wraps the request it returns. `what` names
/// the call in the error for a missing request.
pub(crate) fn start_save<'c, F>(options: &SaveOptions, what: &str, start: F) -> Result<SaveRequest<'c>>
where
    F: FnOnce(&sys::ckpt_save_options, &mut *mut sys::ckpt_request_t, *mut sys::ckpt_error_t) -> i32,
{
    let metadata = RawMetadata::new(&options.metadata)?;
    let mut opts = sys::ckpt_save_options::init();
    opts.tier = options.tier.to_c();
    if options.in_place {
        opts.flags |= sys::CKPT_SAVE_IN_PLACE;
    }
    if options.copy_on_write {
        opts.flags |= sys::CKPT_SAVE_COPY_ON_WRITE;
    }
    if options.check_replicas {
        opts.flags |= sys::CKPT_SAVE_CHECK_REPLICAS;
    }
    if options.incremental {
        opts.flags |= sys::CKPT_SAVE_INCREMENTAL;
    }
    if options.compress {
        opts.flags |= sys::CKPT_SAVE_COMPRESS;
    }
    let base = options.base.as_deref().map(c_path).transpose()?;
    opts.base = base.as_ref().map_or(ptr::null(), |path| path.as_ptr());
    opts.metadata_count =
        u32::try_from(metadata.keys.len()).map_err(|_| Error::invalid_argument("too many metadata entries"))?;
    opts.metadata_keys = metadata.keys.as_ptr();
    opts.metadata_values = metadata.values.as_ptr();
    let progress = options.progress.as_ref().map(RawProgress::new);
    if let Some(progress) = &progress {
        (opts.progress, opts.progress_user) = progress.c_parts();
    }
    let metrics = match &options.metrics {
        Some(text) => {
            Some(CString::new(text.as_str()).map_err(|_| Error::invalid_argument("the metrics contain a NUL byte"))?)
        }
        None => None,
    };
    opts.metrics = metrics.as_ref().map_or(ptr::null(), |text| text.as_ptr());
    if let Some(score) = options.best_value {
        (opts.best_value, opts.has_best_value) = (score, 1);
    }
    let mut raw = ptr::null_mut();
    call(|err| start(&opts, &mut raw, err))?;
    let raw = NonNull::new(raw).ok_or_else(|| Error::new(sys::CKPT_E_INTERNAL, format!("{} gave no request", what)))?;
    Ok(SaveRequest { raw, _progress: progress, _context: PhantomData })
}

impl Context {
    /// Collective: saves `state` as the checkpoint directory `path`, which appears only once the checkpoint is
    /// complete and durable. Returns as soon as this rank's registered buffers are copied into the staging arena
    /// (with [`SaveOptions::in_place`]: written from the buffers and durable): from then on they may be modified
    /// and `state` dropped, while the library writes and commits in the background. The returned request reports
    /// the outcome, the same on every rank.
    pub fn save(
        &self,
        state: &mut SaveState<'_>,
        path: impl AsRef<Path>,
        options: &SaveOptions,
    ) -> Result<SaveRequest<'_>> {
        let c_path = c_path(path.as_ref())?;
        // SAFETY: the context and state are live handles used by this thread only; the options' strings outlive
        // the call.
        start_save(options, "ckpt_save", |opts, request, err| unsafe {
            sys::ckpt_save(self.as_ptr(), state.as_ptr(), c_path.as_ptr(), opts, request, err)
        })
    }
}

/// A save in progress: staged, and being written and committed in the background. It borrows its context, which
/// runs the save, and no buffer: those were released when the save call returned. Dropping an unfinished request
/// blocks until the save finishes (its outcome is then lost: call [`wait`](Self::wait) to see it).
pub struct SaveRequest<'c> {
    raw: NonNull<sys::ckpt_request_t>,
    // Called by the library until the request finishes; dropped after ckpt_request_free, which waits for that.
    _progress: Option<RawProgress>,
    _context: PhantomData<&'c Context>,
}

// SAFETY: ckpt.h: distinct handles may be used from distinct threads, so the request may be waited on in one
// thread while its context serves another. Not Sync: one handle must not be used by two threads at once.
unsafe impl Send for SaveRequest<'_> {}

impl SaveRequest<'_> {
    /// Never blocks: Ok(true) if the save finished successfully, Ok(false) if it is still running, or the error
    /// that failed it (the same on every rank).
    pub fn test(&mut self) -> Result<bool> {
        // SAFETY: a live request.
        finished(call_status(|err| unsafe { sys::ckpt_request_test(self.raw.as_ptr(), err) }))
    }

    /// Blocks until the save finishes (bounded by the context's timeout) and returns its outcome.
    pub fn wait(&mut self) -> Result<()> {
        // SAFETY: a live request; 0 means no limit beyond the context's timeout.
        call(|err| unsafe { sys::ckpt_request_wait(self.raw.as_ptr(), 0, err) })
    }

    /// Blocks until the save finishes or `timeout` passes: Ok(true) if it finished successfully, Ok(false) if it
    /// is still running, or the error that failed it.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<bool> {
        let timeout_ms = whole_milliseconds(timeout);
        // SAFETY: a live request.
        finished(call_status(|err| unsafe { sys::ckpt_request_wait(self.raw.as_ptr(), timeout_ms, err) }))
    }

    /// What the save has done on this rank: a snapshot while it runs, final once it finished. Never blocks.
    pub fn stats(&self) -> Result<RequestStats> {
        let mut raw = sys::ckpt_request_stats::init();
        // SAFETY: a live request; the library writes at most `struct_size` bytes.
        call(|err| unsafe { sys::ckpt_request_stats_get(self.raw.as_ptr(), &mut raw, err) })?;
        Ok(RequestStats::from(raw))
    }
}

/// A request's status as "finished?", where CKPT_E_IN_PROGRESS is not a failure.
fn finished(outcome: (i32, Option<Error>)) -> Result<bool> {
    match outcome {
        (_, None) => Ok(true),
        (sys::CKPT_E_IN_PROGRESS, Some(_)) => Ok(false),
        (_, Some(error)) => Err(error),
    }
}

impl Drop for SaveRequest<'_> {
    fn drop(&mut self) {
        // SAFETY: created by ckpt_save and freed once.
        unsafe { sys::ckpt_request_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for SaveRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaveRequest").finish_non_exhaustive()
    }
}

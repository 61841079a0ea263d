//! Collective load.

use std::path::Path;

use crate::context::Context;
use crate::error::{call, Result};
use crate::progress::{Progress, ProgressFn, RawProgress};
use crate::save::c_path;
use crate::state::LoadState;
use crate::sys;

/// What a load does about a key mismatch between the state and the checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strictness {
    /// Fail the load with `CKPT_E_MISMATCH`.
    Fail,
    /// Log a warning naming the keys and go on.
    Log,
    /// Go on silently.
    Ignore,
}

impl Strictness {
    fn to_c(self) -> i32 {
        match self {
            Strictness::Fail => sys::CKPT_STRICT_FAIL,
            Strictness::Log => sys::CKPT_STRICT_LOG,
            Strictness::Ignore => sys::CKPT_STRICT_IGNORE,
        }
    }
}

/// Options of a load. Settings left alone keep the library's defaults (missing keys fail, unexpected keys are
/// logged).
#[derive(Clone, Default)]
pub struct LoadOptions {
    missing_keys: Option<Strictness>,
    unexpected_keys: Option<Strictness>,
    progress: Option<ProgressFn>,
}

impl std::fmt::Debug for LoadOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadOptions")
            .field("missing_keys", &self.missing_keys)
            .field("unexpected_keys", &self.unexpected_keys)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

impl LoadOptions {
    pub fn new() -> Self {
        LoadOptions::default()
    }

    /// A key this rank asks for that the checkpoint lacks.
    pub fn missing_keys(mut self, strictness: Strictness) -> Self {
        self.missing_keys = Some(strictness);
        self
    }

    /// A tensor or object key the checkpoint has that no rank asks for.
    pub fn unexpected_keys(mut self, strictness: Strictness) -> Self {
        self.unexpected_keys = Some(strictness);
        self
    }

    /// Receives this rank's progress, on the loading thread before the load returns: PLANNING, READING (bytes of
    /// its tensor buffers filled), then LOADED or FAILED; once as each phase starts and at most every 100 ms in
    /// between. A panic in it is caught and loses that report.
    pub fn progress<F>(mut self, progress: F) -> Self
    where
        F: Fn(Progress) + Send + Sync + 'static,
    {
        self.progress = Some(std::sync::Arc::new(progress));
        self
    }
}

impl LoadOptions {
    /// The C options, and the callback they point at: keep it alive until the call returns.
    pub(crate) fn to_c(&self) -> (sys::ckpt_load_options, Option<RawProgress>) {
        let mut opts = sys::ckpt_load_options::init();
        if let Some(strictness) = self.missing_keys {
            opts.missing_keys = strictness.to_c();
        }
        if let Some(strictness) = self.unexpected_keys {
            opts.unexpected_keys = strictness.to_c();
        }
        let progress = self.progress.as_ref().map(RawProgress::new);
        if let Some(progress) = &progress {
            (opts.progress, opts.progress_user) = progress.c_parts();
        }
        (opts, progress)
    }
}

impl Context {
    /// Collective: fills every buffer registered in `state` from the checkpoint at `path`, whatever layout and
    /// number of ranks saved it, and gives `state` the checkpoint's common entries. On failure the buffers may be
    /// partly filled (but always hold valid values of their element type).
    pub fn load(&self, state: &mut LoadState<'_>, path: impl AsRef<Path>, options: &LoadOptions) -> Result<()> {
        let c_path = c_path(path.as_ref())?;
        let (opts, _progress) = options.to_c();
        // SAFETY: the context and state are live handles used by this thread only; the state's buffers are
        // exclusively borrowed for its lifetime; the progress callback outlives the call.
        let outcome = call(|err| unsafe { sys::ckpt_load(self.as_ptr(), state.as_ptr(), c_path.as_ptr(), &opts, err) });
        state.repair_buffers();
        outcome
    }
}

//! Collective load.

use std::path::Path;

use crate::context::Context;
use crate::error::{call, Result};
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
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOptions {
    missing_keys: Option<Strictness>,
    unexpected_keys: Option<Strictness>,
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
}

impl LoadOptions {
    pub(crate) fn to_c(self) -> sys::ckpt_load_options {
        let mut opts = sys::ckpt_load_options::init();
        if let Some(strictness) = self.missing_keys {
            opts.missing_keys = strictness.to_c();
        }
        if let Some(strictness) = self.unexpected_keys {
            opts.unexpected_keys = strictness.to_c();
        }
        opts
    }
}

impl Context {
    /// Collective: fills every buffer registered in `state` from the checkpoint at `path`, whatever layout and
    /// number of ranks saved it, and gives `state` the checkpoint's common entries. On failure the buffers may be
    /// partly filled (but always hold valid values of their element type).
    pub fn load(&self, state: &mut LoadState<'_>, path: impl AsRef<Path>, options: &LoadOptions) -> Result<()> {
        let c_path = c_path(path.as_ref())?;
        let opts = options.to_c();
        // SAFETY: the context and state are live handles used by this thread only; the state's buffers are
        // exclusively borrowed for its lifetime.
        let outcome = call(|err| unsafe { sys::ckpt_load(self.as_ptr(), state.as_ptr(), c_path.as_ptr(), &opts, err) });
        state.repair_buffers();
        outcome
    }
}

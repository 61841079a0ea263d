//! Progress callbacks of saves and loads ([`SaveOptions::progress`](crate::SaveOptions::progress),
//! [`LoadOptions::progress`](crate::LoadOptions::progress)).

use std::os::raw::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::sys;

/// The phase of a save or a load (`sys::CKPT_PHASE_*`); a newtype because the value comes from the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Phase(pub i32);

impl Phase {
    /// Save and load: agreeing with the other ranks on who writes or reads what (0 of 0 bytes).
    pub const PLANNING: Phase = Phase(sys::CKPT_PHASE_PLANNING);
    /// Save: copying this rank's bytes into the staging arena (the save call blocks).
    pub const STAGING: Phase = Phase(sys::CKPT_PHASE_STAGING);
    /// Save: the I/O workers write them until they are durable.
    pub const WRITING: Phase = Phase(sys::CKPT_PHASE_WRITING);
    /// Save: waiting for every rank's writes, then the manifest and the rename.
    pub const COMMITTING: Phase = Phase(sys::CKPT_PHASE_COMMITTING);
    /// Save: committed; the last call, done == total.
    pub const COMMITTED: Phase = Phase(sys::CKPT_PHASE_COMMITTED);
    /// Load: filling this rank's tensor buffers.
    pub const READING: Phase = Phase(sys::CKPT_PHASE_READING);
    /// Load: every rank's buffers are filled; the last call, done == total.
    pub const LOADED: Phase = Phase(sys::CKPT_PHASE_LOADED);
    /// Save or load: failed (the request or the call says why); the last call.
    pub const FAILED: Phase = Phase(sys::CKPT_PHASE_FAILED);
}

/// `done` of `total` bytes of this rank in `phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub phase: Phase,
    pub done: u64,
    pub total: u64,
}

/// A progress callback as the options hold it. Arc: options are Clone.
pub(crate) type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;

/// The callback boxed at a stable address for the library's `progress_user`, and the C function that calls it.
/// The box must outlive every call: until a load returns, until a save's request is freed.
pub(crate) struct RawProgress {
    callback: Box<ProgressFn>,
}

impl RawProgress {
    pub(crate) fn new(callback: &ProgressFn) -> Self {
        RawProgress { callback: Box::new(Arc::clone(callback)) }
    }

    /// (progress, progress_user) for the C options.
    pub(crate) fn c_parts(&self) -> (sys::ckpt_progress_fn, *mut c_void) {
        (Some(progress_trampoline), &*self.callback as *const ProgressFn as *mut c_void)
    }
}

unsafe extern "C" fn progress_trampoline(user: *mut c_void, phase: i32, done: u64, total: u64) {
    // Unwinding into C is undefined behaviour: a panicking callback loses that report instead.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `user` is the RawProgress box, alive until no call can come (see RawProgress).
        let callback = &*(user as *const ProgressFn);
        callback(Progress { phase: Phase(phase), done, total });
    }));
}

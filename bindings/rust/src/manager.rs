//! The checkpoint manager: a root directory of numbered steps, with a latest pointer and retention.

use std::ffi::OsString;
use std::marker::PhantomData;
use std::os::raw::c_char;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};
use std::time::Duration;

use crate::context::Context;
use crate::error::{call, call_status, Error, Result};
use crate::load::LoadOptions;
use crate::save::{c_path, start_save, SaveOptions, SaveRequest};
use crate::state::{LoadState, SaveState};
use crate::sys;

/// Which scores [`ManagerOptions::keep_best`] keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BestMode {
    /// The highest ([`SaveOptions::best_value`]).
    #[default]
    Max,
    /// The lowest, as for a loss.
    Min,
}

/// Which committed steps a [`Manager`] keeps, and which tier its steps go to. A step is kept if any rule keeps it
/// (as Orbax's preservation policies combine); with none of keep_last, keep_best and keep_for, every step is kept.
/// The newest step is always kept, since a resume needs it. Rank 0 removes the others on a thread of its own,
/// never delaying a save. The default keeps every step, on storage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ManagerOptions {
    keep_last: u32,
    keep_every: u64,
    keep_best: u32,
    best_mode: BestMode,
    keep_for: Option<Duration>,
    memory_tier: bool,
    storage_every: Option<u64>,
}

impl ManagerOptions {
    pub fn new() -> Self {
        ManagerOptions::default()
    }

    /// Keep the newest `count` committed steps (0: no such rule).
    pub fn keep_last(mut self, count: u32) -> Self {
        self.keep_last = count;
        self
    }

    /// Keep every step divisible by `interval` (0: no such rule; Orbax's keep_period).
    pub fn keep_every(mut self, interval: u64) -> Self {
        self.keep_every = interval;
        self
    }

    /// Keep the `count` steps of best [`SaveOptions::best_value`] by `mode` (0: no such rule); a step saved
    /// without one is judged by the other rules alone.
    pub fn keep_best(mut self, count: u32, mode: BestMode) -> Self {
        self.keep_best = count;
        self.best_mode = mode;
        self
    }

    /// Keep the steps committed within the last `window` (by rank 0's clock, in whole seconds rounded up); a step
    /// saved without a manager or through the memory tier is judged by the other rules alone.
    pub fn keep_for(mut self, window: Duration) -> Self {
        self.keep_for = Some(window);
        self
    }

    /// Every step goes to the memory tier ([`Tier::Memory`](crate::Tier::Memory): the node agent's shared memory,
    /// which outlives the trainers), and the steps divisible by [`storage_every`](Self::storage_every) to storage
    /// as well ([`Tier::Both`](crate::Tier::Both)). [`Manager::load_latest`] resumes from the newest step of either
    /// tier. The job needs an identity: `CKPT_JOB_ID` (see [`Tier`](crate::Tier)).
    pub fn memory_tier(mut self, enabled: bool) -> Self {
        self.memory_tier = enabled;
        self
    }

    /// With [`memory_tier`](Self::memory_tier): the steps divisible by `interval` (at least 1) also go to storage,
    /// written there by the agent in the background. Unset, a step reaches storage only when the trainers die.
    pub fn storage_every(mut self, interval: u64) -> Self {
        self.storage_every = Some(interval);
        self
    }

    /// The C options, or why these cannot be.
    fn to_c(self) -> Result<sys::ckpt_manager_options> {
        match self.storage_every {
            Some(0) => return Err(Error::invalid_argument("storage_every must be at least 1")),
            Some(_) if !self.memory_tier => {
                return Err(Error::invalid_argument(
                    "storage_every applies to the memory tier: set memory_tier too (without it, every step goes to \
                     storage)",
                ))
            }
            _ => {}
        }
        if self.keep_for == Some(Duration::ZERO) {
            return Err(Error::invalid_argument("keep_for must be longer than zero"));
        }
        let mut opts = sys::ckpt_manager_options::init();
        opts.keep_last = self.keep_last;
        opts.keep_every = self.keep_every;
        opts.keep_best = self.keep_best;
        opts.best_mode = match self.best_mode {
            BestMode::Max => sys::CKPT_BEST_MAX,
            BestMode::Min => sys::CKPT_BEST_MIN,
        };
        opts.keep_for_seconds =
            self.keep_for.map_or(0, |window| window.as_secs() + u64::from(window.subsec_nanos() != 0));
        opts.memory_tier = u32::from(self.memory_tier);
        opts.storage_every = self.storage_every.unwrap_or(0);
        Ok(opts)
    }
}

/// The first buffer size tried for a step's path, and the largest: a path longer than that is refused.
const STEP_PATH_FIRST_BUFFER: usize = 256;
const STEP_PATH_MAX_BUFFER: usize = 1 << 20;

/// A root directory of steps (`root/step-<12 digits>`) that ranks save into and resume from together. Once a save
/// through the manager commits, rank 0 moves the `latest` pointer to it and removes the steps the retention policy
/// no longer keeps. Borrows its context, which runs its saves and loads; dropping the manager waits for its saves
/// in flight.
///
/// Neither `Send` nor `Sync`: it uses its context, which stays behind with the thread that lent it.
pub struct Manager<'c> {
    raw: NonNull<sys::ckpt_manager_t>,
    _context: PhantomData<&'c Context>,
}

impl<'c> Manager<'c> {
    /// Collective: opens `root`, creating it if needed. Rank 0 first removes the uncommitted step directories that
    /// crashed runs left behind.
    pub fn open(ctx: &'c Context, root: impl AsRef<Path>, options: &ManagerOptions) -> Result<Self> {
        let c_root = c_path(root.as_ref())?;
        let opts = options.to_c()?;
        let mut raw = ptr::null_mut();
        // SAFETY: a live context, used by this thread only; the root and options outlive the call.
        call(|err| unsafe { sys::ckpt_manager_open(ctx.as_ptr(), c_root.as_ptr(), &opts, &mut raw, err) })?;
        let raw = NonNull::new(raw).ok_or_else(|| Error::new(sys::CKPT_E_INTERNAL, "ckpt_manager_open gave NULL"))?;
        Ok(Manager { raw, _context: PhantomData })
    }

    /// Collective: saves `state` as step `step`, as [`Context::save`] does: returns once the buffers are staged.
    /// The step becomes the latest only if the returned request succeeds; a failed save leaves the latest pointer
    /// and the kept steps untouched. The options' [`tier`](SaveOptions::tier) overrides the manager's memory tier
    /// policy when it is [`Tier::Memory`](crate::Tier::Memory) or [`Tier::Both`](crate::Tier::Both).
    pub fn save(&self, state: &mut SaveState<'_>, step: u64, options: &SaveOptions) -> Result<SaveRequest<'c>> {
        // SAFETY: the manager and state are live handles used by this thread only; the options outlive the call.
        start_save(options, "ckpt_manager_save", |opts, request, err| unsafe {
            sys::ckpt_manager_save(self.raw.as_ptr(), state.as_ptr(), step, opts, request, err)
        })
    }

    /// Not collective: the newest committed step on storage, or None if there is none yet.
    pub fn latest(&self) -> Result<Option<u64>> {
        let mut step = 0u64;
        // SAFETY: a live manager and a valid out pointer.
        let outcome = call_status(|err| unsafe { sys::ckpt_manager_latest(self.raw.as_ptr(), &mut step, err) });
        step_or_none(outcome, step)
    }

    /// Every committed step under the root, ascending. Not collective.
    pub fn steps(&self) -> Result<Vec<u64>> {
        let mut count = 0u64;
        // SAFETY: a live manager; no array with capacity 0.
        call(|err| unsafe { sys::ckpt_manager_steps(self.raw.as_ptr(), ptr::null_mut(), 0, &mut count, err) })?;
        loop {
            let mut steps = vec![0u64; count as usize];
            let capacity = count;
            // SAFETY: `steps` holds `capacity` elements.
            call(|err| unsafe {
                sys::ckpt_manager_steps(self.raw.as_ptr(), steps.as_mut_ptr(), capacity, &mut count, err)
            })?;
            if count <= capacity {
                steps.truncate(count as usize);
                return Ok(steps);
            }
        }
    }

    /// Collective: the step [`Manager::load_latest`] would load, the same on every rank, without loading it: the
    /// latest on storage (as rank 0 sees it), or the newest step the job's node agents hold in memory when it is
    /// at least as new, which [`Manager::latest`] does not see. None on every rank if there is none: a fresh start.
    pub fn resume_step(&self) -> Result<Option<u64>> {
        let mut step = 0u64;
        // SAFETY: a live manager used by this thread only, and a valid out pointer.
        let outcome = call_status(|err| unsafe { sys::ckpt_manager_resume_step(self.raw.as_ptr(), &mut step, err) });
        step_or_none(outcome, step)
    }

    /// Collective: loads the latest step (as rank 0 sees it) into `state` and returns it, or returns None on every
    /// rank if there is no committed step yet: a fresh start. The newest step the node's agent holds in memory
    /// counts too, and is read from memory when it is at least as new as the latest on storage. On failure the
    /// buffers may be partly filled (but always hold valid values of their element type).
    pub fn load_latest(&self, state: &mut LoadState<'_>, options: &LoadOptions) -> Result<Option<u64>> {
        let (opts, _progress) = options.to_c();
        let mut step = 0u64;
        // SAFETY: the manager and state are live handles used by this thread only; the state's buffers are
        // exclusively borrowed for its lifetime; the progress callback outlives the call.
        let outcome = call_status(|err| unsafe {
            sys::ckpt_manager_load_latest(self.raw.as_ptr(), state.as_ptr(), &opts, &mut step, err)
        });
        state.repair_buffers();
        step_or_none(outcome, step)
    }

    /// The directory of step `step`, whether or not it exists.
    pub fn step_path(&self, step: u64) -> Result<PathBuf> {
        let mut capacity = STEP_PATH_FIRST_BUFFER;
        loop {
            let mut buffer = vec![0u8; capacity];
            let target = buffer.as_mut_ptr() as *mut c_char;
            // SAFETY: a live manager; the library writes at most `capacity` bytes at `target`.
            let outcome = call_status(|err| unsafe {
                sys::ckpt_manager_step_path(self.raw.as_ptr(), step, target, capacity as u64, err)
            });
            match outcome {
                (_, None) => return Ok(path_from_nul_terminated(buffer)),
                // The only argument that can be wrong here is the buffer's size: retry with a larger one.
                (sys::CKPT_E_INVALID_ARGUMENT, Some(_)) if capacity < STEP_PATH_MAX_BUFFER => capacity *= 2,
                (_, Some(error)) => return Err(error),
            }
        }
    }

    /// Not collective: waits for the manager's saves in flight and, on rank 0, for the removals of old steps their
    /// commits asked for, which otherwise go on in the background ([`resume_step`](Self::resume_step) waits for them
    /// too). A save's failure is its request's to report.
    pub fn wait(&self) -> Result<()> {
        // SAFETY: a live manager, used by this thread only.
        call(|err| unsafe { sys::ckpt_manager_wait(self.raw.as_ptr(), err) })
    }

    /// Not collective: the metrics saved with `step` ([`SaveOptions::metrics`]), as the text of a JSON object; None
    /// if the step was saved without any or is not committed.
    pub fn metrics(&self, step: u64) -> Result<Option<String>> {
        let mut length = 0u64;
        // SAFETY: a live manager; no buffer with capacity 0.
        let sized = call_status(|err| unsafe {
            sys::ckpt_manager_metrics(self.raw.as_ptr(), step, ptr::null_mut(), 0, &mut length, err)
        });
        match sized {
            (_, None) => {}
            (sys::CKPT_E_NOT_FOUND, Some(_)) => return Ok(None),
            (_, Some(error)) => return Err(error),
        }
        let mut buffer = vec![0u8; length as usize + 1];
        let capacity = buffer.len() as u64;
        // SAFETY: the library writes at most `capacity` bytes into `buffer`.
        call(|err| unsafe {
            sys::ckpt_manager_metrics(
                self.raw.as_ptr(),
                step,
                buffer.as_mut_ptr() as *mut c_char,
                capacity,
                &mut length,
                err,
            )
        })?;
        buffer.truncate(length as usize);
        String::from_utf8(buffer).map(Some).map_err(|_| Error::new(sys::CKPT_E_CORRUPT, "metrics are not UTF-8"))
    }
}

/// A manager call's step, where CKPT_E_NOT_FOUND means "no committed step yet" rather than a failure.
fn step_or_none(outcome: (i32, Option<Error>), step: u64) -> Result<Option<u64>> {
    match outcome {
        (_, None) => Ok(Some(step)),
        (sys::CKPT_E_NOT_FOUND, Some(_)) => Ok(None),
        (_, Some(error)) => Err(error),
    }
}

fn path_from_nul_terminated(mut buffer: Vec<u8>) -> PathBuf {
    let length = buffer.iter().position(|&byte| byte == 0).unwrap_or(buffer.len());
    buffer.truncate(length);
    PathBuf::from(OsString::from_vec(buffer))
}

impl Drop for Manager<'_> {
    fn drop(&mut self) {
        // SAFETY: created by ckpt_manager_open and freed once, before the context it borrows.
        unsafe { sys::ckpt_manager_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Manager<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_is_no_step_and_other_errors_stay_errors() {
        assert_eq!(step_or_none((sys::CKPT_OK, None), 7), Ok(Some(7)));
        let not_found = Error::new(sys::CKPT_E_NOT_FOUND, "no committed step yet");
        assert_eq!(step_or_none((sys::CKPT_E_NOT_FOUND, Some(not_found)), 0), Ok(None));
        let corrupt = Error::new(sys::CKPT_E_CORRUPT, "MANIFEST");
        assert_eq!(step_or_none((sys::CKPT_E_CORRUPT, Some(corrupt.clone())), 0), Err(corrupt));
    }

    #[test]
    fn storage_every_needs_the_memory_tier_and_a_positive_interval() {
        let refused = |options: ManagerOptions| options.to_c().err().map(|e| (e.kind(), e.message().to_owned()));
        let (kind, message) = refused(ManagerOptions::new().storage_every(2)).unwrap();
        assert_eq!(kind, crate::ErrorKind::InvalidArgument);
        assert!(message.contains("memory tier"), "{message}");
        let (_, message) = refused(ManagerOptions::new().memory_tier(true).storage_every(0)).unwrap();
        assert!(message.contains("at least 1"), "{message}");
        let opts = ManagerOptions::new().keep_last(3).memory_tier(true).storage_every(5).to_c().unwrap();
        assert_eq!((opts.keep_last, opts.memory_tier, opts.storage_every), (3, 1, 5));
        let opts = ManagerOptions::new().memory_tier(true).to_c().unwrap();
        assert_eq!((opts.memory_tier, opts.storage_every), (1, 0));
    }

    #[test]
    fn path_stops_at_the_first_nul() {
        assert_eq!(path_from_nul_terminated(b"/root/step-1\0\0junk".to_vec()), PathBuf::from("/root/step-1"));
    }
}

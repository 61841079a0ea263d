//! Safe Rust binding to libckpt, distributed checkpointing for training jobs.
//!
//! Every rank creates a [`Context`], registers the shards of the global tensors it holds in a [`SaveState`] (or
//! the shards it wants in a [`LoadState`]) and calls [`Context::save`] or [`Context::load`] together with the
//! other ranks. A checkpoint saved by any number of ranks, in any layout, loads on any other. A save returns as soon
//! as the buffers are staged; the [`SaveRequest`] it returns reports when the checkpoint is committed. A [`Manager`]
//! keeps numbered steps under one root directory, with a latest pointer and retention, and resumes from the latest.
//! A [`Reader`] opens a checkpoint from a single process, and [`export`] writes one out as safetensors.
//!
//! Every fallible call returns [`Result`], whose [`Error`] carries the library's status code and message. The raw
//! C declarations are in [`sys`].
//!
//! Threads: handles are `Send` but not `Sync`, as ckpt.h allows (distinct handles may be used from distinct
//! threads; one handle must not be used by two threads at once).
//!
//! ```no_run
//! use ckpt::{Context, LoadOptions, LoadState, SaveOptions, SaveState, Shard};
//!
//! fn main() -> ckpt::Result<()> {
//!     let ctx = Context::from_env()?; // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//!     let (rank, world) = (u64::from(ctx.rank()), u64::from(ctx.world_size()));
//!     let mut weight = vec![0.5f32; 4 * 1024]; // this rank's 4 rows of a [4 * world, 1024] tensor
//!     let shard = Shard::new("layer0.weight", &[4 * world, 1024]).region(&[4 * rank, 0], &[4, 1024]);
//!
//!     let mut state = SaveState::new()?;
//!     state.add_tensor(&shard, &weight)?;
//!     state.add_common("step", &100u64.to_le_bytes())?;
//!     let mut request = ctx.save(&mut state, "/tmp/ckpt/step-100", &SaveOptions::new())?;
//!     drop(state); // the buffers are free again once save returns
//!     request.wait()?;
//!
//!     let mut state = LoadState::new()?;
//!     state.add_tensor(&shard, &mut weight)?;
//!     ctx.load(&mut state, "/tmp/ckpt/step-100", &LoadOptions::new())?;
//!     Ok(())
//! }
//! ```
//!
//! Training with a [`Manager`]: resume from the latest step if there is one, save every step, keep the last two.
//!
//! ```no_run
//! use ckpt::{Context, LoadOptions, LoadState, Manager, ManagerOptions, SaveOptions, SaveRequest, SaveState, Shard};
//!
//! fn train(ctx: &Context, weight: &mut [f32]) -> ckpt::Result<()> {
//!     let shard = Shard::new("weight", &[weight.len() as u64]);
//!     let manager = Manager::open(ctx, "/tmp/run", &ManagerOptions::new().keep_last(2))?;
//!     let mut resume = LoadState::new()?;
//!     resume.add_tensor(&shard, weight)?;
//!     let first = manager.load_latest(&mut resume, &LoadOptions::new())?.map_or(0, |step| step + 1);
//!     drop(resume);
//!     let mut in_flight: Option<SaveRequest<'_>> = None;
//!     for step in first..first + 100 {
//!         weight.iter_mut().for_each(|w| *w *= 0.99); // a training step, overlapping the previous save's writes
//!         if let Some(mut previous) = in_flight.take() {
//!             previous.wait()?; // one save in flight at a time; its outcome is checked
//!         }
//!         let mut state = SaveState::new()?;
//!         state.add_tensor(&shard, weight)?;
//!         in_flight = Some(manager.save(&mut state, step, &SaveOptions::new())?); // returns once staged
//!     }
//!     if let Some(mut last) = in_flight {
//!         last.wait()?;
//!     }
//!     Ok(())
//! }
//! ```
//!
//! A state borrows its buffers until it is dropped, and a load state borrows them exclusively:
//!
//! ```compile_fail
//! let weight = vec![0f32; 4];
//! let mut state = ckpt::LoadState::new().unwrap();
//! state.add_tensor(&ckpt::Shard::new("w", &[4]), &weight).unwrap(); // a load needs `&mut`
//! ```
//!
//! ```compile_fail
//! let mut state = ckpt::SaveState::new().unwrap();
//! {
//!     let weight = vec![0f32; 4];
//!     state.add_tensor(&ckpt::Shard::new("w", &[4]), &weight).unwrap();
//! }
//! state.add_common("step", b"1").unwrap(); // `weight` no longer lives
//! ```
//!
//! ```compile_fail,E0597
//! let manager = {
//!     let ctx = ckpt::Context::from_env().unwrap();
//!     ckpt::Manager::open(&ctx, "/tmp/run", &ckpt::ManagerOptions::new()).unwrap()
//! }; // a manager cannot outlive its context
//! ```
//!
//! ```compile_fail
//! fn shared_between_threads<T: Sync>() {}
//! shared_between_threads::<ckpt::Context>(); // one handle, one thread at a time
//! ```

mod cmem;
mod context;
mod dtype;
mod error;
mod export;
mod load;
mod manager;
mod progress;
mod reader;
mod save;
mod state;
mod stats;
pub mod sys;

pub use context::{Context, ContextBuilder, LogLevel, Transport};
pub use dtype::{Bf16Bits, DType, Element, F16Bits};
pub use error::{Error, ErrorKind, Result};
pub use export::{export, ExportOptions};
pub use load::{LoadOptions, Strictness};
pub use manager::{BestMode, Manager, ManagerOptions};
pub use progress::{Phase, Progress};
pub use reader::{CheckpointInfo, ChunkInfo, Chunks, Commons, Reader, TensorInfo, Tensors};
pub use save::{SaveOptions, SaveRequest, Tier};
pub use state::{LoadState, SaveState, Shard};
pub use stats::{ContextStats, RequestStats};

/// The version of the library actually loaded, as "major.minor.patch".
pub fn library_version() -> String {
    // SAFETY: static storage, never NULL.
    unsafe { std::ffi::CStr::from_ptr(sys::ckpt_version_string()) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    fn movable_between_threads<T: Send>() {}

    #[test]
    fn handles_are_send_as_ckpt_h_allows() {
        movable_between_threads::<crate::Context>();
        movable_between_threads::<crate::SaveState<'static>>();
        movable_between_threads::<crate::LoadState<'static>>();
        movable_between_threads::<crate::SaveRequest<'static>>();
        movable_between_threads::<crate::Reader>();
        movable_between_threads::<crate::Error>();
    }
}

/// Compiles the README's example as a doctest so that it cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeExample;

//! What a save and a load report: SaveRequest::stats and the progress callbacks of SaveOptions and LoadOptions.

mod common;

use std::sync::{Arc, Mutex};

use ckpt::{Context, LoadOptions, LoadState, Phase, Progress, SaveOptions, SaveState, Shard};
use common::*;

const LEN: usize = 1 << 20; // 4 MB of f32

fn solo_context() -> Context {
    solo_builder().create().expect("single-rank context")
}

fn values() -> Vec<f32> {
    (0..LEN).map(|i| i as f32).collect()
}

/// A progress callback that keeps every report.
fn recorder() -> (Arc<Mutex<Vec<Progress>>>, impl Fn(Progress) + Send + Sync + 'static) {
    let reports = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&reports);
    (reports, move |progress| sink.lock().unwrap().push(progress))
}

/// The phases in the order they came, each once; and `done` never shrinks within a phase.
fn phases(reports: &[Progress]) -> Vec<Phase> {
    let mut seen: Vec<Phase> = Vec::new();
    for (i, report) in reports.iter().enumerate() {
        assert!(report.done <= report.total, "{:?}", report);
        if i > 0 && reports[i - 1].phase == report.phase {
            assert!(report.done >= reports[i - 1].done, "progress went back: {:?}", reports);
        }
        if seen.last() != Some(&report.phase) {
            seen.push(report.phase);
        }
    }
    seen
}

#[test]
fn stats_of_a_finished_save_add_up() {
    let (ctx, temp) = (solo_context(), TempDir::new());
    let data = values();
    let mut state = SaveState::new().unwrap();
    state.add_tensor(&Shard::new("x", &[LEN as u64]), &data).unwrap();
    let mut request = ctx.save(&mut state, temp.checkpoint(), &SaveOptions::new()).unwrap();
    drop(state);
    request.wait().unwrap();
    let stats = request.stats().unwrap();
    let bytes = (LEN * 4) as u64;
    assert!(stats.committed, "{:?}", stats);
    assert_eq!((stats.state_bytes, stats.bytes_to_write), (bytes, bytes), "{:?}", stats);
    assert_eq!((stats.bytes_staged, stats.bytes_written, stats.bytes_committed), (bytes, bytes, bytes));
    assert!(stats.files_written >= 1 && stats.writing_ns > 0 && stats.committing_ns > 0, "{:?}", stats);
    assert_eq!(stats.blocking_ns, stats.planning_ns + stats.staging_ns);
    assert_eq!(stats.total_ns, stats.blocking_ns + stats.writing_ns + stats.committing_ns);
    assert!(stats.gbps() > 0.0);
}

#[test]
fn save_and_load_progress_run_through_their_phases() {
    let (ctx, temp) = (solo_context(), TempDir::new());
    let bytes = (LEN * 4) as u64;
    let data = values();
    let (saving, callback) = recorder();
    let mut state = SaveState::new().unwrap();
    state.add_tensor(&Shard::new("x", &[LEN as u64]), &data).unwrap();
    let mut request = ctx.save(&mut state, temp.checkpoint(), &SaveOptions::new().progress(callback)).unwrap();
    drop(state);
    request.wait().unwrap();
    drop(request);
    let saving = saving.lock().unwrap().clone();
    assert_eq!(phases(&saving), [Phase::PLANNING, Phase::STAGING, Phase::WRITING, Phase::COMMITTING, Phase::COMMITTED]);
    assert_eq!(saving.last(), Some(&Progress { phase: Phase::COMMITTED, done: bytes, total: bytes }));

    let mut loaded = vec![0f32; LEN];
    let (loading, callback) = recorder();
    let mut state = LoadState::new().unwrap();
    state.add_tensor(&Shard::new("x", &[LEN as u64]), &mut loaded).unwrap();
    ctx.load(&mut state, temp.checkpoint(), &LoadOptions::new().progress(callback)).unwrap();
    drop(state);
    assert_eq!(loaded, data);
    let loading = loading.lock().unwrap().clone();
    assert_eq!(phases(&loading), [Phase::PLANNING, Phase::READING, Phase::LOADED]);
    assert_eq!(loading.last(), Some(&Progress { phase: Phase::LOADED, done: bytes, total: bytes }));
}

#[test]
fn a_panicking_progress_callback_does_not_unwind_into_the_library() {
    let (ctx, temp) = (solo_context(), TempDir::new());
    let data = values();
    let mut state = SaveState::new().unwrap();
    state.add_tensor(&Shard::new("x", &[LEN as u64]), &data).unwrap();
    let options = SaveOptions::new().progress(|_| panic!("a progress bar that fails"));
    let mut request = ctx.save(&mut state, temp.checkpoint(), &options).unwrap();
    drop(state);
    request.wait().unwrap();
    assert!(request.stats().unwrap().committed);
}

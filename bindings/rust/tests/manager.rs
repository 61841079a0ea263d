//! A manager used by 2 rank processes: numbered steps, the latest pointer, retention and resuming from the latest.
//! The test runs this binary again as the ranks (see common::run_ranks), which enter through `rank_process`.

mod common;

use std::env;
use std::path::{Path, PathBuf};

use ckpt::{Context, ErrorKind, LoadOptions, LoadState, Manager, ManagerOptions, SaveOptions, SaveState, Shard};
use common::*;

const SAVE_THREE_STEPS_KEEP_TWO: &str = "save-three-steps-keep-two";
const ROWS_PER_RANK: u64 = 2;
const COLUMNS: u64 = 3;

#[test]
#[ignore = "entry point of the rank processes that the other tests spawn"]
fn rank_process() {
    let role = match env::var(ROLE_VAR) {
        Ok(role) => role,
        Err(_) => return,
    };
    let root = PathBuf::from(env::var_os(DIR_VAR).expect("manager root"));
    let ctx = Context::from_env().expect("context from the launcher's environment");
    match role.as_str() {
        SAVE_THREE_STEPS_KEEP_TWO => save_three_steps_keep_two(&ctx, &root),
        other => panic!("unknown role {}", other),
    }
}

/// The value of element (row, column) of "weight" as saved at `step`.
fn weight_at_step(step: u64, row: u64, column: u64) -> f32 {
    (step * 1000 + row * COLUMNS + column) as f32
}

fn weight_rows(step: u64, rows: std::ops::Range<u64>) -> Vec<f32> {
    rows.flat_map(|row| (0..COLUMNS).map(move |column| weight_at_step(step, row, column))).collect()
}

/// Rank r holds rows [2r, 2r + 2) of "weight"; every step saves other values, and the common "step".
fn save_step(ctx: &Context, manager: &Manager<'_>, step: u64) {
    let global_shape = [ROWS_PER_RANK * u64::from(ctx.world_size()), COLUMNS];
    let first_row = ROWS_PER_RANK * u64::from(ctx.rank());
    let rows = weight_rows(step, first_row..first_row + ROWS_PER_RANK);
    let mut state = SaveState::new().unwrap();
    let shard = Shard::new(WEIGHT, &global_shape).region(&[first_row, 0], &[ROWS_PER_RANK, COLUMNS]);
    state.add_tensor(&shard, &rows).unwrap();
    state.add_common(STEP_KEY, &step.to_le_bytes()).unwrap();
    let mut request = manager.save(&mut state, step, &SaveOptions::new()).unwrap();
    request.wait().unwrap_or_else(|e| panic!("step {}: {}", step, e));
}

fn save_three_steps_keep_two(ctx: &Context, root: &Path) {
    assert_eq!(ctx.world_size(), 2);
    let manager = Manager::open(ctx, root, &ManagerOptions::new().keep_last(2)).unwrap();
    assert_eq!(manager.latest().unwrap(), None, "a new root has no step");
    for step in 1..=3 {
        save_step(ctx, &manager, step);
    }

    assert_eq!(manager.latest().unwrap(), Some(3));
    assert_eq!(manager.resume_step().unwrap(), Some(3));
    assert_eq!(manager.steps().unwrap(), vec![2, 3], "keep_last 2 kept the newest two");
    assert_eq!(manager.step_path(3).unwrap().file_name().unwrap(), "step-000000000003");
    assert!(!manager.step_path(1).unwrap().exists(), "retention keeps the last 2 steps: step 1 must be gone");
    assert!(manager.step_path(2).unwrap().is_dir(), "step 2 is one of the last 2 steps");

    let total_rows = ROWS_PER_RANK * u64::from(ctx.world_size());
    let mut weight = vec![0f32; (total_rows * COLUMNS) as usize];
    {
        let mut state = LoadState::new().unwrap();
        state.add_tensor(&Shard::new(WEIGHT, &[total_rows, COLUMNS]), &mut weight).unwrap();
        assert_eq!(manager.load_latest(&mut state, &LoadOptions::new()).unwrap(), Some(3));
        assert_eq!(state.common(STEP_KEY).unwrap(), &3u64.to_le_bytes()[..]);
    }
    assert_eq!(weight, weight_rows(3, 0..total_rows));
}

#[test]
fn two_rank_manager_keeps_the_last_two_steps_and_resumes_from_the_latest() {
    let temp = TempDir::new();
    run_ranks(SAVE_THREE_STEPS_KEEP_TWO, 2, &temp);
}

#[test]
fn load_latest_of_an_empty_root_is_a_fresh_start() {
    let temp = TempDir::new();
    let ctx = solo_builder().io_workers(0).create().unwrap();
    let manager = Manager::open(&ctx, temp.checkpoint(), &ManagerOptions::new()).unwrap();
    assert_eq!(manager.resume_step().unwrap(), None);
    let mut weight = [0f32; 2];
    let mut state = LoadState::new().unwrap();
    state.add_tensor(&Shard::new(WEIGHT, &[2]), &mut weight).unwrap();
    assert_eq!(manager.load_latest(&mut state, &LoadOptions::new()).unwrap(), None);
}

#[test]
fn a_second_manager_on_a_root_is_refused_until_the_first_is_dropped() {
    let temp = TempDir::new();
    let holder = solo_builder().io_workers(0).create().unwrap();
    let other = solo_builder().io_workers(0).create().unwrap();
    let first = Manager::open(&holder, temp.checkpoint(), &ManagerOptions::new()).unwrap();
    let refused = Manager::open(&other, temp.checkpoint(), &ManagerOptions::new()).err().expect("refused");
    assert_eq!(refused.kind(), ErrorKind::AlreadyExists);
    assert!(refused.to_string().contains(&format!("pid {}", std::process::id())), "{}", refused);
    drop(first);
    Manager::open(&other, temp.checkpoint(), &ManagerOptions::new()).expect("the root, once released");
}

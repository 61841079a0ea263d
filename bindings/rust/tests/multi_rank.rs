//! A checkpoint saved by 2 rank processes, loaded by 1 and by 3 with another split, and read without a context.
//! Each test runs this binary again as the ranks (see common::run_ranks), which enter through `rank_process`.

mod common;

use std::env;
use std::path::PathBuf;

use ckpt::{Context, LoadOptions, LoadState, Reader, SaveOptions, SaveState, Shard};
use common::*;

const SAVE: &str = "save-rows";
const SAVE_CHECKING_REPLICAS: &str = "save-rows-checking-replicas";
const LOAD_WHOLE: &str = "load-whole";
const LOAD_COLUMNS: &str = "load-columns";

#[test]
#[ignore = "entry point of the rank processes that the other tests spawn"]
fn rank_process() {
    let role = match env::var(ROLE_VAR) {
        Ok(role) => role,
        Err(_) => return,
    };
    let dir = PathBuf::from(env::var_os(DIR_VAR).expect("checkpoint directory"));
    let ctx = Context::from_env().expect("context from the launcher's environment");
    match role.as_str() {
        SAVE => save_rows(&ctx, &dir, false),
        SAVE_CHECKING_REPLICAS => save_rows(&ctx, &dir, true),
        LOAD_WHOLE => load_whole(&ctx, &dir),
        LOAD_COLUMNS => load_columns(&ctx, &dir),
        other => panic!("unknown role {}", other),
    }
}

/// Rank r of 2 holds rows [2r, 2r + 2) of the weight and a replica of the whole bias; with `check_replicas` the two
/// copies of the bias are compared before the save commits.
fn save_rows(ctx: &Context, dir: &std::path::Path, check_replicas: bool) {
    assert_eq!(ctx.world_size(), 2);
    let rank = u64::from(ctx.rank());
    let rows = 2 * rank..2 * rank + 2;
    let weight = weight_box(rows.clone(), 0..WEIGHT_SHAPE[1]);
    let bias = bias();
    let mut state = SaveState::new().unwrap();
    let weight_shard = Shard::new(WEIGHT, &WEIGHT_SHAPE).region(&[rows.start, 0], &[2, WEIGHT_SHAPE[1]]);
    state.add_tensor(&weight_shard, &weight).unwrap();
    state.add_tensor(&Shard::new(BIAS, &[BIAS_LEN]).replica(&[ctx.rank()]), &bias).unwrap();
    state.add_common(STEP_KEY, &STEP.to_le_bytes()).unwrap();
    let options = SaveOptions::new().metadata("layout", "rows-2").check_replicas(check_replicas);
    let mut request = ctx.save(&mut state, dir, &options).unwrap();
    request.wait().unwrap();
    // Without the job's collectives, the TCP store carried the save's plan and agreements.
    let stats = ctx.stats().unwrap();
    assert!(stats.control_bytes_sent > 0 && stats.control_bytes_received > 0, "{:?}", stats);
    assert!(stats.store_collectives > 0, "{:?}", stats);
}

fn assert_common_step(state: &LoadState<'_>) {
    assert_eq!(state.common(STEP_KEY).unwrap(), &STEP.to_le_bytes()[..]);
}

fn load_whole(ctx: &Context, dir: &std::path::Path) {
    let mut weight = vec![0f32; (WEIGHT_SHAPE[0] * WEIGHT_SHAPE[1]) as usize];
    let mut bias = vec![0f64; BIAS_LEN as usize];
    {
        let mut state = LoadState::new().unwrap();
        state.add_tensor(&Shard::new(WEIGHT, &WEIGHT_SHAPE), &mut weight).unwrap();
        state.add_tensor(&Shard::new(BIAS, &[BIAS_LEN]), &mut bias).unwrap();
        ctx.load(&mut state, dir, &LoadOptions::new()).unwrap();
        assert_common_step(&state);
    }
    assert_eq!(weight, weight_box(0..WEIGHT_SHAPE[0], 0..WEIGHT_SHAPE[1]));
    assert_eq!(bias, common::bias());
}

/// Rank r of 3 asks for columns [2r, 2r + 2) of the weight and the whole bias.
fn load_columns(ctx: &Context, dir: &std::path::Path) {
    assert_eq!(ctx.world_size(), 3);
    let columns = 2 * u64::from(ctx.rank())..2 * u64::from(ctx.rank()) + 2;
    let mut weight = vec![0f32; (WEIGHT_SHAPE[0] * 2) as usize];
    let mut bias = vec![0f64; BIAS_LEN as usize];
    {
        let mut state = LoadState::new().unwrap();
        let shard = Shard::new(WEIGHT, &WEIGHT_SHAPE).region(&[0, columns.start], &[WEIGHT_SHAPE[0], 2]);
        state.add_tensor(&shard, &mut weight).unwrap();
        state.add_tensor(&Shard::new(BIAS, &[BIAS_LEN]), &mut bias).unwrap();
        ctx.load(&mut state, dir, &LoadOptions::new()).unwrap();
        assert_common_step(&state);
    }
    assert_eq!(weight, weight_box(0..WEIGHT_SHAPE[0], columns));
    assert_eq!(bias, common::bias());
}

#[test]
fn two_rank_save_loads_whole_on_one_rank() {
    let temp = TempDir::new();
    run_ranks(SAVE, 2, &temp);
    run_ranks(LOAD_WHOLE, 1, &temp);
}

#[test]
fn two_rank_save_checking_replicas_commits_and_loads_whole_on_one_rank() {
    let temp = TempDir::new();
    run_ranks(SAVE_CHECKING_REPLICAS, 2, &temp);
    run_ranks(LOAD_WHOLE, 1, &temp);
}

#[test]
fn two_rank_save_loads_column_split_on_three_ranks() {
    let temp = TempDir::new();
    run_ranks(SAVE, 2, &temp);
    run_ranks(LOAD_COLUMNS, 3, &temp);
}

#[test]
fn two_rank_save_is_described_by_the_reader() {
    let temp = TempDir::new();
    run_ranks(SAVE, 2, &temp);
    let mut reader = Reader::open(temp.checkpoint()).unwrap();

    let info = reader.info().unwrap();
    assert_eq!((info.world_size, info.tensor_count, info.common_count), (2, 2, 1));
    let tensors: Vec<_> = reader.tensors().unwrap().map(Result::unwrap).collect();
    let keys: Vec<&str> = tensors.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(keys, [BIAS, WEIGHT]);
    assert_eq!(tensors[1].shape, WEIGHT_SHAPE);
    assert_eq!(tensors[1].dtype, ckpt::DType::F32);

    let weight_rows: Vec<Vec<u64>> = reader.chunks(&tensors[1]).map(|c| c.unwrap().offset).collect();
    assert_eq!(weight_rows.len(), 2, "one chunk per saving rank: {:?}", weight_rows);
    assert_eq!(reader.chunks(&tensors[0]).count(), 1, "the replicated bias is written once");

    assert_eq!(reader.common(STEP_KEY).unwrap(), &STEP.to_le_bytes()[..]);
    assert_eq!(reader.metadata("layout").unwrap(), "rows-2");
    assert_eq!(reader.metadata_entries().unwrap(), vec![("layout".to_string(), "rows-2".to_string())]);
    let mut middle = vec![0f32; 6];
    reader.read_box(WEIGHT, &[1, 2], &[3, 2], &mut middle).unwrap();
    assert_eq!(middle, weight_box(1..4, 2..4));
    reader.verify().unwrap();
}

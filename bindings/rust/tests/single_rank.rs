//! Behaviours that one process shows: errors, flattened shards, objects, bools, the request, the reader's checks
//! and the callbacks.

mod common;

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ckpt::sys::{CKPT_E_ALREADY_EXISTS, CKPT_E_INVALID_ARGUMENT, CKPT_E_MISMATCH, CKPT_E_NOT_FOUND};
use ckpt::{
    Bf16Bits, Context, ErrorKind, LoadOptions, LoadState, LogLevel, Reader, SaveOptions, SaveState, Shard, Strictness,
    Transport,
};
use common::*;

fn solo_context() -> Context {
    solo_builder().create().expect("single-rank context")
}

/// Saves "weight" (whole), "bias" and the common step from a single rank.
fn save_test_checkpoint(ctx: &Context, temp: &TempDir) {
    save_test_checkpoint_at(ctx, &temp.checkpoint());
}

fn save_test_checkpoint_at(ctx: &Context, path: &std::path::Path) {
    let weight = weight_box(0..WEIGHT_SHAPE[0], 0..WEIGHT_SHAPE[1]);
    let bias = bias();
    let mut state = SaveState::new().unwrap();
    state.add_tensor(&Shard::new(WEIGHT, &WEIGHT_SHAPE), &weight).unwrap();
    state.add_tensor(&Shard::new(BIAS, &[BIAS_LEN]), &bias).unwrap();
    state.add_common(STEP_KEY, &STEP.to_le_bytes()).unwrap();
    ctx.save(&mut state, path, &SaveOptions::new()).unwrap().wait().unwrap();
}

#[test]
fn missing_key_fails_load_with_mismatch_naming_the_key() {
    let (ctx, temp) = (solo_context(), TempDir::new());
    save_test_checkpoint(&ctx, &temp);
    let mut absent = [0f32; 3];
    let mut state = LoadState::new().unwrap();
    state.add_tensor(&Shard::new("absent.weight", &[3]), &mut absent).unwrap();
    let error = ctx.load(&mut state, temp.checkpoint(), &LoadOptions::new()).expect_err("the key is missing");
    assert_eq!(error.status(), CKPT_E_MISMATCH, "{}", error);
    assert_eq!(error.kind(), ErrorKind::Mismatch);
    assert!(error.message().contains("absent.weight"), "{}", error);
}

#[test]
fn missing_key_is_skipped_when_ignored() {
    let (ctx, temp) = (solo_context(), TempDir::new());
    save_test_checkpoint(&ctx, &temp);
    let mut absent = [7u8; 2];
    let mut state = LoadState::new().unwrap();
    state.add_tensor(&Shard::new("absent", &[2]), &mut absent).unwrap();
    let options = LoadOptions::new().missing_keys(Strictness::Ignore).unexpected_keys(Strictness::Ignore);
    ctx.load(&mut state, temp.checkpoint(), &options).unwrap();
}

#[test]
fn opening_a_missing_directory_fails_with_not_found() {
    let temp = TempDir::new();
    let error = Reader::open(temp.path().join("never-saved")).expect_err("nothing there");
    assert_eq!(error.status(), CKPT_E_NOT_FOUND, "{}", error);
    assert!(error.to_string().starts_with("CKPT_E_NOT_FOUND: "), "{}", error);
}

#[test]
fn loading_a_missing_directory_fails_with_not_found() {
    let (ctx, temp) = (solo_context(), TempDir::new());
    let mut state = LoadState::new().unwrap();
    let error = ctx.load(&mut state, temp.path().join("never-saved"), &LoadOptions::new()).expect_err("nothing there");
    assert_eq!(error.status(), CKPT_E_NOT_FOUND, "{}", error);
}

#[test]
fn saving_over_a_checkpoint_fails_with_already_exists() {
    let (ctx, temp) = (solo_context(), TempDir::new());
    save_test_checkpoint(&ctx, &temp);
    let mut state = SaveState::new().unwrap();
    let error = ctx.save(&mut state, temp.checkpoint(), &SaveOptions::new()).expect_err("already saved");
    assert_eq!(error.status(), CKPT_E_ALREADY_EXISTS, "{}", error);
}

#[test]
fn buffer_of_the_wrong_length_is_refused_naming_the_key() {
    let short = [0f32; 5];
    let mut state = SaveState::new().unwrap();
    let error = state.add_tensor(&Shard::new("short", &[2, 3]), &short).expect_err("6 elements expected");
    assert_eq!(error.status(), CKPT_E_INVALID_ARGUMENT, "{}", error);
    assert!(error.message().contains("short"), "{}", error);
}

#[test]
fn region_with_another_rank_than_the_shape_is_refused() {
    let data = [0u8; 4];
    let mut state = SaveState::new().unwrap();
    let shard = Shard::new("rank", &[2, 2]).region(&[0], &[4]);
    let error = state.add_tensor(&shard, &data).expect_err("offset and shape have 1 dimension, the tensor 2");
    assert_eq!(error.status(), CKPT_E_INVALID_ARGUMENT, "{}", error);
}

#[test]
fn request_reports_a_finished_save() {
    let (ctx, temp) = (solo_context(), TempDir::new());
    let values = [1i64, 2, 3];
    let mut state = SaveState::new().unwrap();
    state.add_tensor(&Shard::new("v", &[3]), &values).unwrap();
    let mut request = ctx.save(&mut state, temp.checkpoint(), &SaveOptions::new()).unwrap();
    drop(state);
    assert!(request.wait_timeout(std::time::Duration::from_secs(30)).unwrap());
    assert!(request.test().unwrap());
}

#[test]
fn in_place_save_is_durable_when_the_call_returns() {
    let (ctx, temp) = (solo_context(), TempDir::new());
    let weight = weight_box(0..WEIGHT_SHAPE[0], 0..WEIGHT_SHAPE[1]);
    let (bias, ids) = (bias(), (0..1000i32).map(|i| i * 7 - 3).collect::<Vec<_>>());
    let mut state = SaveState::new().unwrap();
    state.add_tensor(&Shard::new(WEIGHT, &WEIGHT_SHAPE), &weight).unwrap();
    state.add_tensor(&Shard::new(BIAS, &[BIAS_LEN]), &bias).unwrap();
    state.add_tensor(&Shard::new("ids", &[1000]), &ids).unwrap();
    let mut request = ctx.save(&mut state, temp.checkpoint(), &SaveOptions::new().in_place(true)).unwrap();
    let stats = request.stats().unwrap();
    assert!(stats.bytes_to_write > 0, "{:?}", stats);
    assert_eq!(stats.bytes_written, stats.bytes_to_write, "not all written when the save returned: {:?}", stats);
    request.wait().unwrap();
    drop(state);

    let (mut weight_back, mut bias_back, mut ids_back) = (vec![0f32; 24], vec![0f64; 5], vec![0i32; 1000]);
    let mut state = LoadState::new().unwrap();
    state.add_tensor(&Shard::new(WEIGHT, &WEIGHT_SHAPE), &mut weight_back).unwrap();
    state.add_tensor(&Shard::new(BIAS, &[BIAS_LEN]), &mut bias_back).unwrap();
    state.add_tensor(&Shard::new("ids", &[1000]), &mut ids_back).unwrap();
    ctx.load(&mut state, temp.checkpoint(), &LoadOptions::new()).unwrap();
    drop(state);
    assert_eq!((weight_back, bias_back, ids_back), (weight, bias, ids));
}

/// Saves "weight" (whole, 64 rows of 64 KiB) and "bias" from a single rank with `options`.
fn save_weight_and_bias(
    ctx: &Context,
    path: &Path,
    weight: &[f32],
    bias: &[f64],
    options: &SaveOptions,
) -> ckpt::Result<()> {
    let mut state = SaveState::new().unwrap();
    state.add_tensor(&Shard::new(WEIGHT, &[64, 1 << 14]), weight).unwrap();
    state.add_tensor(&Shard::new(BIAS, &[BIAS_LEN]), bias).unwrap();
    ctx.save(&mut state, path, options)?.wait()
}

/// The bytes of every file under `dir`.
fn directory_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let metadata = entry.metadata().unwrap();
            if metadata.is_dir() {
                directory_bytes(&entry.path())
            } else {
                metadata.len()
            }
        })
        .sum()
}

#[test]
fn incremental_save_writes_only_the_changed_tensor_and_loads_the_new_values() {
    let (ctx, temp) = (solo_context(), TempDir::new());
    let (full, changes) = (temp.path().join("a"), temp.path().join("b"));
    let weight: Vec<f32> = (0..1 << 20).map(|i| i as f32).collect();
    let mut bias = bias();
    save_weight_and_bias(&ctx, &full, &weight, &bias, &SaveOptions::new().incremental(true)).unwrap();
    bias.iter_mut().for_each(|value| *value *= 2.0);
    save_weight_and_bias(&ctx, &changes, &weight, &bias, &SaveOptions::new().incremental(true).base(&full)).unwrap();
    let (written_in_full, written_changes) =
        (directory_bytes(&full.join("data")), directory_bytes(&changes.join("data")));
    assert!(written_changes * 100 < written_in_full, "{} bytes written against {}", written_changes, written_in_full);

    let (mut weight_back, mut bias_back) = (vec![0f32; weight.len()], vec![0f64; bias.len()]);
    let mut state = LoadState::new().unwrap();
    state.add_tensor(&Shard::new(WEIGHT, &[64, 1 << 14]), &mut weight_back).unwrap();
    state.add_tensor(&Shard::new(BIAS, &[BIAS_LEN]), &mut bias_back).unwrap();
    ctx.load(&mut state, &changes, &LoadOptions::new()).unwrap();
    drop(state);
    assert!(weight_back == weight && bias_back == bias, "the incremental checkpoint loads other values");

    let refused = temp.path().join("c");
    let error = save_weight_and_bias(&ctx, &refused, &weight, &bias, &SaveOptions::new().base(&full))
        .expect_err("a base without incremental");
    assert_eq!(error.status(), CKPT_E_INVALID_ARGUMENT, "{}", error);
    assert!(error.message().contains("CKPT_SAVE_INCREMENTAL"), "{}", error);
    assert!(!refused.exists());
}

/// A weight-like value: small, of both signs, spread over a few binary orders of magnitude.
fn weight_like(i: u64) -> f32 {
    let mut h = (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h ^= h >> 29;
    h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^= h >> 32;
    ((h % 20001) as f64 - 10000.0) as f32 * 1e-6
}

const COMPRESSED_ROWS: u64 = 512;
const COMPRESSED_COLUMNS: u64 = 1024;

/// "w" (2 MiB of BF16 weights), "m" (2 MiB of F32 weights) and "ids" (2 MiB of I32 in a repeating pattern).
struct Compressible {
    w: Vec<Bf16Bits>,
    m: Vec<f32>,
    ids: Vec<i32>,
}

impl Compressible {
    fn new() -> Self {
        let n = COMPRESSED_ROWS * COMPRESSED_COLUMNS * 2;
        Compressible {
            w: (0..n).map(|i| Bf16Bits((weight_like(i).to_bits() >> 16) as u16)).collect(),
            m: (0..n / 2).map(|i| weight_like(i + n)).collect(),
            ids: (0..n / 2).map(|i| ((i * 7) % 1000) as i32).collect(),
        }
    }

    fn bytes(&self) -> u64 {
        (self.w.len() * 2 + self.m.len() * 4 + self.ids.len() * 4) as u64
    }

    /// Saves the three from a single rank with `options`, "w"'s shard flagged compressed if `compress_w`.
    fn save(&self, ctx: &Context, path: &Path, compress_w: bool, options: &SaveOptions) -> ckpt::Result<()> {
        let w = Shard::new("w", &[COMPRESSED_ROWS * 2, COMPRESSED_COLUMNS]);
        let mut state = SaveState::new().unwrap();
        state.add_tensor(&if compress_w { w.compress() } else { w }, &self.w).unwrap();
        state.add_tensor(&Shard::new("m", &[COMPRESSED_ROWS, COMPRESSED_COLUMNS]), &self.m).unwrap();
        state.add_tensor(&Shard::new("ids", &[COMPRESSED_ROWS, COMPRESSED_COLUMNS]), &self.ids).unwrap();
        ctx.save(&mut state, path, options)?.wait()
    }

    /// Loads `path` and checks every element.
    fn assert_loads_exactly(&self, ctx: &Context, path: &Path) {
        let mut back = Compressible {
            w: vec![Bf16Bits::default(); self.w.len()],
            m: vec![0.0; self.m.len()],
            ids: vec![0; self.ids.len()],
        };
        let mut state = LoadState::new().unwrap();
        state.add_tensor(&Shard::new("w", &[COMPRESSED_ROWS * 2, COMPRESSED_COLUMNS]), &mut back.w).unwrap();
        state.add_tensor(&Shard::new("m", &[COMPRESSED_ROWS, COMPRESSED_COLUMNS]), &mut back.m).unwrap();
        state.add_tensor(&Shard::new("ids", &[COMPRESSED_ROWS, COMPRESSED_COLUMNS]), &mut back.ids).unwrap();
        ctx.load(&mut state, path, &LoadOptions::new()).unwrap();
        drop(state);
        assert!(back.w == self.w && back.m == self.m && back.ids == self.ids, "{} loads other values", path.display());
    }
}

#[test]
fn compressed_save_loads_exactly_as_format_3_in_fewer_bytes_and_is_refused_in_place() {
    let (ctx, temp) = (solo_context(), TempDir::new());
    let tensors = Compressible::new();
    let (plain, all, w_only) = (temp.path().join("plain"), temp.path().join("all"), temp.path().join("w"));
    tensors.save(&ctx, &plain, false, &SaveOptions::new()).unwrap();
    tensors.save(&ctx, &all, false, &SaveOptions::new().compress(true)).unwrap();
    tensors.save(&ctx, &w_only, true, &SaveOptions::new()).unwrap();
    for path in [&plain, &all, &w_only] {
        tensors.assert_loads_exactly(&ctx, path);
    }
    let format = |path: &Path| Reader::open(path).unwrap().info().unwrap().format_major;
    assert!(format(&plain) < 3, "an uncompressed checkpoint is format {}", format(&plain));
    assert_eq!((format(&all), format(&w_only)), (3, 3));
    Reader::open(&all).unwrap().verify().unwrap();
    let [plain_bytes, all_bytes, w_only_bytes] =
        [&plain, &all, &w_only].map(|path| directory_bytes(&path.join("data")));
    assert_eq!(plain_bytes, tensors.bytes());
    assert!(all_bytes < tensors.bytes() * 3 / 4, "{} bytes written of {}", all_bytes, tensors.bytes());
    // BF16 weights shrink by about 1.5x: "w" alone saves a sixth of its bytes or more.
    assert!(plain_bytes - w_only_bytes > tensors.w.len() as u64 * 2 / 6, "{} bytes of {}", w_only_bytes, plain_bytes);
    assert!(all_bytes < w_only_bytes, "everything compressed takes {}, \"w\" alone {}", all_bytes, w_only_bytes);

    let refused = temp.path().join("in-place");
    let error = tensors
        .save(&ctx, &refused, false, &SaveOptions::new().compress(true).in_place(true))
        .expect_err("compress with in_place");
    assert_eq!(error.status(), CKPT_E_INVALID_ARGUMENT, "{}", error);
    assert!(error.message().contains("CKPT_SAVE_COMPRESS"), "{}", error);
    assert!(!refused.exists());
    // A shard's flag alone is no refusal: a save in place stores the tensor as it is.
    let in_place = temp.path().join("w-in-place");
    tensors.save(&ctx, &in_place, true, &SaveOptions::new().in_place(true)).unwrap();
    assert!(format(&in_place) < 3, "a save in place is format {}", format(&in_place));
    tensors.assert_loads_exactly(&ctx, &in_place);
}

#[test]
fn stats_count_committed_saves_bytes_and_reused_plans() {
    let (ctx, temp) = (solo_context(), TempDir::new());
    save_test_checkpoint(&ctx, &temp);
    let mut weight = vec![0f32; 24];
    {
        let mut state = LoadState::new().unwrap();
        state.add_tensor(&Shard::new(WEIGHT, &WEIGHT_SHAPE), &mut weight).unwrap();
        ctx.load(&mut state, temp.checkpoint(), &LoadOptions::new().unexpected_keys(Strictness::Ignore)).unwrap();
    }
    let first = ctx.stats().unwrap();
    assert!(first.saves_committed >= 1, "{:?}", first);
    assert!(first.bytes_written > 0 && first.bytes_read > 0, "{:?}", first);
    assert!(first.arena_bytes > 0, "{:?}", first);

    save_test_checkpoint_at(&ctx, &temp.path().join("same-structure"));
    let second = ctx.stats().unwrap();
    assert_eq!(second.plans_reused, first.plans_reused + 1, "{:?} then {:?}", first, second);
    assert_eq!(second.saves_committed, first.saves_committed + 1, "{:?} then {:?}", first, second);
}

#[test]
fn io_workers_arena_and_transport_options_reach_the_context() {
    let ctx = solo_builder().io_workers(0).transport(Transport::NONE).create().unwrap();
    let stats = ctx.stats().unwrap();
    assert_eq!((stats.io_workers, stats.arena_bytes, stats.transport), (0, TEST_ARENA_BYTES, Transport::NONE));
}

#[test]
fn flattened_shard_loads_its_range_of_the_box() {
    let (ctx, temp) = (solo_context(), TempDir::new());
    save_test_checkpoint(&ctx, &temp);
    let mut range = [0f32; 7];
    {
        let mut state = LoadState::new().unwrap();
        state
            .add_tensor(&Shard::new(WEIGHT, &WEIGHT_SHAPE).region(&[1, 0], &[3, 6]).flattened(4..11), &mut range)
            .unwrap();
        let options = LoadOptions::new().unexpected_keys(Strictness::Ignore);
        ctx.load(&mut state, temp.checkpoint(), &options).unwrap();
    }
    let box_values = weight_box(1..4, 0..6);
    assert_eq!(range, box_values[4..11]);
}

#[test]
fn object_without_buffer_is_kept_in_the_state() {
    let (ctx, temp) = (solo_context(), TempDir::new());
    let rng = b"generator state".to_vec();
    let mut save = SaveState::new().unwrap();
    save.add_object("rng", &[1], &[0], &rng).unwrap();
    ctx.save(&mut save, temp.checkpoint(), &SaveOptions::new()).unwrap().wait().unwrap();

    let mut load = LoadState::new().unwrap();
    load.add_object_owned("rng", &[1], &[0]).unwrap();
    ctx.load(&mut load, temp.checkpoint(), &LoadOptions::new()).unwrap();
    assert_eq!(load.object("rng", &[0]).unwrap(), &rng[..]);
    let error = load.object("rng", &[0, 0]).expect_err("the grid has one dimension");
    assert_eq!(error.status(), CKPT_E_INVALID_ARGUMENT, "{}", error);
}

#[test]
fn bool_tensor_round_trips_through_load_and_reader() {
    let (ctx, temp) = (solo_context(), TempDir::new());
    let flags = [true, false, false, true, true];
    let mut save = SaveState::new().unwrap();
    save.add_tensor(&Shard::new("mask", &[5]), &flags).unwrap();
    ctx.save(&mut save, temp.checkpoint(), &SaveOptions::new()).unwrap().wait().unwrap();

    let mut loaded = [false; 5];
    {
        let mut load = LoadState::new().unwrap();
        load.add_tensor(&Shard::new("mask", &[5]), &mut loaded).unwrap();
        ctx.load(&mut load, temp.checkpoint(), &LoadOptions::new()).unwrap();
    }
    assert_eq!(loaded, flags);
    assert_eq!(Reader::open(temp.checkpoint()).unwrap().read_tensor::<bool>("mask").unwrap(), flags);
}

#[test]
fn reader_refuses_a_buffer_of_another_dtype() {
    let (ctx, temp) = (solo_context(), TempDir::new());
    save_test_checkpoint(&ctx, &temp);
    let mut reader = Reader::open(temp.checkpoint()).unwrap();
    let mut wrong = [0i32; 24];
    let error = reader.read_box(WEIGHT, &[0, 0], &WEIGHT_SHAPE, &mut wrong).expect_err("F32 into i32");
    assert_eq!(error.status(), CKPT_E_MISMATCH, "{}", error);
    assert!(error.message().contains("F32") && error.message().contains(WEIGHT), "{}", error);
}

#[test]
fn reader_lists_common_entries_and_finds_tensors_by_key() {
    let (ctx, temp) = (solo_context(), TempDir::new());
    save_test_checkpoint(&ctx, &temp);
    let mut reader = Reader::open(temp.checkpoint()).unwrap();
    let commons: Vec<(String, Vec<u8>)> =
        reader.commons().unwrap().map(|entry| entry.map(|(k, v)| (k, v.to_vec())).unwrap()).collect();
    assert_eq!(commons, [(STEP_KEY.to_owned(), STEP.to_le_bytes().to_vec())]);
    assert_eq!(reader.find_tensor(BIAS).unwrap().shape, [BIAS_LEN]);
    assert_eq!(reader.find_tensor("absent").unwrap_err().status(), CKPT_E_NOT_FOUND);
    assert_eq!(reader.read_tensor::<f64>(BIAS).unwrap(), bias());
}

#[test]
fn log_callback_receives_the_unexpected_keys_warning() {
    let lines: Arc<Mutex<Vec<(LogLevel, String)>>> = Arc::default();
    let sink = Arc::clone(&lines);
    let ctx = solo_builder()
        .log(move |level, message| sink.lock().unwrap().push((level, message.to_owned())))
        .create()
        .unwrap();
    let temp = TempDir::new();
    save_test_checkpoint(&ctx, &temp);
    let mut weight = vec![0f32; 24];
    let mut state = LoadState::new().unwrap();
    state.add_tensor(&Shard::new(WEIGHT, &WEIGHT_SHAPE), &mut weight).unwrap();
    ctx.load(&mut state, temp.checkpoint(), &LoadOptions::new().unexpected_keys(Strictness::Log)).unwrap();
    let lines = lines.lock().unwrap();
    assert!(lines.iter().any(|(level, line)| *level == LogLevel::WARNING && line.contains(BIAS)), "{:?}", *lines);
}

#[test]
fn panicking_log_callback_does_not_unwind_into_the_library() {
    let called = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&called);
    let ctx = solo_builder()
        .log(move |_, _| {
            flag.store(true, Ordering::SeqCst);
            panic!("logger failed")
        })
        .create()
        .unwrap();
    let temp = TempDir::new();
    save_test_checkpoint(&ctx, &temp);
    let mut weight = vec![0f32; 24];
    let mut state = LoadState::new().unwrap();
    state.add_tensor(&Shard::new(WEIGHT, &WEIGHT_SHAPE), &mut weight).unwrap();
    ctx.load(&mut state, temp.checkpoint(), &LoadOptions::new().unexpected_keys(Strictness::Log)).unwrap();
    assert!(called.load(Ordering::SeqCst), "the warning went to the callback");
    assert_eq!(weight, weight_box(0..4, 0..6));
}

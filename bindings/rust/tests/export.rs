//! Export to safetensors: the files are read back by hand (the crate has no JSON parser, and needs none): the
//! 8-byte little-endian header length, the header's entries as the library writes them (compact JSON), and the
//! data bytes each entry's offsets point at.

mod common;

use std::fs;
use std::path::Path;

use ckpt::sys::CKPT_E_NOT_FOUND;
use ckpt::{export, DType, ErrorKind, ExportOptions, SaveOptions, SaveState, Shard};
use common::*;

/// safetensors aligns nothing, but ckpt starts every file's data at a multiple of 4096 bytes (for O_DIRECT).
const DATA_ALIGNMENT: usize = 4096;

/// Saves "weight" as two chunks (rows 0-1 and rows 2-3) and "bias" whole, from one rank.
fn save_two_tensors(path: &Path) {
    let ctx = solo_builder().create().expect("single-rank context");
    let (top, bottom) = (weight_box(0..2, 0..6), weight_box(2..4, 0..6));
    let bias = bias();
    let mut state = SaveState::new().unwrap();
    state.add_tensor(&Shard::new(WEIGHT, &WEIGHT_SHAPE).region(&[0, 0], &[2, 6]), &top).unwrap();
    state.add_tensor(&Shard::new(WEIGHT, &WEIGHT_SHAPE).region(&[2, 0], &[2, 6]), &bottom).unwrap();
    state.add_tensor(&Shard::new(BIAS, &[BIAS_LEN]), &bias).unwrap();
    ctx.save(&mut state, path, &SaveOptions::new()).unwrap().wait().unwrap();
}

/// A safetensors file split into its JSON header and its data.
struct Safetensors {
    header: String,
    data: Vec<u8>,
}

fn read_safetensors(path: &Path) -> Safetensors {
    let bytes = fs::read(path).unwrap_or_else(|e| panic!("{}: {}", path.display(), e));
    let length = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let data_start = 8 + length;
    assert_eq!(data_start % DATA_ALIGNMENT, 0, "the data of {} starts at {}", path.display(), data_start);
    let header = String::from_utf8(bytes[8..data_start].to_vec()).expect("the header is UTF-8");
    Safetensors { header: header.trim_end_matches(' ').to_owned(), data: bytes[data_start..].to_vec() }
}

impl Safetensors {
    /// The data of tensor `key`, after checking that its entry names `dtype` and `shape` (JSON text, "[4,6]").
    fn tensor(&self, key: &str, dtype: &str, shape: &str) -> &[u8] {
        let entry = format!("\"{}\":{{\"dtype\":\"{}\",\"shape\":{},\"data_offsets\":[", key, dtype, shape);
        let at = self.header.find(&entry).unwrap_or_else(|| panic!("no {} in {}", entry, self.header));
        let (offsets, _) = self.header[at + entry.len()..].split_once(']').unwrap();
        let (begin, end) = offsets.split_once(',').unwrap();
        &self.data[begin.parse::<usize>().unwrap()..end.parse::<usize>().unwrap()]
    }
}

fn le_bytes_f32(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|value| value.to_le_bytes()).collect()
}

#[test]
fn export_writes_each_tensor_whole_with_its_dtype_shape_and_bytes() {
    let temp = TempDir::new();
    save_two_tensors(&temp.checkpoint());
    let out = temp.path().join("out.safetensors");
    export(temp.checkpoint(), &out, &ExportOptions::new()).unwrap();

    let file = read_safetensors(&out);
    assert!(file.header.starts_with("{\"__metadata__\":{\"format\":\"pt\"}"), "{}", file.header);
    let weight = le_bytes_f32(&weight_box(0..4, 0..6));
    assert_eq!(file.tensor(WEIGHT, "F32", "[4,6]"), &weight[..]);
    let bias: Vec<u8> = bias().iter().flat_map(|value| value.to_le_bytes()).collect();
    assert_eq!(file.tensor(BIAS, "F64", "[5]"), &bias[..]);
    assert_eq!(file.data.len(), weight.len() + bias.len());
}

#[test]
fn export_converts_f32_to_bf16_on_request_halving_the_data() {
    let temp = TempDir::new();
    save_two_tensors(&temp.checkpoint());
    let out = temp.path().join("out.safetensors");
    export(temp.checkpoint(), &out, &ExportOptions::new().keys(&[WEIGHT]).dtype(DType::BF16)).unwrap();

    let file = read_safetensors(&out);
    assert!(!file.header.contains(BIAS), "only the key asked for: {}", file.header);
    // Every weight value has at most 8 significant bits, so its BF16 is exactly the top half of its F32 bits.
    let bf16: Vec<u8> =
        weight_box(0..4, 0..6).iter().flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes()).collect();
    assert_eq!(file.tensor(WEIGHT, "BF16", "[4,6]"), &bf16[..]);
    assert_eq!(file.data.len(), 4 * 6 * 2);
}

#[test]
fn export_to_a_directory_shards_by_max_shard_bytes_with_an_index() {
    let temp = TempDir::new();
    save_two_tensors(&temp.checkpoint());
    let out = temp.path().join("hf");
    export(temp.checkpoint(), &out, &ExportOptions::new().max_shard_bytes(64)).unwrap();

    // 40 bytes of bias and 96 of weight: more than 64 bytes together, so a file each, in key order.
    let first = read_safetensors(&out.join("model-00001-of-00002.safetensors"));
    assert_eq!(first.tensor(BIAS, "F64", "[5]").len(), 40);
    let second = read_safetensors(&out.join("model-00002-of-00002.safetensors"));
    assert_eq!(second.tensor(WEIGHT, "F32", "[4,6]"), &le_bytes_f32(&weight_box(0..4, 0..6))[..]);
    let index = fs::read_to_string(out.join("model.safetensors.index.json")).unwrap();
    assert!(index.contains("\"weight\": \"model-00002-of-00002.safetensors\""), "{}", index);
}

#[test]
fn export_of_a_key_the_checkpoint_lacks_fails_with_not_found_and_writes_nothing() {
    let temp = TempDir::new();
    save_two_tensors(&temp.checkpoint());
    let out = temp.path().join("out.safetensors");
    let error = export(temp.checkpoint(), &out, &ExportOptions::new().keys(&["absent"])).expect_err("no such key");
    assert_eq!((error.status(), error.kind()), (CKPT_E_NOT_FOUND, ErrorKind::NotFound), "{}", error);
    assert!(error.message().contains("absent"), "{}", error);
    assert!(!out.exists());
}

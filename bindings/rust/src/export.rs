//! Export of a committed checkpoint to safetensors, from any process, without a context or any collective.

use std::ffi::CString;
use std::os::raw::c_char;
use std::path::Path;

use crate::dtype::DType;
use crate::error::{call, Result};
use crate::save::c_path;
use crate::state::c_key;
use crate::sys;

/// Options of an [`export`]. Settings left alone keep the library's defaults: every tensor, in its stored dtype,
/// in files of at most 5 GB, all written by this process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportOptions {
    max_shard_bytes: Option<u64>,
    keys: Vec<String>,
    part: Option<(u32, u32)>,
    dtype: Option<DType>,
}

impl ExportOptions {
    pub fn new() -> Self {
        ExportOptions::default()
    }

    /// When exporting to a directory, each file holds at most `bytes` of tensor data (a larger tensor gets a file
    /// of its own); 0 puts every tensor in model.safetensors. A `.safetensors` output is always one file.
    pub fn max_shard_bytes(mut self, bytes: u64) -> Self {
        self.max_shard_bytes = Some(bytes);
        self
    }

    /// Exports only these tensors (`CKPT_E_NOT_FOUND` names one the checkpoint lacks). No keys: every tensor.
    pub fn keys<I>(mut self, keys: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.keys = keys.into_iter().map(|key| key.as_ref().to_owned()).collect();
        self
    }

    /// Shares the export among `count` processes, this one being number `index`: each plans the same files and
    /// writes those whose number is `index` modulo `count`; part 0 also writes the index.
    pub fn part(mut self, index: u32, count: u32) -> Self {
        self.part = Some((index, count));
        self
    }

    /// Converts the floating tensors to `dtype` (F16, BF16, F32 or F64; rounded to nearest even), the others
    /// staying as stored. `CKPT_E_INVALID_ARGUMENT` for a dtype that is not floating.
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = Some(dtype);
        self
    }
}

/// Exports the tensors of the committed checkpoint at `checkpoint` to safetensors, each whole whatever chunks
/// saved it. An `out` ending in `.safetensors` is one file; otherwise it is a directory (created if needed) that
/// receives model.safetensors, or numbered files and model.safetensors.index.json once the data exceeds
/// [`max_shard_bytes`](ExportOptions::max_shard_bytes). Every file's header carries the checkpoint's user
/// metadata; objects and common entries are left out. An existing file is never replaced
/// (`CKPT_E_ALREADY_EXISTS`); every block read is checked against its checksum (`CKPT_E_CORRUPT`);
/// `CKPT_E_UNSUPPORTED` for a tensor whose dtype safetensors cannot name.
pub fn export(checkpoint: impl AsRef<Path>, out: impl AsRef<Path>, options: &ExportOptions) -> Result<()> {
    let c_checkpoint = c_path(checkpoint.as_ref())?;
    let c_out = c_path(out.as_ref())?;
    let keys = options.keys.iter().map(|key| c_key(key)).collect::<Result<Vec<CString>>>()?;
    let key_pointers: Vec<*const c_char> = keys.iter().map(|key| key.as_ptr()).collect();
    let mut opts = sys::ckpt_export_options::init();
    if let Some(bytes) = options.max_shard_bytes {
        opts.max_shard_bytes = bytes;
    }
    if !key_pointers.is_empty() {
        opts.keys = key_pointers.as_ptr();
        opts.key_count = key_pointers.len() as u64;
    }
    if let Some((index, count)) = options.part {
        (opts.part_index, opts.part_count) = (index, count);
    }
    if let Some(dtype) = options.dtype {
        opts.dtype = dtype.0;
    }
    // SAFETY: the paths, the keys and the array of their pointers outlive the call, which only reads them.
    call(|err| unsafe { sys::ckpt_export(c_checkpoint.as_ptr(), c_out.as_ptr(), &opts, err) })
}

//! Reading a committed checkpoint from any process, without a context or any collective.

use std::cmp::Ordering;
use std::ffi::CStr;
use std::mem;
use std::os::raw::c_void;
use std::path::Path;
use std::ptr::{self, NonNull};

use crate::cmem::{bytes_or_empty, string_from_c};
use crate::dtype::{DType, Element};
use crate::error::{call, Error, Result};
use crate::save::c_path;
use crate::state::c_key;
use crate::sys;

/// Summary of a checkpoint.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointInfo {
    pub format_major: u32,
    pub format_minor: u32,
    /// Ranks that saved it.
    pub world_size: u32,
    pub node_count: u32,
    pub tensor_count: u64,
    pub object_count: u64,
    pub common_count: u64,
    pub metadata_count: u64,
    pub file_count: u64,
    /// Bytes of tensor and object data.
    pub total_bytes: u64,
}

/// One global tensor of a checkpoint.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Position in the checkpoint's key order.
    pub index: u64,
    pub key: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub chunk_count: u64,
}

impl TensorInfo {
    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// One stored box of a tensor and where its bytes lie.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkInfo {
    pub offset: Vec<u64>,
    pub shape: Vec<u64>,
    /// Relative to the checkpoint directory.
    pub file: String,
    pub file_offset: u64,
    pub byte_length: u64,
}

/// An open checkpoint. `Send` (ckpt.h lets readers move between threads) but not `Sync`.
pub struct Reader {
    raw: NonNull<sys::ckpt_reader_t>,
}

// SAFETY: ckpt.h: "Error objects and readers may move between threads"; one handle is never used by two threads
// at once because Reader is not Sync.
unsafe impl Send for Reader {}

impl Reader {
    /// Opens a committed checkpoint and validates its manifest: `CKPT_E_NOT_FOUND`, `CKPT_E_CORRUPT`,
    /// `CKPT_E_VERSION`.
    pub fn open(path: impl AsRef<Path>) -> Result<Reader> {
        let c_path = c_path(path.as_ref())?;
        let mut raw = ptr::null_mut();
        // SAFETY: valid path and out pointer.
        call(|err| unsafe { sys::ckpt_reader_open(c_path.as_ptr(), &mut raw, err) })?;
        let raw = NonNull::new(raw).ok_or_else(|| Error::new(sys::CKPT_E_INTERNAL, "ckpt_reader_open gave NULL"))?;
        Ok(Reader { raw })
    }

    pub fn info(&self) -> Result<CheckpointInfo> {
        let mut info = sys::ckpt_checkpoint_info::init();
        // SAFETY: a live reader and an initialised info struct.
        call(|err| unsafe { sys::ckpt_reader_info(self.raw.as_ptr(), &mut info, err) })?;
        Ok(CheckpointInfo {
            format_major: info.format_major,
            format_minor: info.format_minor,
            world_size: info.world_size,
            node_count: info.node_count,
            tensor_count: info.tensor_count,
            object_count: info.object_count,
            common_count: info.common_count,
            metadata_count: info.metadata_count,
            file_count: info.file_count,
            total_bytes: info.total_bytes,
        })
    }

    /// The tensor at `index` in key order; `CKPT_E_NOT_FOUND` past the end.
    pub fn tensor(&self, index: u64) -> Result<TensorInfo> {
        let info = self.raw_tensor(index)?;
        let ndim = (info.ndim as usize).min(sys::CKPT_MAX_NDIM);
        Ok(TensorInfo {
            index,
            // SAFETY: the key is owned by the reader, which `&self` keeps alive.
            key: unsafe { string_from_c(info.key) },
            dtype: DType(info.dtype),
            shape: info.shape[..ndim].to_vec(),
            chunk_count: info.chunk_count,
        })
    }

    /// Every tensor, in key order.
    pub fn tensors(&self) -> Result<Tensors<'_>> {
        let count = self.info()?.tensor_count;
        Ok(Tensors { reader: self, next: 0, count })
    }

    /// The tensor stored under `key`; `CKPT_E_NOT_FOUND` if absent.
    pub fn find_tensor(&self, key: &str) -> Result<TensorInfo> {
        let (mut low, mut high) = (0, self.info()?.tensor_count);
        // Tensors are listed in key order (byte-wise), so a binary search needs log2(n) library calls.
        while low < high {
            let middle = low + (high - low) / 2;
            let info = self.raw_tensor(middle)?;
            // SAFETY: the key is NULL or a NUL-terminated string owned by the reader.
            let stored = if info.key.is_null() { &[][..] } else { unsafe { CStr::from_ptr(info.key) }.to_bytes() };
            match stored.cmp(key.as_bytes()) {
                Ordering::Less => low = middle + 1,
                Ordering::Greater => high = middle,
                Ordering::Equal => return self.tensor(middle),
            }
        }
        Err(Error::new(sys::CKPT_E_NOT_FOUND, format!("tensor '{}' is not in the checkpoint", key)))
    }

    /// Every stored chunk of `tensor`.
    pub fn chunks<'r>(&'r self, tensor: &TensorInfo) -> Chunks<'r> {
        Chunks { reader: self, tensor_index: tensor.index, next: 0, count: tensor.chunk_count }
    }

    pub fn chunk(&self, tensor_index: u64, chunk_index: u64) -> Result<ChunkInfo> {
        let mut info = sys::ckpt_chunk_info::init();
        // SAFETY: a live reader and an initialised info struct.
        call(|err| unsafe { sys::ckpt_reader_chunk(self.raw.as_ptr(), tensor_index, chunk_index, &mut info, err) })?;
        let ndim = (info.ndim as usize).min(sys::CKPT_MAX_NDIM);
        Ok(ChunkInfo {
            offset: info.offset[..ndim].to_vec(),
            shape: info.shape[..ndim].to_vec(),
            // SAFETY: the file name is owned by the reader, which `&self` keeps alive.
            file: unsafe { string_from_c(info.file) },
            file_offset: info.file_offset,
            byte_length: info.byte_length,
        })
    }

    /// Reads the box (`offset`, `shape`) of tensor `key` into `out` (row-major), checking every block's checksum.
    /// `CKPT_E_MISMATCH` if the tensor's dtype is not `T`'s; `CKPT_E_INVALID_ARGUMENT` for a box out of bounds or
    /// an `out` of the wrong length.
    pub fn read_box<T: Element>(&mut self, key: &str, offset: &[u64], shape: &[u64], out: &mut [T]) -> Result<()> {
        if offset.len() != shape.len() {
            return Err(Error::invalid_argument(format!(
                "tensor '{}': the box offset has {} dimensions, its shape {}",
                key,
                offset.len(),
                shape.len()
            )));
        }
        let stored = self.find_tensor(key)?.dtype;
        if stored != T::DTYPE {
            return Err(Error::new(
                sys::CKPT_E_MISMATCH,
                format!("tensor '{}' holds {} elements, the buffer {}", key, stored, T::DTYPE),
            ));
        }
        let c_key = c_key(key)?;
        let ndim = u32::try_from(offset.len()).map_err(|_| Error::invalid_argument("too many dimensions"))?;
        let bytes = mem::size_of_val(out) as u64;
        // SAFETY: the box arrays have ndim values; `out` is exclusively borrowed for the call and has `bytes` bytes.
        let outcome = call(|err| unsafe {
            sys::ckpt_reader_read(
                self.raw.as_ptr(),
                c_key.as_ptr(),
                ndim,
                offset.as_ptr(),
                shape.as_ptr(),
                out.as_mut_ptr() as *mut c_void,
                bytes,
                err,
            )
        });
        // SAFETY: the library wrote raw bytes into `out`, not read since.
        unsafe { T::repair_raw(out.as_mut_ptr(), out.len()) };
        outcome
    }

    /// Reads the whole tensor `key`.
    pub fn read_tensor<T: Element>(&mut self, key: &str) -> Result<Vec<T>> {
        let info = self.find_tensor(key)?;
        let elements = usize::try_from(info.elements())
            .map_err(|_| Error::new(sys::CKPT_E_NO_MEMORY, format!("tensor '{}' does not fit in memory", key)))?;
        let mut values = vec![T::default(); elements];
        let offset = vec![0; info.shape.len()];
        self.read_box(key, &offset, &info.shape, &mut values)?;
        Ok(values)
    }

    /// The common bytes saved under `key`; `CKPT_E_NOT_FOUND` if absent.
    pub fn common(&self, key: &str) -> Result<&[u8]> {
        let c_key = c_key(key)?;
        let (mut data, mut size) = (ptr::null(), 0u64);
        // SAFETY: valid out pointers; the bytes are owned by the reader, which the returned borrow keeps alive.
        call(|err| unsafe { sys::ckpt_reader_common(self.raw.as_ptr(), c_key.as_ptr(), &mut data, &mut size, err) })?;
        Ok(unsafe { bytes_or_empty(data as *const u8, size as usize) })
    }

    /// Every common entry, in key order.
    pub fn commons(&self) -> Result<Commons<'_>> {
        let count = self.info()?.common_count;
        Ok(Commons { reader: self, next: 0, count })
    }

    fn common_at(&self, index: u64) -> Result<(String, &[u8])> {
        let (mut key, mut data, mut size) = (ptr::null(), ptr::null(), 0u64);
        // SAFETY: valid out pointers; key and bytes are owned by the reader, kept alive by the returned borrow.
        call(|err| unsafe {
            sys::ckpt_reader_common_at(self.raw.as_ptr(), index, &mut key, &mut data, &mut size, err)
        })?;
        Ok(unsafe { (string_from_c(key), bytes_or_empty(data as *const u8, size as usize)) })
    }

    /// The user metadata value saved under `key`; `CKPT_E_NOT_FOUND` if absent.
    pub fn metadata(&self, key: &str) -> Result<String> {
        let c_key = c_key(key)?;
        let mut value = ptr::null();
        // SAFETY: valid out pointer; the value is owned by the reader and copied at once.
        call(|err| unsafe { sys::ckpt_reader_metadata(self.raw.as_ptr(), c_key.as_ptr(), &mut value, err) })?;
        Ok(unsafe { string_from_c(value) })
    }

    /// Every user metadata entry, in the order saved.
    pub fn metadata_entries(&self) -> Result<Vec<(String, String)>> {
        (0..self.info()?.metadata_count)
            .map(|index| {
                let (mut key, mut value) = (ptr::null(), ptr::null());
                // SAFETY: valid out pointers; key and value are owned by the reader and copied at once.
                call(|err| unsafe {
                    sys::ckpt_reader_metadata_at(self.raw.as_ptr(), index, &mut key, &mut value, err)
                })?;
                Ok(unsafe { (string_from_c(key), string_from_c(value)) })
            })
            .collect()
    }

    /// Reads every chunk of every tensor and object and checks every checksum and file size; `CKPT_E_CORRUPT`
    /// names the first tensor and file that fail.
    pub fn verify(&mut self) -> Result<()> {
        // SAFETY: a live reader.
        call(|err| unsafe { sys::ckpt_reader_verify(self.raw.as_ptr(), err) })
    }

    fn raw_tensor(&self, index: u64) -> Result<sys::ckpt_tensor_info> {
        let mut info = sys::ckpt_tensor_info::init();
        // SAFETY: a live reader and an initialised info struct.
        call(|err| unsafe { sys::ckpt_reader_tensor(self.raw.as_ptr(), index, &mut info, err) })?;
        Ok(info)
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        // SAFETY: created by ckpt_reader_open and freed once.
        unsafe { sys::ckpt_reader_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader").finish_non_exhaustive()
    }
}

/// Iterator over a checkpoint's tensors; see [`Reader::tensors`].
pub struct Tensors<'r> {
    reader: &'r Reader,
    next: u64,
    count: u64,
}

impl Iterator for Tensors<'_> {
    type Item = Result<TensorInfo>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.count {
            return None;
        }
        self.next += 1;
        Some(self.reader.tensor(self.next - 1))
    }
}

/// Iterator over a tensor's chunks; see [`Reader::chunks`].
pub struct Chunks<'r> {
    reader: &'r Reader,
    tensor_index: u64,
    next: u64,
    count: u64,
}

impl Iterator for Chunks<'_> {
    type Item = Result<ChunkInfo>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.count {
            return None;
        }
        self.next += 1;
        Some(self.reader.chunk(self.tensor_index, self.next - 1))
    }
}

/// Iterator over a checkpoint's common entries as (key, bytes); see [`Reader::commons`].
pub struct Commons<'r> {
    reader: &'r Reader,
    next: u64,
    count: u64,
}

impl<'r> Iterator for Commons<'r> {
    type Item = Result<(String, &'r [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.count {
            return None;
        }
        self.next += 1;
        Some(self.reader.common_at(self.next - 1))
    }
}

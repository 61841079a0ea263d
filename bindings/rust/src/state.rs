//! What a rank registers for a save ([`SaveState`]) or asks for in a load ([`LoadState`]).
//!
//! A state keeps raw pointers to the registered buffers until the save or load that uses it, so it borrows them
//! for its lifetime `'a`: shared borrows for a save (the library only reads them), exclusive borrows for a load
//! (the library writes them). Two types rather than one make it impossible to load into a shared borrow.

use std::collections::HashMap;
use std::ffi::CString;
use std::marker::PhantomData;
use std::mem;
use std::ops::Range;
use std::os::raw::c_void;
use std::ptr::{self, NonNull};

use crate::cmem::bytes_or_empty;
use crate::dtype::{DType, Element};
use crate::error::{call, Error, Result};
use crate::sys;

/// Where one shard of a global tensor sits: the tensor's key and global shape, the box this rank holds (the
/// whole tensor unless [`region`](Self::region) says otherwise), an optional replica id and flattened range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    key: String,
    global_shape: Vec<u64>,
    global_offset: Vec<u64>,
    local_shape: Vec<u64>,
    replica_id: Vec<u32>,
    flat_range: Option<Range<u64>>,
    allow_shape_mismatch: bool,
    compress: bool,
}

impl Shard {
    /// The whole tensor `key` of the given global shape (an empty shape is a scalar).
    pub fn new(key: impl Into<String>, global_shape: &[u64]) -> Self {
        Shard {
            key: key.into(),
            global_shape: global_shape.to_vec(),
            global_offset: vec![0; global_shape.len()],
            local_shape: global_shape.to_vec(),
            replica_id: Vec::new(),
            flat_range: None,
            allow_shape_mismatch: false,
            compress: false,
        }
    }

    /// The box this rank holds: its first element's coordinates and its extents.
    pub fn region(mut self, offset: &[u64], shape: &[u64]) -> Self {
        self.global_offset = offset.to_vec();
        self.local_shape = shape.to_vec();
        self
    }

    /// Which replica of the box this is (data parallelism); all zeros marks the main replica, which is the one
    /// written.
    pub fn replica(mut self, id: &[u32]) -> Self {
        self.replica_id = id.to_vec();
        self
    }

    /// Holds only the row-major elements `range` of the box, as a distributed optimizer does.
    pub fn flattened(mut self, range: Range<u64>) -> Self {
        self.flat_range = Some(range);
        self
    }

    /// Load only: the checkpoint's global shape may differ; missing elements are zeroed, extra ones dropped.
    pub fn allow_shape_mismatch(mut self) -> Self {
        self.allow_shape_mismatch = true;
        self
    }

    /// Save only: this tensor's bytes are stored compressed, as [`SaveOptions::compress`](crate::SaveOptions::compress)
    /// stores every tensor's (`sys::CKPT_SHARD_COMPRESS`), in any staged save to a file system; a save in place, to
    /// a memory tier or to object storage stores them as they are. The rank that writes a box decides by its own
    /// shard's flag.
    pub fn compress(mut self) -> Self {
        self.compress = true;
        self
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// How many elements the shard's buffer must hold.
    pub fn elements(&self) -> u64 {
        match &self.flat_range {
            Some(range) => range.end.saturating_sub(range.start),
            None => self.local_shape.iter().product(),
        }
    }

    /// Registers this shard over `bytes` bytes of `dtype` elements at `data`.
    fn register(&self, state: &RawState, dtype: DType, data: *mut c_void, bytes: usize) -> Result<()> {
        let key = c_key(&self.key)?;
        let ndim = self.global_shape.len();
        if self.global_offset.len() != ndim || self.local_shape.len() != ndim {
            return Err(Error::invalid_argument(format!(
                "tensor '{}': global shape, offset and local shape have {}, {} and {} dimensions",
                self.key,
                ndim,
                self.global_offset.len(),
                self.local_shape.len()
            )));
        }
        let mut raw = sys::ckpt_tensor_shard::init();
        raw.key = key.as_ptr();
        raw.dtype = dtype.0;
        raw.ndim = count_u32(ndim, &self.key)?;
        raw.global_shape = self.global_shape.as_ptr();
        raw.local_shape = self.local_shape.as_ptr();
        raw.global_offset = self.global_offset.as_ptr();
        raw.replica_ndim = count_u32(self.replica_id.len(), &self.key)?;
        raw.replica_id = self.replica_id.as_ptr();
        if let Some(range) = &self.flat_range {
            raw.flags |= sys::CKPT_SHARD_FLATTENED;
            raw.flat_start = range.start;
            raw.flat_end = range.end;
        }
        if self.allow_shape_mismatch {
            raw.flags |= sys::CKPT_SHARD_ALLOW_SHAPE_MISMATCH;
        }
        if self.compress {
            raw.flags |= sys::CKPT_SHARD_COMPRESS;
        }
        raw.data = data;
        raw.data_size = bytes as u64;
        // SAFETY: every pointer in `raw` is valid for the call (the library copies the arrays); the caller
        // guarantees that `data` stays valid for the state's lifetime.
        call(|err| unsafe { sys::ckpt_state_add_tensor(state.as_ptr(), &raw, err) })
    }
}

pub(crate) fn c_key(key: &str) -> Result<CString> {
    CString::new(key).map_err(|_| Error::invalid_argument(format!("key {:?} contains a NUL byte", key)))
}

fn count_u32(count: usize, key: &str) -> Result<u32> {
    u32::try_from(count).map_err(|_| Error::invalid_argument(format!("'{}': {} dimensions", key, count)))
}

/// The grid coordinates of an object shard; both slices have the grid's number of dimensions.
fn check_grid(key: &str, grid_shape: &[u64], grid_index: &[u64]) -> Result<u32> {
    if grid_shape.len() != grid_index.len() {
        return Err(Error::invalid_argument(format!(
            "object '{}': grid shape has {} dimensions, grid index {}",
            key,
            grid_shape.len(),
            grid_index.len()
        )));
    }
    count_u32(grid_shape.len(), key)
}

/// The C state handle, freed on drop.
struct RawState(NonNull<sys::ckpt_state_t>);

impl RawState {
    fn new() -> Result<Self> {
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out pointer.
        call(|err| unsafe { sys::ckpt_state_create(&mut raw, err) })?;
        NonNull::new(raw).map(RawState).ok_or_else(|| Error::new(sys::CKPT_E_INTERNAL, "ckpt_state_create gave NULL"))
    }

    fn as_ptr(&self) -> *mut sys::ckpt_state_t {
        self.0.as_ptr()
    }

    fn add_object(
        &self,
        key: &str,
        grid_shape: &[u64],
        grid_index: &[u64],
        data: *mut c_void,
        size: usize,
    ) -> Result<()> {
        let grid_ndim = check_grid(key, grid_shape, grid_index)?;
        let c_key = c_key(key)?;
        // SAFETY: the grid arrays have grid_ndim values; the caller guarantees `data` for the state's lifetime.
        call(|err| unsafe {
            sys::ckpt_state_add_object(
                self.as_ptr(),
                c_key.as_ptr(),
                grid_ndim,
                grid_shape.as_ptr(),
                grid_index.as_ptr(),
                data,
                size as u64,
                err,
            )
        })
    }
}

impl Drop for RawState {
    fn drop(&mut self) {
        // SAFETY: created by ckpt_state_create and freed once.
        unsafe { sys::ckpt_state_free(self.0.as_ptr()) }
    }
}

/// What this rank holds for a save. Borrows the registered tensor and object buffers for `'a`; common bytes are
/// copied when added. Once [`Context::save`](crate::Context::save) returns, the library no longer reads them, so
/// the state can be dropped and the buffers modified even while the save request is still running.
pub struct SaveState<'a> {
    raw: RawState,
    _buffers: PhantomData<&'a [u8]>,
}

// SAFETY: ckpt.h allows a state to move between threads; the borrowed buffers are shared slices of Sync types.
unsafe impl Send for SaveState<'_> {}

impl<'a> SaveState<'a> {
    pub fn new() -> Result<Self> {
        Ok(SaveState { raw: RawState::new()?, _buffers: PhantomData })
    }

    /// Registers a shard whose elements are `data` (row-major over the box, or the flattened range). Checks what
    /// can be checked locally: `CKPT_E_INVALID_ARGUMENT` names the key (box out of bounds, wrong length, ...).
    pub fn add_tensor<T: Element>(&mut self, shard: &Shard, data: &'a [T]) -> Result<()> {
        shard.register(&self.raw, T::DTYPE, data.as_ptr() as *mut c_void, mem::size_of_val(data))
    }

    /// Registers opaque bytes as the shard `grid_index` of the object grid `grid_shape` (empty slices for an
    /// object that is not sharded).
    pub fn add_object(&mut self, key: &str, grid_shape: &[u64], grid_index: &[u64], data: &'a [u8]) -> Result<()> {
        self.raw.add_object(key, grid_shape, grid_index, data.as_ptr() as *mut c_void, data.len())
    }

    /// Registers replicated bytes (config, step, RNG state), copied now and saved once, from rank 0.
    pub fn add_common(&mut self, key: &str, data: &[u8]) -> Result<()> {
        let c_key = c_key(key)?;
        // SAFETY: `data` is valid for the call, which copies it.
        call(|err| unsafe {
            sys::ckpt_state_add_common(
                self.raw.as_ptr(),
                c_key.as_ptr(),
                data.as_ptr() as *const c_void,
                data.len() as u64,
                err,
            )
        })
    }

    pub(crate) fn as_ptr(&mut self) -> *mut sys::ckpt_state_t {
        self.raw.as_ptr()
    }
}

/// A buffer whose raw contents must be made valid for its Rust type after the library wrote into it.
struct Repair {
    data: *mut u8,
    len: usize,
    apply: unsafe fn(*mut u8, usize),
}

/// Erases the element type of [`Element::repair_raw`] so that repairs of any type fit in one list.
unsafe fn repair_as<T: Element>(data: *mut u8, len: usize) {
    T::repair_raw(data as *mut T, len)
}

/// What this rank asks for in a load. Borrows the registered buffers exclusively for `'a`; after the load, the
/// checkpoint's common entries and the objects registered without a buffer are read from the state.
pub struct LoadState<'a> {
    raw: RawState,
    repairs: Vec<Repair>,
    owned_object_grids: HashMap<String, usize>,
    _buffers: PhantomData<&'a mut [u8]>,
}

// SAFETY: ckpt.h allows a state to move between threads; the borrowed buffers are exclusive slices of Send types.
unsafe impl Send for LoadState<'_> {}

impl<'a> LoadState<'a> {
    pub fn new() -> Result<Self> {
        Ok(LoadState {
            raw: RawState::new()?,
            repairs: Vec::new(),
            owned_object_grids: HashMap::new(),
            _buffers: PhantomData,
        })
    }

    /// Asks for a shard to be filled into `data` (row-major over the box, or the flattened range), whatever
    /// layout saved the tensor.
    pub fn add_tensor<T: Element>(&mut self, shard: &Shard, data: &'a mut [T]) -> Result<()> {
        let bytes = mem::size_of_val(data);
        let ptr = data.as_mut_ptr();
        shard.register(&self.raw, T::DTYPE, ptr as *mut c_void, bytes)?;
        if T::DTYPE == DType::BOOL {
            self.repairs.push(Repair { data: ptr as *mut u8, len: data.len(), apply: repair_as::<T> });
        }
        Ok(())
    }

    /// Asks for an object shard to be filled into `data`, which must have exactly the saved size.
    pub fn add_object(&mut self, key: &str, grid_shape: &[u64], grid_index: &[u64], data: &'a mut [u8]) -> Result<()> {
        self.raw.add_object(key, grid_shape, grid_index, data.as_mut_ptr() as *mut c_void, data.len())
    }

    /// Asks for an object shard of any size, kept in the state: read it with [`object`](Self::object).
    pub fn add_object_owned(&mut self, key: &str, grid_shape: &[u64], grid_index: &[u64]) -> Result<()> {
        self.raw.add_object(key, grid_shape, grid_index, ptr::null_mut(), 0)?;
        self.owned_object_grids.insert(key.to_owned(), grid_shape.len());
        Ok(())
    }

    /// After a load: the common bytes saved under `key`; `CKPT_E_NOT_FOUND` if absent.
    pub fn common(&self, key: &str) -> Result<&[u8]> {
        let c_key = c_key(key)?;
        let (mut data, mut size) = (ptr::null(), 0u64);
        // SAFETY: valid out pointers; the bytes are owned by the state, which `&self` keeps alive.
        call(|err| unsafe { sys::ckpt_state_common(self.raw.as_ptr(), c_key.as_ptr(), &mut data, &mut size, err) })?;
        Ok(unsafe { bytes_or_empty(data as *const u8, size as usize) })
    }

    /// After a load: the bytes of an object registered with [`add_object_owned`](Self::add_object_owned).
    pub fn object(&self, key: &str, grid_index: &[u64]) -> Result<&[u8]> {
        self.check_owned_object_grid(key, grid_index)?;
        let c_key = c_key(key)?;
        let (mut data, mut size) = (ptr::null(), 0u64);
        // SAFETY: as for common(); `grid_index` has as many coordinates as the object's grid.
        call(|err| unsafe {
            sys::ckpt_state_object(self.raw.as_ptr(), c_key.as_ptr(), grid_index.as_ptr(), &mut data, &mut size, err)
        })?;
        Ok(unsafe { bytes_or_empty(data as *const u8, size as usize) })
    }

    /// The library reads as many grid coordinates as the object's grid has, so an index of another length, or
    /// for an object it never registered, must not reach it.
    fn check_owned_object_grid(&self, key: &str, grid_index: &[u64]) -> Result<()> {
        match self.owned_object_grids.get(key) {
            None => Err(Error::new(
                sys::CKPT_E_NOT_FOUND,
                format!("object '{}' was not registered with add_object_owned", key),
            )),
            Some(&ndim) if ndim != grid_index.len() => Err(Error::invalid_argument(format!(
                "object '{}': grid index has {} coordinates, its grid {} dimensions",
                key,
                grid_index.len(),
                ndim
            ))),
            Some(_) => Ok(()),
        }
    }

    pub(crate) fn as_ptr(&mut self) -> *mut sys::ckpt_state_t {
        self.raw.as_ptr()
    }

    /// Makes every registered buffer valid for its element type after the library wrote into it (fully or, after
    /// a failed load, partly).
    pub(crate) fn repair_buffers(&mut self) {
        for repair in &self.repairs {
            // SAFETY: the buffer is exclusively borrowed by this state for 'a and Rust has not read it since.
            unsafe { (repair.apply)(repair.data, repair.len) }
        }
    }
}

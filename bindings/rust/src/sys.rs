//! Raw declarations of `include/ckpt.h`, written by hand and kept in the header's order.
//!
//! Everything here mirrors the C ABI exactly: `#[repr(C)]` structs with the same fields in the same order, and
//! status codes, dtypes and flags as plain integer constants (a value coming from C is never trusted to be one of
//! the variants of a Rust enum). Prefer the safe API of the crate root; use this module for what it does not cover.
//! tests/abi_table.rs compares every struct and constant here with the ABI table the C build generates from
//! ckpt.h.
#![allow(non_camel_case_types)]

use std::marker::{PhantomData, PhantomPinned};
use std::os::raw::{c_char, c_void};

// Version ----------------------------------------------------------------------------------------------------------

pub const CKPT_VERSION_MAJOR: u32 = 0;
pub const CKPT_VERSION_MINOR: u32 = 1;
pub const CKPT_VERSION_PATCH: u32 = 0;
pub const CKPT_VERSION_NUMBER: u32 = CKPT_VERSION_MAJOR * 10000 + CKPT_VERSION_MINOR * 100 + CKPT_VERSION_PATCH;

// Status codes and error objects -----------------------------------------------------------------------------------

pub const CKPT_OK: i32 = 0;
pub const CKPT_E_INVALID_ARGUMENT: i32 = 1;
pub const CKPT_E_NOT_FOUND: i32 = 2;
pub const CKPT_E_ALREADY_EXISTS: i32 = 3;
pub const CKPT_E_MISMATCH: i32 = 4;
pub const CKPT_E_CORRUPT: i32 = 5;
pub const CKPT_E_VERSION: i32 = 6;
pub const CKPT_E_IO: i32 = 7;
pub const CKPT_E_NO_SPACE: i32 = 8;
pub const CKPT_E_TIMEOUT: i32 = 9;
pub const CKPT_E_PEER_FAILED: i32 = 10;
pub const CKPT_E_UNSUPPORTED: i32 = 11;
pub const CKPT_E_NO_MEMORY: i32 = 12;
pub const CKPT_E_IN_PROGRESS: i32 = 13;
pub const CKPT_E_INTERNAL: i32 = 14;

/// Declares an opaque C handle type: unsized in spirit, neither Send, Sync nor Unpin, so that only pointers to it
/// are ever used.
macro_rules! opaque_handle {
    ($name:ident) => {
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
            _marker: PhantomData<(*mut u8, PhantomPinned)>,
        }
    };
}

opaque_handle!(ckpt_error_t);
opaque_handle!(ckpt_context_t);
opaque_handle!(ckpt_state_t);
opaque_handle!(ckpt_request_t);
opaque_handle!(ckpt_reader_t);
opaque_handle!(ckpt_manager_t);

// Context ----------------------------------------------------------------------------------------------------------

pub type ckpt_allgather_fn =
    Option<unsafe extern "C" fn(user: *mut c_void, send: *const c_void, size: u64, recv: *mut c_void) -> i32>;

/// The job's own collectives (since CKPT_2), as ckpt.h describes them: the library copies the table during
/// `ckpt_context_create` and calls its functions, with `user`, for as long as the context lives. The safe API does
/// not take them yet; point [`ckpt_context_options::collectives`] at one to use them.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ckpt_collectives {
    pub struct_size: u32,
    pub user: *mut c_void,
    pub allgatherv: Option<
        unsafe extern "C" fn(
            user: *mut c_void,
            send: *const c_void,
            send_size: u64,
            recv: *mut c_void,
            recv_sizes: *const u64,
            recv_offsets: *const u64,
        ) -> i32,
    >,
    pub alltoallv: Option<
        unsafe extern "C" fn(
            user: *mut c_void,
            send: *const c_void,
            send_sizes: *const u64,
            send_offsets: *const u64,
            recv: *mut c_void,
            recv_sizes: *const u64,
            recv_offsets: *const u64,
        ) -> i32,
    >,
    pub broadcast: Option<unsafe extern "C" fn(user: *mut c_void, buffer: *mut c_void, size: u64, root: i32) -> i32>,
    pub barrier: Option<unsafe extern "C" fn(user: *mut c_void) -> i32>,
}

pub const CKPT_LOG_ERROR: i32 = 0;
pub const CKPT_LOG_WARNING: i32 = 1;
pub const CKPT_LOG_INFO: i32 = 2;

pub type ckpt_log_fn = Option<unsafe extern "C" fn(user: *mut c_void, level: i32, message: *const c_char)>;

pub const CKPT_TRANSPORT_DEFAULT: i32 = -1;
pub const CKPT_TRANSPORT_AUTO: i32 = 0;
pub const CKPT_TRANSPORT_NONE: i32 = 1;
pub const CKPT_TRANSPORT_UCX: i32 = 2;
pub const CKPT_TRANSPORT_NCCL: i32 = 3;

pub const CKPT_LOAD_READS_ONCE: u64 = 1;
pub const CKPT_LOAD_READS_OWN: u64 = 2;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ckpt_context_options {
    pub struct_size: u32,
    pub rank: i32,
    pub world_size: i32,
    pub local_rank: i32,
    pub store_host: *const c_char,
    pub store_port: i32,
    pub timeout_ms: u32,
    pub allgather: ckpt_allgather_fn,
    pub allgather_user: *mut c_void,
    pub node_name: *const c_char,
    pub log: ckpt_log_fn,
    pub log_user: *mut c_void,
    pub io_workers: i32,
    pub arena_bytes: u64,
    pub transport: i32,
    pub collectives: *const ckpt_collectives,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ckpt_context_stats {
    pub struct_size: u32,
    pub io_workers: u32,
    pub arena_bytes: u64,
    pub saves_committed: u64,
    pub plans_computed: u64,
    pub plans_reused: u64,
    pub bytes_staged: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub transport: i32,
    pub exchange_ns: u64,
    pub control_bytes_sent: u64,
    pub control_bytes_received: u64,
    pub store_collectives: u64,
    pub last_load_reads: u64,
    pub last_load_read_amplification_milli: u64,
}

// State ------------------------------------------------------------------------------------------------------------

pub const CKPT_MAX_NDIM: usize = 8;

pub const CKPT_DTYPE_BOOL: i32 = 1;
pub const CKPT_DTYPE_U8: i32 = 2;
pub const CKPT_DTYPE_I8: i32 = 3;
pub const CKPT_DTYPE_I16: i32 = 4;
pub const CKPT_DTYPE_U16: i32 = 5;
pub const CKPT_DTYPE_I32: i32 = 6;
pub const CKPT_DTYPE_U32: i32 = 7;
pub const CKPT_DTYPE_I64: i32 = 8;
pub const CKPT_DTYPE_U64: i32 = 9;
pub const CKPT_DTYPE_F16: i32 = 10;
pub const CKPT_DTYPE_BF16: i32 = 11;
pub const CKPT_DTYPE_F32: i32 = 12;
pub const CKPT_DTYPE_F64: i32 = 13;
pub const CKPT_DTYPE_C64: i32 = 14;
pub const CKPT_DTYPE_F8_E4M3: i32 = 15;
pub const CKPT_DTYPE_F8_E5M2: i32 = 16;
pub const CKPT_DTYPE_C128: i32 = 17;
pub const CKPT_DTYPE_F8_E4M3FNUZ: i32 = 18;
pub const CKPT_DTYPE_F8_E5M2FNUZ: i32 = 19;
pub const CKPT_DTYPE_F8_E4M3B11FNUZ: i32 = 20;
pub const CKPT_DTYPE_F8_E3M4: i32 = 21;
pub const CKPT_DTYPE_F8_E4M3_IEEE: i32 = 22;
pub const CKPT_DTYPE_F8_E8M0: i32 = 23;
pub const CKPT_DTYPE_F4_E2M1: i32 = 24;
pub const CKPT_DTYPE_I4: i32 = 25;
pub const CKPT_DTYPE_U4: i32 = 26;
pub const CKPT_DTYPE_I2: i32 = 27;
pub const CKPT_DTYPE_U2: i32 = 28;

pub const CKPT_MEMORY_HOST: i32 = 0;
pub const CKPT_MEMORY_CUDA: i32 = 1;

pub const CKPT_SHARD_FLATTENED: u32 = 0x1;
pub const CKPT_SHARD_ALLOW_SHAPE_MISMATCH: u32 = 0x2;
pub const CKPT_SHARD_ALLOW_DTYPE_CAST: u32 = 0x4;
pub const CKPT_SHARD_COMPRESS: u32 = 0x8;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ckpt_tensor_shard {
    pub struct_size: u32,
    pub key: *const c_char,
    pub dtype: i32,
    pub ndim: u32,
    pub global_shape: *const u64,
    pub local_shape: *const u64,
    pub global_offset: *const u64,
    pub replica_ndim: u32,
    pub replica_id: *const u32,
    pub flags: u32,
    pub flat_start: u64,
    pub flat_end: u64,
    pub memory_kind: i32,
    pub device: i32,
    pub data: *mut c_void,
    pub data_size: u64,
}

// Save -------------------------------------------------------------------------------------------------------------

pub const CKPT_PHASE_PLANNING: i32 = 0;
pub const CKPT_PHASE_STAGING: i32 = 1;
pub const CKPT_PHASE_WRITING: i32 = 2;
pub const CKPT_PHASE_COMMITTING: i32 = 3;
pub const CKPT_PHASE_COMMITTED: i32 = 4;
pub const CKPT_PHASE_READING: i32 = 5;
pub const CKPT_PHASE_LOADED: i32 = 6;
pub const CKPT_PHASE_FAILED: i32 = 7;

pub type ckpt_progress_fn = Option<unsafe extern "C" fn(user: *mut c_void, phase: i32, done: u64, total: u64)>;

pub const CKPT_TIER_STORAGE: u64 = 0;
pub const CKPT_TIER_MEMORY: u64 = 1;
pub const CKPT_TIER_BOTH: u64 = 2;

pub const CKPT_SAVE_IN_PLACE: u64 = 1;
pub const CKPT_SAVE_COPY_ON_WRITE: u64 = 2;
pub const CKPT_SAVE_CHECK_REPLICAS: u64 = 4;
pub const CKPT_SAVE_INCREMENTAL: u64 = 8;
pub const CKPT_SAVE_COMPRESS: u64 = 16;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ckpt_save_options {
    pub struct_size: u32,
    pub metadata_count: u32,
    pub metadata_keys: *const *const c_char,
    pub metadata_values: *const *const c_char,
    pub progress: ckpt_progress_fn,
    pub progress_user: *mut c_void,
    pub tier: u64,
    pub flags: u64,
    pub metrics: *const c_char,
    pub best_value: f64,
    pub has_best_value: u64,
    pub base: *const c_char,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ckpt_request_stats {
    pub struct_size: u32,
    pub committed: u32,
    pub state_bytes: u64,
    pub bytes_to_write: u64,
    pub bytes_staged: u64,
    pub bytes_written: u64,
    pub bytes_committed: u64,
    pub files_written: u64,
    pub planning_ns: u64,
    pub staging_ns: u64,
    pub blocking_ns: u64,
    pub writing_ns: u64,
    pub committing_ns: u64,
    pub total_ns: u64,
}

// Load -------------------------------------------------------------------------------------------------------------

pub const CKPT_STRICT_FAIL: i32 = 0;
pub const CKPT_STRICT_LOG: i32 = 1;
pub const CKPT_STRICT_IGNORE: i32 = 2;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ckpt_load_options {
    pub struct_size: u32,
    pub missing_keys: i32,
    pub unexpected_keys: i32,
    pub progress: ckpt_progress_fn,
    pub progress_user: *mut c_void,
    pub key_map: *const *const c_char,
    pub key_map_count: u64,
}

// Manager ----------------------------------------------------------------------------------------------------------

pub const CKPT_BEST_MAX: i32 = 0;
pub const CKPT_BEST_MIN: i32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ckpt_manager_options {
    pub struct_size: u32,
    pub keep_last: u32,
    pub keep_every: u64,
    pub memory_tier: u32,
    pub storage_every: u64,
    pub keep_best: u32,
    pub best_mode: i32,
    pub keep_for_seconds: u64,
}

// Reader -----------------------------------------------------------------------------------------------------------

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ckpt_checkpoint_info {
    pub struct_size: u32,
    pub format_major: u32,
    pub format_minor: u32,
    pub world_size: u32,
    pub node_count: u32,
    pub tensor_count: u64,
    pub object_count: u64,
    pub common_count: u64,
    pub metadata_count: u64,
    pub file_count: u64,
    pub total_bytes: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ckpt_tensor_info {
    pub struct_size: u32,
    pub key: *const c_char,
    pub dtype: i32,
    pub ndim: u32,
    pub shape: [u64; CKPT_MAX_NDIM],
    pub chunk_count: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ckpt_chunk_info {
    pub struct_size: u32,
    pub ndim: u32,
    pub offset: [u64; CKPT_MAX_NDIM],
    pub shape: [u64; CKPT_MAX_NDIM],
    pub file: *const c_char,
    pub file_offset: u64,
    pub byte_length: u64,
}

// Export to safetensors --------------------------------------------------------------------------------------------

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ckpt_export_options {
    pub struct_size: u32,
    pub max_shard_bytes: u64,
    pub keys: *const *const c_char,
    pub key_count: u64,
    pub part_index: u32,
    pub part_count: u32,
    pub dtype: i32,
}

/// `struct_size` of a struct, as its `_INIT` macro computes it.
fn struct_size<T>() -> u32 {
    std::mem::size_of::<T>() as u32
}

impl ckpt_context_stats {
    /// The value of `CKPT_CONTEXT_STATS_INIT` (the header has no init function for it).
    pub fn init() -> Self {
        ckpt_context_stats { struct_size: struct_size::<Self>(), transport: CKPT_TRANSPORT_NONE, ..Default::default() }
    }
}

impl ckpt_request_stats {
    /// The value of `CKPT_REQUEST_STATS_INIT` (the header has no init function for it).
    pub fn init() -> Self {
        ckpt_request_stats { struct_size: struct_size::<Self>(), ..Default::default() }
    }
}

impl ckpt_checkpoint_info {
    /// The value of `CKPT_CHECKPOINT_INFO_INIT` (the header has no init function for it).
    pub fn init() -> Self {
        ckpt_checkpoint_info { struct_size: struct_size::<Self>(), ..Default::default() }
    }
}

impl ckpt_tensor_info {
    /// The value of `CKPT_TENSOR_INFO_INIT`.
    pub fn init() -> Self {
        ckpt_tensor_info {
            struct_size: struct_size::<Self>(),
            key: std::ptr::null(),
            dtype: 0,
            ndim: 0,
            shape: [0; CKPT_MAX_NDIM],
            chunk_count: 0,
        }
    }
}

impl ckpt_chunk_info {
    /// The value of `CKPT_CHUNK_INFO_INIT`.
    pub fn init() -> Self {
        ckpt_chunk_info {
            struct_size: struct_size::<Self>(),
            ndim: 0,
            offset: [0; CKPT_MAX_NDIM],
            shape: [0; CKPT_MAX_NDIM],
            file: std::ptr::null(),
            file_offset: 0,
            byte_length: 0,
        }
    }
}

/// Declares an `init()` constructor that asks the library for the struct's defaults, so that they always match
/// the `_INIT` macro of the library actually loaded. The library writes only this struct's size.
macro_rules! init_from_library {
    ($name:ident, $init_fn:ident) => {
        impl $name {
            /// # Panics
            ///
            /// If the loaded libckpt is older than the `ckpt.h` this module restates: it refuses a struct larger
            /// than its own.
            pub fn init() -> Self {
                let mut value = std::mem::MaybeUninit::<$name>::zeroed();
                // SAFETY: given this struct's own size, the init function writes within it, and all-zero bytes
                // are a valid value of every field (integers, raw pointers, optional function pointers).
                let status = unsafe { $init_fn(value.as_mut_ptr(), struct_size::<$name>()) };
                assert!(
                    status == CKPT_OK,
                    "{} refused a struct of {} bytes (status {}): libckpt is older than this crate",
                    stringify!($init_fn),
                    struct_size::<$name>(),
                    status
                );
                // SAFETY: the struct was zeroed, then filled by the library.
                unsafe { value.assume_init() }
            }
        }
    };
}

init_from_library!(ckpt_collectives, ckpt_collectives_init);
init_from_library!(ckpt_context_options, ckpt_context_options_init);
init_from_library!(ckpt_tensor_shard, ckpt_tensor_shard_init);
init_from_library!(ckpt_save_options, ckpt_save_options_init);
init_from_library!(ckpt_load_options, ckpt_load_options_init);
init_from_library!(ckpt_manager_options, ckpt_manager_options_init);
init_from_library!(ckpt_export_options, ckpt_export_options_init);

extern "C" {
    pub fn ckpt_version_number() -> u32;
    pub fn ckpt_version_string() -> *const c_char;

    pub fn ckpt_status_string(status: i32) -> *const c_char;
    pub fn ckpt_error_create(out: *mut *mut ckpt_error_t) -> i32;
    pub fn ckpt_error_free(err: *mut ckpt_error_t);
    pub fn ckpt_error_status(err: *const ckpt_error_t) -> i32;
    pub fn ckpt_error_message(err: *const ckpt_error_t) -> *const c_char;

    pub fn ckpt_collectives_init(collectives: *mut ckpt_collectives, struct_size: u32) -> i32;
    pub fn ckpt_context_options_init(opts: *mut ckpt_context_options, struct_size: u32) -> i32;
    pub fn ckpt_context_create(
        opts: *const ckpt_context_options,
        out: *mut *mut ckpt_context_t,
        err: *mut ckpt_error_t,
    ) -> i32;
    pub fn ckpt_context_free(ctx: *mut ckpt_context_t);
    pub fn ckpt_context_rank(ctx: *const ckpt_context_t) -> i32;
    pub fn ckpt_context_world_size(ctx: *const ckpt_context_t) -> i32;
    pub fn ckpt_context_local_rank(ctx: *const ckpt_context_t) -> i32;
    pub fn ckpt_context_stats_get(
        ctx: *const ckpt_context_t,
        stats: *mut ckpt_context_stats,
        err: *mut ckpt_error_t,
    ) -> i32;

    pub fn ckpt_dtype_size(dtype: i32) -> u32;
    pub fn ckpt_dtype_name(dtype: i32) -> *const c_char;
    pub fn ckpt_tensor_shard_init(shard: *mut ckpt_tensor_shard, struct_size: u32) -> i32;
    pub fn ckpt_state_create(out: *mut *mut ckpt_state_t, err: *mut ckpt_error_t) -> i32;
    pub fn ckpt_state_free(state: *mut ckpt_state_t);
    pub fn ckpt_state_add_tensor(
        state: *mut ckpt_state_t,
        shard: *const ckpt_tensor_shard,
        err: *mut ckpt_error_t,
    ) -> i32;
    pub fn ckpt_state_add_object(
        state: *mut ckpt_state_t,
        key: *const c_char,
        grid_ndim: u32,
        grid_shape: *const u64,
        grid_index: *const u64,
        data: *mut c_void,
        size: u64,
        err: *mut ckpt_error_t,
    ) -> i32;
    pub fn ckpt_state_add_common(
        state: *mut ckpt_state_t,
        key: *const c_char,
        data: *const c_void,
        size: u64,
        err: *mut ckpt_error_t,
    ) -> i32;
    pub fn ckpt_state_common(
        state: *const ckpt_state_t,
        key: *const c_char,
        data: *mut *const c_void,
        size: *mut u64,
        err: *mut ckpt_error_t,
    ) -> i32;
    pub fn ckpt_state_object(
        state: *const ckpt_state_t,
        key: *const c_char,
        grid_index: *const u64,
        data: *mut *const c_void,
        size: *mut u64,
        err: *mut ckpt_error_t,
    ) -> i32;

    pub fn ckpt_save_options_init(opts: *mut ckpt_save_options, struct_size: u32) -> i32;
    pub fn ckpt_save(
        ctx: *mut ckpt_context_t,
        state: *mut ckpt_state_t,
        path: *const c_char,
        opts: *const ckpt_save_options,
        request: *mut *mut ckpt_request_t,
        err: *mut ckpt_error_t,
    ) -> i32;
    pub fn ckpt_request_test(request: *mut ckpt_request_t, err: *mut ckpt_error_t) -> i32;
    pub fn ckpt_request_wait(request: *mut ckpt_request_t, timeout_ms: u32, err: *mut ckpt_error_t) -> i32;
    pub fn ckpt_request_free(request: *mut ckpt_request_t);
    pub fn ckpt_request_stats_get(
        request: *const ckpt_request_t,
        stats: *mut ckpt_request_stats,
        err: *mut ckpt_error_t,
    ) -> i32;

    pub fn ckpt_load_options_init(opts: *mut ckpt_load_options, struct_size: u32) -> i32;
    pub fn ckpt_load(
        ctx: *mut ckpt_context_t,
        state: *mut ckpt_state_t,
        path: *const c_char,
        opts: *const ckpt_load_options,
        err: *mut ckpt_error_t,
    ) -> i32;

    pub fn ckpt_manager_options_init(opts: *mut ckpt_manager_options, struct_size: u32) -> i32;
    pub fn ckpt_manager_open(
        ctx: *mut ckpt_context_t,
        root: *const c_char,
        opts: *const ckpt_manager_options,
        out: *mut *mut ckpt_manager_t,
        err: *mut ckpt_error_t,
    ) -> i32;
    pub fn ckpt_manager_free(manager: *mut ckpt_manager_t);
    pub fn ckpt_manager_save(
        manager: *mut ckpt_manager_t,
        state: *mut ckpt_state_t,
        step: u64,
        opts: *const ckpt_save_options,
        request: *mut *mut ckpt_request_t,
        err: *mut ckpt_error_t,
    ) -> i32;
    pub fn ckpt_manager_latest(manager: *const ckpt_manager_t, step: *mut u64, err: *mut ckpt_error_t) -> i32;
    pub fn ckpt_manager_steps(
        manager: *const ckpt_manager_t,
        steps: *mut u64,
        capacity: u64,
        count: *mut u64,
        err: *mut ckpt_error_t,
    ) -> i32;
    pub fn ckpt_manager_resume_step(manager: *mut ckpt_manager_t, step: *mut u64, err: *mut ckpt_error_t) -> i32;
    pub fn ckpt_manager_load_latest(
        manager: *mut ckpt_manager_t,
        state: *mut ckpt_state_t,
        opts: *const ckpt_load_options,
        step: *mut u64,
        err: *mut ckpt_error_t,
    ) -> i32;
    pub fn ckpt_manager_step_path(
        manager: *const ckpt_manager_t,
        step: u64,
        buffer: *mut c_char,
        buffer_size: u64,
        err: *mut ckpt_error_t,
    ) -> i32;
    pub fn ckpt_manager_wait(manager: *mut ckpt_manager_t, err: *mut ckpt_error_t) -> i32;
    pub fn ckpt_manager_metrics(
        manager: *const ckpt_manager_t,
        step: u64,
        buffer: *mut c_char,
        capacity: u64,
        length: *mut u64,
        err: *mut ckpt_error_t,
    ) -> i32;

    pub fn ckpt_reader_open(path: *const c_char, out: *mut *mut ckpt_reader_t, err: *mut ckpt_error_t) -> i32;
    pub fn ckpt_reader_free(reader: *mut ckpt_reader_t);
    pub fn ckpt_reader_info(
        reader: *const ckpt_reader_t,
        info: *mut ckpt_checkpoint_info,
        err: *mut ckpt_error_t,
    ) -> i32;
    pub fn ckpt_reader_tensor(
        reader: *const ckpt_reader_t,
        index: u64,
        info: *mut ckpt_tensor_info,
        err: *mut ckpt_error_t,
    ) -> i32;
    pub fn ckpt_reader_chunk(
        reader: *const ckpt_reader_t,
        tensor_index: u64,
        chunk_index: u64,
        info: *mut ckpt_chunk_info,
        err: *mut ckpt_error_t,
    ) -> i32;
    pub fn ckpt_reader_read(
        reader: *mut ckpt_reader_t,
        key: *const c_char,
        ndim: u32,
        offset: *const u64,
        shape: *const u64,
        buffer: *mut c_void,
        buffer_size: u64,
        err: *mut ckpt_error_t,
    ) -> i32;
    pub fn ckpt_reader_common_at(
        reader: *const ckpt_reader_t,
        index: u64,
        key: *mut *const c_char,
        data: *mut *const c_void,
        size: *mut u64,
        err: *mut ckpt_error_t,
    ) -> i32;
    pub fn ckpt_reader_common(
        reader: *const ckpt_reader_t,
        key: *const c_char,
        data: *mut *const c_void,
        size: *mut u64,
        err: *mut ckpt_error_t,
    ) -> i32;
    pub fn ckpt_reader_metadata(
        reader: *const ckpt_reader_t,
        key: *const c_char,
        value: *mut *const c_char,
        err: *mut ckpt_error_t,
    ) -> i32;
    pub fn ckpt_reader_metadata_at(
        reader: *const ckpt_reader_t,
        index: u64,
        key: *mut *const c_char,
        value: *mut *const c_char,
        err: *mut ckpt_error_t,
    ) -> i32;
    pub fn ckpt_reader_verify(reader: *mut ckpt_reader_t, err: *mut ckpt_error_t) -> i32;

    pub fn ckpt_export_options_init(opts: *mut ckpt_export_options, struct_size: u32) -> i32;
    pub fn ckpt_export(
        checkpoint: *const c_char,
        out: *const c_char,
        opts: *const ckpt_export_options,
        err: *mut ckpt_error_t,
    ) -> i32;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    #[test]
    fn context_options_init_matches_header_macro_and_rust_layout() {
        let opts = ckpt_context_options::init();
        assert_eq!(opts.struct_size as usize, size_of::<ckpt_context_options>());
        assert_eq!((opts.rank, opts.world_size, opts.local_rank), (-1, -1, -1));
        assert!(opts.store_host.is_null());
        assert_eq!((opts.store_port, opts.timeout_ms), (-1, 0));
        assert!(opts.allgather.is_none() && opts.allgather_user.is_null());
        assert!(opts.node_name.is_null() && opts.log.is_none() && opts.log_user.is_null());
        assert_eq!((opts.io_workers, opts.arena_bytes, opts.transport), (-1, 0, CKPT_TRANSPORT_DEFAULT));
        assert!(opts.collectives.is_null());
    }

    #[test]
    fn collectives_init_matches_header_macro_and_rust_layout() {
        let table = ckpt_collectives::init();
        assert_eq!(table.struct_size as usize, size_of::<ckpt_collectives>());
        assert!(table.user.is_null());
        assert!(table.allgatherv.is_none() && table.alltoallv.is_none());
        assert!(table.broadcast.is_none() && table.barrier.is_none());
    }

    #[test]
    fn manager_options_init_matches_header_macro_and_rust_layout() {
        let opts = ckpt_manager_options::init();
        assert_eq!(opts.struct_size as usize, size_of::<ckpt_manager_options>());
        assert_eq!((opts.keep_last, opts.keep_every, opts.memory_tier, opts.storage_every), (0, 0, 0, 0));
        assert_eq!((opts.keep_best, opts.best_mode, opts.keep_for_seconds), (0, CKPT_BEST_MAX, 0));
    }

    #[test]
    fn tensor_shard_init_matches_header_macro_and_rust_layout() {
        let shard = ckpt_tensor_shard::init();
        assert_eq!(shard.struct_size as usize, size_of::<ckpt_tensor_shard>());
        assert!(shard.key.is_null() && shard.data.is_null());
        assert_eq!((shard.dtype, shard.ndim, shard.replica_ndim, shard.flags), (0, 0, 0, 0));
        assert_eq!((shard.memory_kind, shard.device, shard.data_size), (CKPT_MEMORY_HOST, 0, 0));
    }

    #[test]
    fn save_options_init_matches_header_macro_and_rust_layout() {
        let opts = ckpt_save_options::init();
        assert_eq!(opts.struct_size as usize, size_of::<ckpt_save_options>());
        assert_eq!(opts.metadata_count, 0);
        assert!(opts.metadata_keys.is_null() && opts.metadata_values.is_null());
        assert!(opts.progress.is_none() && opts.progress_user.is_null());
        assert_eq!((opts.tier, opts.flags), (CKPT_TIER_STORAGE, 0));
        assert!(opts.base.is_null());
    }

    #[test]
    fn load_options_init_matches_header_macro_and_rust_layout() {
        let opts = ckpt_load_options::init();
        assert_eq!(opts.struct_size as usize, size_of::<ckpt_load_options>());
        assert_eq!((opts.missing_keys, opts.unexpected_keys), (CKPT_STRICT_FAIL, CKPT_STRICT_LOG));
        assert!(opts.progress.is_none() && opts.progress_user.is_null());
    }

    #[test]
    fn export_options_init_matches_header_macro_and_rust_layout() {
        let opts = ckpt_export_options::init();
        assert_eq!(opts.struct_size as usize, size_of::<ckpt_export_options>());
        assert_eq!(opts.max_shard_bytes, 5_000_000_000);
        assert!(opts.keys.is_null());
        assert_eq!((opts.key_count, opts.part_index, opts.part_count, opts.dtype), (0, 0, 1, 0));
    }

    #[test]
    fn context_stats_fill_the_rust_layout() {
        let mut ctx = std::ptr::null_mut();
        let mut opts = ckpt_context_options::init();
        (opts.rank, opts.world_size, opts.io_workers, opts.arena_bytes) = (0, 1, 0, 64 << 20);
        assert_eq!(unsafe { ckpt_context_create(&opts, &mut ctx, std::ptr::null_mut()) }, CKPT_OK);
        let mut stats = ckpt_context_stats::init();
        let status = unsafe { ckpt_context_stats_get(ctx, &mut stats, std::ptr::null_mut()) };
        unsafe { ckpt_context_free(ctx) };
        assert_eq!(status, CKPT_OK);
        assert_eq!(stats.struct_size as usize, size_of::<ckpt_context_stats>());
        assert_eq!((stats.io_workers, stats.arena_bytes, stats.saves_committed), (0, 64 << 20, 0));
        assert_eq!(stats.transport, CKPT_TRANSPORT_NONE);
    }

    #[test]
    fn library_version_matches_declared_version() {
        assert_eq!(unsafe { ckpt_version_number() }, CKPT_VERSION_NUMBER);
    }
}

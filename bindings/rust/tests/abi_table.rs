//! `ckpt::sys` restates ckpt.h by hand; these tests compare it with the ABI table that the C build generates from
//! the header (build/abi/ckpt_abi.tsv, see tools/abi_table_source.py): every struct's size, alignment and fields
//! (names, offsets, sizes) and every constant. A field or constant added to the header and not here fails them.

use std::collections::BTreeMap;
use std::mem::{align_of, size_of, MaybeUninit};
use std::path::PathBuf;

use ckpt::sys::*;

/// One struct: (size, alignment) and its fields by name: (offset, size).
type Layout = ((usize, usize), BTreeMap<String, (usize, usize)>);

struct AbiTable {
    structs: BTreeMap<String, Layout>,
    constants: BTreeMap<String, i64>,
}

/// The table CKPT_ABI_TABLE names (ctest sets it), else the one in the project's default build directory.
fn read_table() -> AbiTable {
    let path = std::env::var_os("CKPT_ABI_TABLE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../build/abi/ckpt_abi.tsv"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (build the C library, or set CKPT_ABI_TABLE)", path.display()));
    let mut table = AbiTable { structs: BTreeMap::new(), constants: BTreeMap::new() };
    let number =
        |cell: &str| -> i64 { cell.parse().unwrap_or_else(|_| panic!("{}: bad number {cell}", path.display())) };
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let cells: Vec<&str> = line.split('\t').collect();
        match cells.as_slice() {
            ["struct", name, size, align] => {
                let size_and_align = (number(size) as usize, number(align) as usize);
                table.structs.insert(name.to_string(), (size_and_align, BTreeMap::new()));
            }
            ["field", owner, name, offset, size] => {
                let fields = &mut table.structs.get_mut(*owner).expect("a field before its struct").1;
                fields.insert(name.to_string(), (number(offset) as usize, number(size) as usize));
            }
            ["constant", name, value] => {
                table.constants.insert(name.to_string(), number(value));
            }
            _ => panic!("{}: cannot read {line:?}", path.display()),
        }
    }
    table
}

/// The size of what a raw pointer points to, without reading it.
fn pointee_size<T>(_: *const T) -> usize {
    size_of::<T>()
}

/// The layout of a `sys` struct as Rust lays it out: `layout!(type { field, ... })`.
macro_rules! layout {
    ($type:ident { $($field:ident),* $(,)? }) => {{
        let value = MaybeUninit::<$type>::uninit();
        let base = value.as_ptr();
        let mut fields = BTreeMap::new();
        $(
            // SAFETY: only the field's address is computed; nothing is read.
            let field = unsafe { std::ptr::addr_of!((*base).$field) };
            fields.insert(stringify!($field).to_string(), (field as usize - base as usize, pointee_size(field)));
        )*
        (stringify!($type).to_string(), ((size_of::<$type>(), align_of::<$type>()), fields))
    }};
}

fn rust_layouts() -> BTreeMap<String, Layout> {
    BTreeMap::from([
        layout!(ckpt_collectives { struct_size, user, allgatherv, alltoallv, broadcast, barrier }),
        layout!(ckpt_context_options {
            struct_size,
            rank,
            world_size,
            local_rank,
            store_host,
            store_port,
            timeout_ms,
            allgather,
            allgather_user,
            node_name,
            log,
            log_user,
            io_workers,
            arena_bytes,
            transport,
            collectives,
        }),
        layout!(ckpt_context_stats {
            struct_size,
            io_workers,
            arena_bytes,
            saves_committed,
            plans_computed,
            plans_reused,
            bytes_staged,
            bytes_written,
            bytes_read,
            bytes_sent,
            bytes_received,
            transport,
            exchange_ns,
            control_bytes_sent,
            control_bytes_received,
            store_collectives,
            last_load_reads,
            last_load_read_amplification_milli,
        }),
        layout!(ckpt_tensor_shard {
            struct_size,
            key,
            dtype,
            ndim,
            global_shape,
            local_shape,
            global_offset,
            replica_ndim,
            replica_id,
            flags,
            flat_start,
            flat_end,
            memory_kind,
            device,
            data,
            data_size,
        }),
        layout!(ckpt_save_options {
            struct_size,
            metadata_count,
            metadata_keys,
            metadata_values,
            progress,
            progress_user,
            tier,
            flags,
            metrics,
            best_value,
            has_best_value,
            base,
        }),
        layout!(ckpt_request_stats {
            struct_size,
            committed,
            state_bytes,
            bytes_to_write,
            bytes_staged,
            bytes_written,
            bytes_committed,
            files_written,
            planning_ns,
            staging_ns,
            blocking_ns,
            writing_ns,
            committing_ns,
            total_ns,
        }),
        layout!(ckpt_load_options {
            struct_size,
            missing_keys,
            unexpected_keys,
            progress,
            progress_user,
            key_map,
            key_map_count
        }),
        layout!(ckpt_manager_options {
            struct_size,
            keep_last,
            keep_every,
            memory_tier,
            storage_every,
            keep_best,
            best_mode,
            keep_for_seconds
        }),
        layout!(ckpt_checkpoint_info {
            struct_size,
            format_major,
            format_minor,
            world_size,
            node_count,
            tensor_count,
            object_count,
            common_count,
            metadata_count,
            file_count,
            total_bytes,
        }),
        layout!(ckpt_tensor_info { struct_size, key, dtype, ndim, shape, chunk_count }),
        layout!(ckpt_chunk_info { struct_size, ndim, offset, shape, file, file_offset, byte_length }),
        layout!(ckpt_export_options { struct_size, max_shard_bytes, keys, key_count, part_index, part_count, dtype }),
    ])
}

/// Every constant of `sys`, by its C name.
macro_rules! constants {
    ($($name:ident),* $(,)?) => { BTreeMap::from([$((stringify!($name).to_string(), $name as i64)),*]) };
}

fn rust_constants() -> BTreeMap<String, i64> {
    constants!(
        CKPT_VERSION_MAJOR,
        CKPT_VERSION_MINOR,
        CKPT_VERSION_PATCH,
        CKPT_VERSION_NUMBER,
        CKPT_OK,
        CKPT_E_INVALID_ARGUMENT,
        CKPT_E_NOT_FOUND,
        CKPT_E_ALREADY_EXISTS,
        CKPT_E_MISMATCH,
        CKPT_E_CORRUPT,
        CKPT_E_VERSION,
        CKPT_E_IO,
        CKPT_E_NO_SPACE,
        CKPT_E_TIMEOUT,
        CKPT_E_PEER_FAILED,
        CKPT_E_UNSUPPORTED,
        CKPT_E_NO_MEMORY,
        CKPT_E_IN_PROGRESS,
        CKPT_E_INTERNAL,
        CKPT_LOG_ERROR,
        CKPT_LOG_WARNING,
        CKPT_LOG_INFO,
        CKPT_TRANSPORT_DEFAULT,
        CKPT_TRANSPORT_AUTO,
        CKPT_TRANSPORT_NONE,
        CKPT_TRANSPORT_UCX,
        CKPT_TRANSPORT_NCCL,
        CKPT_LOAD_READS_ONCE,
        CKPT_LOAD_READS_OWN,
        CKPT_MAX_NDIM,
        CKPT_DTYPE_BOOL,
        CKPT_DTYPE_U8,
        CKPT_DTYPE_I8,
        CKPT_DTYPE_I16,
        CKPT_DTYPE_U16,
        CKPT_DTYPE_I32,
        CKPT_DTYPE_U32,
        CKPT_DTYPE_I64,
        CKPT_DTYPE_U64,
        CKPT_DTYPE_F16,
        CKPT_DTYPE_BF16,
        CKPT_DTYPE_F32,
        CKPT_DTYPE_F64,
        CKPT_DTYPE_C64,
        CKPT_DTYPE_F8_E4M3,
        CKPT_DTYPE_F8_E5M2,
        CKPT_DTYPE_C128,
        CKPT_DTYPE_F8_E4M3FNUZ,
        CKPT_DTYPE_F8_E5M2FNUZ,
        CKPT_DTYPE_F8_E4M3B11FNUZ,
        CKPT_DTYPE_F8_E3M4,
        CKPT_DTYPE_F8_E4M3_IEEE,
        CKPT_DTYPE_F8_E8M0,
        CKPT_DTYPE_F4_E2M1,
        CKPT_DTYPE_I4,
        CKPT_DTYPE_U4,
        CKPT_DTYPE_I2,
        CKPT_DTYPE_U2,
        CKPT_MEMORY_HOST,
        CKPT_MEMORY_CUDA,
        CKPT_SHARD_FLATTENED,
        CKPT_SHARD_ALLOW_SHAPE_MISMATCH,
        CKPT_SHARD_ALLOW_DTYPE_CAST,
        CKPT_SHARD_COMPRESS,
        CKPT_PHASE_PLANNING,
        CKPT_PHASE_STAGING,
        CKPT_PHASE_WRITING,
        CKPT_PHASE_COMMITTING,
        CKPT_PHASE_COMMITTED,
        CKPT_PHASE_READING,
        CKPT_PHASE_LOADED,
        CKPT_PHASE_FAILED,
        CKPT_TIER_STORAGE,
        CKPT_TIER_MEMORY,
        CKPT_TIER_BOTH,
        CKPT_SAVE_IN_PLACE,
        CKPT_SAVE_COPY_ON_WRITE,
        CKPT_SAVE_CHECK_REPLICAS,
        CKPT_SAVE_INCREMENTAL,
        CKPT_SAVE_COMPRESS,
        CKPT_BEST_MAX,
        CKPT_BEST_MIN,
        CKPT_STRICT_FAIL,
        CKPT_STRICT_LOG,
        CKPT_STRICT_IGNORE,
    )
}

/// The entries on which `ours` and `table` disagree, one line each, naming both sides.
fn differences<V: PartialEq + std::fmt::Debug>(ours: &BTreeMap<String, V>, table: &BTreeMap<String, V>) -> Vec<String> {
    let names: std::collections::BTreeSet<&String> = ours.keys().chain(table.keys()).collect();
    names
        .into_iter()
        .filter(|name| ours.get(*name) != table.get(*name))
        .map(|name| format!("{name}: {:?} in ckpt::sys, {:?} in the ABI table", ours.get(name), table.get(name)))
        .collect()
}

#[test]
fn every_struct_has_the_layout_of_the_abi_table() {
    let table = read_table();
    assert!(!table.structs.is_empty(), "the ABI table lists no struct");
    let problems = differences(&rust_layouts(), &table.structs);
    assert!(problems.is_empty(), "(size, alignment), {{field: (offset, size)}}:\n{}", problems.join("\n"));
}

#[test]
fn every_constant_has_the_value_of_the_abi_table() {
    let table = read_table();
    assert!(!table.constants.is_empty(), "the ABI table lists no constant");
    let problems = differences(&rust_constants(), &table.constants);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

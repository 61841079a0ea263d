package ckpt

/*
#include "binding.h"
*/
import "C"

import "unsafe"

// The layouts and constants of ckpt.h as cgo compiled them, which abi_test.go compares with the ABI table the C
// build generates from the same header (tools/abi_table_source.py): a binding compiled against another ckpt.h (an
// older installed one, say) fails there instead of corrupting memory. They live outside the tests because cgo
// cannot be used in _test.go files.

// cField is where cgo put one field of a C struct.
type cField struct {
	name         string
	offset, size uintptr
}

// cStruct is cgo's layout of one struct of ckpt.h.
type cStruct struct {
	name        string
	size, align uintptr
	fields      []cField
}

// cStructs lists every struct of ckpt.h.
func cStructs() []cStruct {
	var collectives C.ckpt_collectives
	var contextOptions C.ckpt_context_options
	var contextStats C.ckpt_context_stats
	var tensorShard C.ckpt_tensor_shard
	var saveOptions C.ckpt_save_options
	var requestStats C.ckpt_request_stats
	var loadOptions C.ckpt_load_options
	var managerOptions C.ckpt_manager_options
	var checkpointInfo C.ckpt_checkpoint_info
	var tensorInfo C.ckpt_tensor_info
	var chunkInfo C.ckpt_chunk_info
	var exportOptions C.ckpt_export_options
	return []cStruct{
		{"ckpt_collectives", unsafe.Sizeof(collectives), unsafe.Alignof(collectives), []cField{
			{"struct_size", unsafe.Offsetof(collectives.struct_size), unsafe.Sizeof(collectives.struct_size)},
			{"user", unsafe.Offsetof(collectives.user), unsafe.Sizeof(collectives.user)},
			{"allgatherv", unsafe.Offsetof(collectives.allgatherv), unsafe.Sizeof(collectives.allgatherv)},
			{"alltoallv", unsafe.Offsetof(collectives.alltoallv), unsafe.Sizeof(collectives.alltoallv)},
			{"broadcast", unsafe.Offsetof(collectives.broadcast), unsafe.Sizeof(collectives.broadcast)},
			{"barrier", unsafe.Offsetof(collectives.barrier), unsafe.Sizeof(collectives.barrier)},
		}},
		{"ckpt_context_options", unsafe.Sizeof(contextOptions), unsafe.Alignof(contextOptions), []cField{
			{"struct_size", unsafe.Offsetof(contextOptions.struct_size), unsafe.Sizeof(contextOptions.struct_size)},
			{"rank", unsafe.Offsetof(contextOptions.rank), unsafe.Sizeof(contextOptions.rank)},
			{"world_size", unsafe.Offsetof(contextOptions.world_size), unsafe.Sizeof(contextOptions.world_size)},
			{"local_rank", unsafe.Offsetof(contextOptions.local_rank), unsafe.Sizeof(contextOptions.local_rank)},
			{"store_host", unsafe.Offsetof(contextOptions.store_host), unsafe.Sizeof(contextOptions.store_host)},
			{"store_port", unsafe.Offsetof(contextOptions.store_port), unsafe.Sizeof(contextOptions.store_port)},
			{"timeout_ms", unsafe.Offsetof(contextOptions.timeout_ms), unsafe.Sizeof(contextOptions.timeout_ms)},
			{"allgather", unsafe.Offsetof(contextOptions.allgather), unsafe.Sizeof(contextOptions.allgather)},
			{"allgather_user", unsafe.Offsetof(contextOptions.allgather_user), unsafe.Sizeof(contextOptions.allgather_user)},
			{"node_name", unsafe.Offsetof(contextOptions.node_name), unsafe.Sizeof(contextOptions.node_name)},
			{"log", unsafe.Offsetof(contextOptions.log), unsafe.Sizeof(contextOptions.log)},
			{"log_user", unsafe.Offsetof(contextOptions.log_user), unsafe.Sizeof(contextOptions.log_user)},
			{"io_workers", unsafe.Offsetof(contextOptions.io_workers), unsafe.Sizeof(contextOptions.io_workers)},
			{"arena_bytes", unsafe.Offsetof(contextOptions.arena_bytes), unsafe.Sizeof(contextOptions.arena_bytes)},
			{"transport", unsafe.Offsetof(contextOptions.transport), unsafe.Sizeof(contextOptions.transport)},
			{"collectives", unsafe.Offsetof(contextOptions.collectives), unsafe.Sizeof(contextOptions.collectives)},
		}},
		{"ckpt_context_stats", unsafe.Sizeof(contextStats), unsafe.Alignof(contextStats), []cField{
			{"struct_size", unsafe.Offsetof(contextStats.struct_size), unsafe.Sizeof(contextStats.struct_size)},
			{"io_workers", unsafe.Offsetof(contextStats.io_workers), unsafe.Sizeof(contextStats.io_workers)},
			{"arena_bytes", unsafe.Offsetof(contextStats.arena_bytes), unsafe.Sizeof(contextStats.arena_bytes)},
			{"saves_committed", unsafe.Offsetof(contextStats.saves_committed), unsafe.Sizeof(contextStats.saves_committed)},
			{"plans_computed", unsafe.Offsetof(contextStats.plans_computed), unsafe.Sizeof(contextStats.plans_computed)},
			{"plans_reused", unsafe.Offsetof(contextStats.plans_reused), unsafe.Sizeof(contextStats.plans_reused)},
			{"bytes_staged", unsafe.Offsetof(contextStats.bytes_staged), unsafe.Sizeof(contextStats.bytes_staged)},
			{"bytes_written", unsafe.Offsetof(contextStats.bytes_written), unsafe.Sizeof(contextStats.bytes_written)},
			{"bytes_read", unsafe.Offsetof(contextStats.bytes_read), unsafe.Sizeof(contextStats.bytes_read)},
			{"bytes_sent", unsafe.Offsetof(contextStats.bytes_sent), unsafe.Sizeof(contextStats.bytes_sent)},
			{"bytes_received", unsafe.Offsetof(contextStats.bytes_received), unsafe.Sizeof(contextStats.bytes_received)},
			{"transport", unsafe.Offsetof(contextStats.transport), unsafe.Sizeof(contextStats.transport)},
			{"exchange_ns", unsafe.Offsetof(contextStats.exchange_ns), unsafe.Sizeof(contextStats.exchange_ns)},
			{"control_bytes_sent", unsafe.Offsetof(contextStats.control_bytes_sent), unsafe.Sizeof(contextStats.control_bytes_sent)},
			{"control_bytes_received", unsafe.Offsetof(contextStats.control_bytes_received), unsafe.Sizeof(contextStats.control_bytes_received)},
			{"store_collectives", unsafe.Offsetof(contextStats.store_collectives), unsafe.Sizeof(contextStats.store_collectives)},
			{"last_load_reads", unsafe.Offsetof(contextStats.last_load_reads), unsafe.Sizeof(contextStats.last_load_reads)},
			{"last_load_read_amplification_milli", unsafe.Offsetof(contextStats.last_load_read_amplification_milli), unsafe.Sizeof(contextStats.last_load_read_amplification_milli)},
		}},
		{"ckpt_tensor_shard", unsafe.Sizeof(tensorShard), unsafe.Alignof(tensorShard), []cField{
			{"struct_size", unsafe.Offsetof(tensorShard.struct_size), unsafe.Sizeof(tensorShard.struct_size)},
			{"key", unsafe.Offsetof(tensorShard.key), unsafe.Sizeof(tensorShard.key)},
			{"dtype", unsafe.Offsetof(tensorShard.dtype), unsafe.Sizeof(tensorShard.dtype)},
			{"ndim", unsafe.Offsetof(tensorShard.ndim), unsafe.Sizeof(tensorShard.ndim)},
			{"global_shape", unsafe.Offsetof(tensorShard.global_shape), unsafe.Sizeof(tensorShard.global_shape)},
			{"local_shape", unsafe.Offsetof(tensorShard.local_shape), unsafe.Sizeof(tensorShard.local_shape)},
			{"global_offset", unsafe.Offsetof(tensorShard.global_offset), unsafe.Sizeof(tensorShard.global_offset)},
			{"replica_ndim", unsafe.Offsetof(tensorShard.replica_ndim), unsafe.Sizeof(tensorShard.replica_ndim)},
			{"replica_id", unsafe.Offsetof(tensorShard.replica_id), unsafe.Sizeof(tensorShard.replica_id)},
			{"flags", unsafe.Offsetof(tensorShard.flags), unsafe.Sizeof(tensorShard.flags)},
			{"flat_start", unsafe.Offsetof(tensorShard.flat_start), unsafe.Sizeof(tensorShard.flat_start)},
			{"flat_end", unsafe.Offsetof(tensorShard.flat_end), unsafe.Sizeof(tensorShard.flat_end)},
			{"memory_kind", unsafe.Offsetof(tensorShard.memory_kind), unsafe.Sizeof(tensorShard.memory_kind)},
			{"device", unsafe.Offsetof(tensorShard.device), unsafe.Sizeof(tensorShard.device)},
			{"data", unsafe.Offsetof(tensorShard.data), unsafe.Sizeof(tensorShard.data)},
			{"data_size", unsafe.Offsetof(tensorShard.data_size), unsafe.Sizeof(tensorShard.data_size)},
		}},
		{"ckpt_save_options", unsafe.Sizeof(saveOptions), unsafe.Alignof(saveOptions), []cField{
			{"struct_size", unsafe.Offsetof(saveOptions.struct_size), unsafe.Sizeof(saveOptions.struct_size)},
			{"metadata_count", unsafe.Offsetof(saveOptions.metadata_count), unsafe.Sizeof(saveOptions.metadata_count)},
			{"metadata_keys", unsafe.Offsetof(saveOptions.metadata_keys), unsafe.Sizeof(saveOptions.metadata_keys)},
			{"metadata_values", unsafe.Offsetof(saveOptions.metadata_values), unsafe.Sizeof(saveOptions.metadata_values)},
			{"progress", unsafe.Offsetof(saveOptions.progress), unsafe.Sizeof(saveOptions.progress)},
			{"progress_user", unsafe.Offsetof(saveOptions.progress_user), unsafe.Sizeof(saveOptions.progress_user)},
			{"tier", unsafe.Offsetof(saveOptions.tier), unsafe.Sizeof(saveOptions.tier)},
			{"flags", unsafe.Offsetof(saveOptions.flags), unsafe.Sizeof(saveOptions.flags)},
			{"metrics", unsafe.Offsetof(saveOptions.metrics), unsafe.Sizeof(saveOptions.metrics)},
			{"best_value", unsafe.Offsetof(saveOptions.best_value), unsafe.Sizeof(saveOptions.best_value)},
			{"has_best_value", unsafe.Offsetof(saveOptions.has_best_value), unsafe.Sizeof(saveOptions.has_best_value)},
			{"base", unsafe.Offsetof(saveOptions.base), unsafe.Sizeof(saveOptions.base)},
		}},
		{"ckpt_request_stats", unsafe.Sizeof(requestStats), unsafe.Alignof(requestStats), []cField{
			{"struct_size", unsafe.Offsetof(requestStats.struct_size), unsafe.Sizeof(requestStats.struct_size)},
			{"committed", unsafe.Offsetof(requestStats.committed), unsafe.Sizeof(requestStats.committed)},
			{"state_bytes", unsafe.Offsetof(requestStats.state_bytes), unsafe.Sizeof(requestStats.state_bytes)},
			{"bytes_to_write", unsafe.Offsetof(requestStats.bytes_to_write), unsafe.Sizeof(requestStats.bytes_to_write)},
			{"bytes_staged", unsafe.Offsetof(requestStats.bytes_staged), unsafe.Sizeof(requestStats.bytes_staged)},
			{"bytes_written", unsafe.Offsetof(requestStats.bytes_written), unsafe.Sizeof(requestStats.bytes_written)},
			{"bytes_committed", unsafe.Offsetof(requestStats.bytes_committed), unsafe.Sizeof(requestStats.bytes_committed)},
			{"files_written", unsafe.Offsetof(requestStats.files_written), unsafe.Sizeof(requestStats.files_written)},
			{"planning_ns", unsafe.Offsetof(requestStats.planning_ns), unsafe.Sizeof(requestStats.planning_ns)},
			{"staging_ns", unsafe.Offsetof(requestStats.staging_ns), unsafe.Sizeof(requestStats.staging_ns)},
			{"blocking_ns", unsafe.Offsetof(requestStats.blocking_ns), unsafe.Sizeof(requestStats.blocking_ns)},
			{"writing_ns", unsafe.Offsetof(requestStats.writing_ns), unsafe.Sizeof(requestStats.writing_ns)},
			{"committing_ns", unsafe.Offsetof(requestStats.committing_ns), unsafe.Sizeof(requestStats.committing_ns)},
			{"total_ns", unsafe.Offsetof(requestStats.total_ns), unsafe.Sizeof(requestStats.total_ns)},
		}},
		{"ckpt_load_options", unsafe.Sizeof(loadOptions), unsafe.Alignof(loadOptions), []cField{
			{"struct_size", unsafe.Offsetof(loadOptions.struct_size), unsafe.Sizeof(loadOptions.struct_size)},
			{"missing_keys", unsafe.Offsetof(loadOptions.missing_keys), unsafe.Sizeof(loadOptions.missing_keys)},
			{"unexpected_keys", unsafe.Offsetof(loadOptions.unexpected_keys), unsafe.Sizeof(loadOptions.unexpected_keys)},
			{"progress", unsafe.Offsetof(loadOptions.progress), unsafe.Sizeof(loadOptions.progress)},
			{"progress_user", unsafe.Offsetof(loadOptions.progress_user), unsafe.Sizeof(loadOptions.progress_user)},
			{"key_map", unsafe.Offsetof(loadOptions.key_map), unsafe.Sizeof(loadOptions.key_map)},
			{"key_map_count", unsafe.Offsetof(loadOptions.key_map_count), unsafe.Sizeof(loadOptions.key_map_count)},
		}},
		{"ckpt_manager_options", unsafe.Sizeof(managerOptions), unsafe.Alignof(managerOptions), []cField{
			{"struct_size", unsafe.Offsetof(managerOptions.struct_size), unsafe.Sizeof(managerOptions.struct_size)},
			{"keep_last", unsafe.Offsetof(managerOptions.keep_last), unsafe.Sizeof(managerOptions.keep_last)},
			{"keep_every", unsafe.Offsetof(managerOptions.keep_every), unsafe.Sizeof(managerOptions.keep_every)},
			{"memory_tier", unsafe.Offsetof(managerOptions.memory_tier), unsafe.Sizeof(managerOptions.memory_tier)},
			{"storage_every", unsafe.Offsetof(managerOptions.storage_every), unsafe.Sizeof(managerOptions.storage_every)},
			{"keep_best", unsafe.Offsetof(managerOptions.keep_best), unsafe.Sizeof(managerOptions.keep_best)},
			{"best_mode", unsafe.Offsetof(managerOptions.best_mode), unsafe.Sizeof(managerOptions.best_mode)},
			{"keep_for_seconds", unsafe.Offsetof(managerOptions.keep_for_seconds), unsafe.Sizeof(managerOptions.keep_for_seconds)},
		}},
		{"ckpt_checkpoint_info", unsafe.Sizeof(checkpointInfo), unsafe.Alignof(checkpointInfo), []cField{
			{"struct_size", unsafe.Offsetof(checkpointInfo.struct_size), unsafe.Sizeof(checkpointInfo.struct_size)},
			{"format_major", unsafe.Offsetof(checkpointInfo.format_major), unsafe.Sizeof(checkpointInfo.format_major)},
			{"format_minor", unsafe.Offsetof(checkpointInfo.format_minor), unsafe.Sizeof(checkpointInfo.format_minor)},
			{"world_size", unsafe.Offsetof(checkpointInfo.world_size), unsafe.Sizeof(checkpointInfo.world_size)},
			{"node_count", unsafe.Offsetof(checkpointInfo.node_count), unsafe.Sizeof(checkpointInfo.node_count)},
			{"tensor_count", unsafe.Offsetof(checkpointInfo.tensor_count), unsafe.Sizeof(checkpointInfo.tensor_count)},
			{"object_count", unsafe.Offsetof(checkpointInfo.object_count), unsafe.Sizeof(checkpointInfo.object_count)},
			{"common_count", unsafe.Offsetof(checkpointInfo.common_count), unsafe.Sizeof(checkpointInfo.common_count)},
			{"metadata_count", unsafe.Offsetof(checkpointInfo.metadata_count), unsafe.Sizeof(checkpointInfo.metadata_count)},
			{"file_count", unsafe.Offsetof(checkpointInfo.file_count), unsafe.Sizeof(checkpointInfo.file_count)},
			{"total_bytes", unsafe.Offsetof(checkpointInfo.total_bytes), unsafe.Sizeof(checkpointInfo.total_bytes)},
		}},
		{"ckpt_tensor_info", unsafe.Sizeof(tensorInfo), unsafe.Alignof(tensorInfo), []cField{
			{"struct_size", unsafe.Offsetof(tensorInfo.struct_size), unsafe.Sizeof(tensorInfo.struct_size)},
			{"key", unsafe.Offsetof(tensorInfo.key), unsafe.Sizeof(tensorInfo.key)},
			{"dtype", unsafe.Offsetof(tensorInfo.dtype), unsafe.Sizeof(tensorInfo.dtype)},
			{"ndim", unsafe.Offsetof(tensorInfo.ndim), unsafe.Sizeof(tensorInfo.ndim)},
			{"shape", unsafe.Offsetof(tensorInfo.shape), unsafe.Sizeof(tensorInfo.shape)},
			{"chunk_count", unsafe.Offsetof(tensorInfo.chunk_count), unsafe.Sizeof(tensorInfo.chunk_count)},
		}},
		{"ckpt_chunk_info", unsafe.Sizeof(chunkInfo), unsafe.Alignof(chunkInfo), []cField{
			{"struct_size", unsafe.Offsetof(chunkInfo.struct_size), unsafe.Sizeof(chunkInfo.struct_size)},
			{"ndim", unsafe.Offsetof(chunkInfo.ndim), unsafe.Sizeof(chunkInfo.ndim)},
			{"offset", unsafe.Offsetof(chunkInfo.offset), unsafe.Sizeof(chunkInfo.offset)},
			{"shape", unsafe.Offsetof(chunkInfo.shape), unsafe.Sizeof(chunkInfo.shape)},
			{"file", unsafe.Offsetof(chunkInfo.file), unsafe.Sizeof(chunkInfo.file)},
			{"file_offset", unsafe.Offsetof(chunkInfo.file_offset), unsafe.Sizeof(chunkInfo.file_offset)},
			{"byte_length", unsafe.Offsetof(chunkInfo.byte_length), unsafe.Sizeof(chunkInfo.byte_length)},
		}},
		{"ckpt_export_options", unsafe.Sizeof(exportOptions), unsafe.Alignof(exportOptions), []cField{
			{"struct_size", unsafe.Offsetof(exportOptions.struct_size), unsafe.Sizeof(exportOptions.struct_size)},
			{"max_shard_bytes", unsafe.Offsetof(exportOptions.max_shard_bytes), unsafe.Sizeof(exportOptions.max_shard_bytes)},
			{"keys", unsafe.Offsetof(exportOptions.keys), unsafe.Sizeof(exportOptions.keys)},
			{"key_count", unsafe.Offsetof(exportOptions.key_count), unsafe.Sizeof(exportOptions.key_count)},
			{"part_index", unsafe.Offsetof(exportOptions.part_index), unsafe.Sizeof(exportOptions.part_index)},
			{"part_count", unsafe.Offsetof(exportOptions.part_count), unsafe.Sizeof(exportOptions.part_count)},
			{"dtype", unsafe.Offsetof(exportOptions.dtype), unsafe.Sizeof(exportOptions.dtype)},
		}},
	}
}

// cConstants lists every integer constant of ckpt.h.
func cConstants() map[string]int64 {
	return map[string]int64{
		"CKPT_VERSION_MAJOR":              C.CKPT_VERSION_MAJOR,
		"CKPT_VERSION_MINOR":              C.CKPT_VERSION_MINOR,
		"CKPT_VERSION_PATCH":              C.CKPT_VERSION_PATCH,
		"CKPT_VERSION_NUMBER":             C.CKPT_VERSION_NUMBER,
		"CKPT_OK":                         C.CKPT_OK,
		"CKPT_E_INVALID_ARGUMENT":         C.CKPT_E_INVALID_ARGUMENT,
		"CKPT_E_NOT_FOUND":                C.CKPT_E_NOT_FOUND,
		"CKPT_E_ALREADY_EXISTS":           C.CKPT_E_ALREADY_EXISTS,
		"CKPT_E_MISMATCH":                 C.CKPT_E_MISMATCH,
		"CKPT_E_CORRUPT":                  C.CKPT_E_CORRUPT,
		"CKPT_E_VERSION":                  C.CKPT_E_VERSION,
		"CKPT_E_IO":                       C.CKPT_E_IO,
		"CKPT_E_NO_SPACE":                 C.CKPT_E_NO_SPACE,
		"CKPT_E_TIMEOUT":                  C.CKPT_E_TIMEOUT,
		"CKPT_E_PEER_FAILED":              C.CKPT_E_PEER_FAILED,
		"CKPT_E_UNSUPPORTED":              C.CKPT_E_UNSUPPORTED,
		"CKPT_E_NO_MEMORY":                C.CKPT_E_NO_MEMORY,
		"CKPT_E_IN_PROGRESS":              C.CKPT_E_IN_PROGRESS,
		"CKPT_E_INTERNAL":                 C.CKPT_E_INTERNAL,
		"CKPT_LOG_ERROR":                  C.CKPT_LOG_ERROR,
		"CKPT_LOG_WARNING":                C.CKPT_LOG_WARNING,
		"CKPT_LOG_INFO":                   C.CKPT_LOG_INFO,
		"CKPT_TRANSPORT_DEFAULT":          C.CKPT_TRANSPORT_DEFAULT,
		"CKPT_TRANSPORT_AUTO":             C.CKPT_TRANSPORT_AUTO,
		"CKPT_TRANSPORT_NONE":             C.CKPT_TRANSPORT_NONE,
		"CKPT_TRANSPORT_UCX":              C.CKPT_TRANSPORT_UCX,
		"CKPT_TRANSPORT_NCCL":             C.CKPT_TRANSPORT_NCCL,
		"CKPT_LOAD_READS_ONCE":            C.CKPT_LOAD_READS_ONCE,
		"CKPT_LOAD_READS_OWN":             C.CKPT_LOAD_READS_OWN,
		"CKPT_MAX_NDIM":                   C.CKPT_MAX_NDIM,
		"CKPT_DTYPE_BOOL":                 C.CKPT_DTYPE_BOOL,
		"CKPT_DTYPE_U8":                   C.CKPT_DTYPE_U8,
		"CKPT_DTYPE_I8":                   C.CKPT_DTYPE_I8,
		"CKPT_DTYPE_I16":                  C.CKPT_DTYPE_I16,
		"CKPT_DTYPE_U16":                  C.CKPT_DTYPE_U16,
		"CKPT_DTYPE_I32":                  C.CKPT_DTYPE_I32,
		"CKPT_DTYPE_U32":                  C.CKPT_DTYPE_U32,
		"CKPT_DTYPE_I64":                  C.CKPT_DTYPE_I64,
		"CKPT_DTYPE_U64":                  C.CKPT_DTYPE_U64,
		"CKPT_DTYPE_F16":                  C.CKPT_DTYPE_F16,
		"CKPT_DTYPE_BF16":                 C.CKPT_DTYPE_BF16,
		"CKPT_DTYPE_F32":                  C.CKPT_DTYPE_F32,
		"CKPT_DTYPE_F64":                  C.CKPT_DTYPE_F64,
		"CKPT_DTYPE_C64":                  C.CKPT_DTYPE_C64,
		"CKPT_DTYPE_F8_E4M3":              C.CKPT_DTYPE_F8_E4M3,
		"CKPT_DTYPE_F8_E5M2":              C.CKPT_DTYPE_F8_E5M2,
		"CKPT_DTYPE_C128":                 C.CKPT_DTYPE_C128,
		"CKPT_DTYPE_F8_E4M3FNUZ":          C.CKPT_DTYPE_F8_E4M3FNUZ,
		"CKPT_DTYPE_F8_E5M2FNUZ":          C.CKPT_DTYPE_F8_E5M2FNUZ,
		"CKPT_DTYPE_F8_E4M3B11FNUZ":       C.CKPT_DTYPE_F8_E4M3B11FNUZ,
		"CKPT_DTYPE_F8_E3M4":              C.CKPT_DTYPE_F8_E3M4,
		"CKPT_DTYPE_F8_E4M3_IEEE":         C.CKPT_DTYPE_F8_E4M3_IEEE,
		"CKPT_DTYPE_F8_E8M0":              C.CKPT_DTYPE_F8_E8M0,
		"CKPT_DTYPE_F4_E2M1":              C.CKPT_DTYPE_F4_E2M1,
		"CKPT_DTYPE_I4":                   C.CKPT_DTYPE_I4,
		"CKPT_DTYPE_U4":                   C.CKPT_DTYPE_U4,
		"CKPT_DTYPE_I2":                   C.CKPT_DTYPE_I2,
		"CKPT_DTYPE_U2":                   C.CKPT_DTYPE_U2,
		"CKPT_MEMORY_HOST":                C.CKPT_MEMORY_HOST,
		"CKPT_MEMORY_CUDA":                C.CKPT_MEMORY_CUDA,
		"CKPT_SHARD_FLATTENED":            C.CKPT_SHARD_FLATTENED,
		"CKPT_SHARD_ALLOW_SHAPE_MISMATCH": C.CKPT_SHARD_ALLOW_SHAPE_MISMATCH,
		"CKPT_SHARD_ALLOW_DTYPE_CAST":     C.CKPT_SHARD_ALLOW_DTYPE_CAST,
		"CKPT_SHARD_COMPRESS":             C.CKPT_SHARD_COMPRESS,
		"CKPT_PHASE_PLANNING":             C.CKPT_PHASE_PLANNING,
		"CKPT_PHASE_STAGING":              C.CKPT_PHASE_STAGING,
		"CKPT_PHASE_WRITING":              C.CKPT_PHASE_WRITING,
		"CKPT_PHASE_COMMITTING":           C.CKPT_PHASE_COMMITTING,
		"CKPT_PHASE_COMMITTED":            C.CKPT_PHASE_COMMITTED,
		"CKPT_PHASE_READING":              C.CKPT_PHASE_READING,
		"CKPT_PHASE_LOADED":               C.CKPT_PHASE_LOADED,
		"CKPT_PHASE_FAILED":               C.CKPT_PHASE_FAILED,
		"CKPT_TIER_STORAGE":               C.CKPT_TIER_STORAGE,
		"CKPT_TIER_MEMORY":                C.CKPT_TIER_MEMORY,
		"CKPT_TIER_BOTH":                  C.CKPT_TIER_BOTH,
		"CKPT_SAVE_IN_PLACE":              C.CKPT_SAVE_IN_PLACE,
		"CKPT_SAVE_COPY_ON_WRITE":         C.CKPT_SAVE_COPY_ON_WRITE,
		"CKPT_SAVE_CHECK_REPLICAS":        C.CKPT_SAVE_CHECK_REPLICAS,
		"CKPT_SAVE_INCREMENTAL":           C.CKPT_SAVE_INCREMENTAL,
		"CKPT_SAVE_COMPRESS":              C.CKPT_SAVE_COMPRESS,
		"CKPT_BEST_MAX":                   C.CKPT_BEST_MAX,
		"CKPT_BEST_MIN":                   C.CKPT_BEST_MIN,
		"CKPT_STRICT_FAIL":                C.CKPT_STRICT_FAIL,
		"CKPT_STRICT_LOG":                 C.CKPT_STRICT_LOG,
		"CKPT_STRICT_IGNORE":              C.CKPT_STRICT_IGNORE,
	}
}

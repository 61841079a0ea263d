/* The header's *_INIT macros as functions, since cgo cannot expand brace initialisers. The binding builds its
 * structs with these: the defaults and struct_size of the header it was compiled against. */
#ifndef CKPT_GO_BINDING_H
#define CKPT_GO_BINDING_H

#include <ckpt.h>

static inline ckpt_context_options ckpt_go_context_options(void) {
  ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
  return opts;
}

static inline ckpt_context_stats ckpt_go_context_stats(void) {
  ckpt_context_stats stats = CKPT_CONTEXT_STATS_INIT;
  return stats;
}

static inline ckpt_tensor_shard ckpt_go_tensor_shard(void) {
  ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
  return shard;
}

static inline ckpt_save_options ckpt_go_save_options(void) {
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  return opts;
}

static inline ckpt_request_stats ckpt_go_request_stats(void) {
  ckpt_request_stats stats = CKPT_REQUEST_STATS_INIT;
  return stats;
}

/* progress.go's exported trampoline, and the two halves of a ckpt_progress_fn for it: the function, and the
 * runtime/cgo.Handle of the Go callback as its user pointer (a number, never dereferenced). */
extern void ckptGoProgress(void* user, int32_t phase, uint64_t done, uint64_t total);

static inline ckpt_progress_fn ckpt_go_progress_fn(void) { return ckptGoProgress; }

static inline void* ckpt_go_handle_pointer(uintptr_t handle) { return (void*)handle; }

static inline ckpt_load_options ckpt_go_load_options(void) {
  ckpt_load_options opts = CKPT_LOAD_OPTIONS_INIT;
  return opts;
}

static inline ckpt_manager_options ckpt_go_manager_options(void) {
  ckpt_manager_options opts = CKPT_MANAGER_OPTIONS_INIT;
  return opts;
}

static inline ckpt_checkpoint_info ckpt_go_checkpoint_info(void) {
  ckpt_checkpoint_info info = CKPT_CHECKPOINT_INFO_INIT;
  return info;
}

static inline ckpt_tensor_info ckpt_go_tensor_info(void) {
  ckpt_tensor_info info = CKPT_TENSOR_INFO_INIT;
  return info;
}

static inline ckpt_chunk_info ckpt_go_chunk_info(void) {
  ckpt_chunk_info info = CKPT_CHUNK_INFO_INIT;
  return info;
}

static inline ckpt_export_options ckpt_go_export_options(void) {
  ckpt_export_options opts = CKPT_EXPORT_OPTIONS_INIT;
  return opts;
}

#endif

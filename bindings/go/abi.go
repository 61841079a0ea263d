package ckpt

/*
#include <stdlib.h>
#include "binding.h"

// Large enough for any future version of an options struct that the library's init function may fill.
#define CKPT_GO_INIT_SCRATCH 4096

typedef void (*ckpt_go_init_fn)(void*);

// The struct_size that the library's init function writes, into scratch room so that a newer library cannot
// write past the end.
static uint32_t ckpt_go_library_struct_size(ckpt_go_init_fn init) {
  uint32_t size = 0;
  void* scratch = calloc(1, CKPT_GO_INIT_SCRATCH);
  if (scratch == NULL) return 0;
  init(scratch);
  size = *(const uint32_t*)scratch;
  free(scratch);
  return size;
}

static uint32_t ckpt_go_library_context_options_size(void) {
  return ckpt_go_library_struct_size((ckpt_go_init_fn)ckpt_context_options_init);
}
static uint32_t ckpt_go_library_tensor_shard_size(void) {
  return ckpt_go_library_struct_size((ckpt_go_init_fn)ckpt_tensor_shard_init);
}
static uint32_t ckpt_go_library_save_options_size(void) {
  return ckpt_go_library_struct_size((ckpt_go_init_fn)ckpt_save_options_init);
}
static uint32_t ckpt_go_library_load_options_size(void) {
  return ckpt_go_library_struct_size((ckpt_go_init_fn)ckpt_load_options_init);
}
static uint32_t ckpt_go_library_manager_options_size(void) {
  return ckpt_go_library_struct_size((ckpt_go_init_fn)ckpt_manager_options_init);
}
*/
import "C"

// structSize pairs the struct_size this package compiles in (from the header's _INIT macros) with the one that
// the loaded library's init function writes. They are equal when the header and the library match.
type structSize struct {
	name    string
	binding uint32
	library uint32
}

// structSizes lists the options structs that the binding fills. It lives outside the tests because cgo cannot
// be used in _test.go files.
func structSizes() []structSize {
	return []structSize{
		{"ckpt_context_options", uint32(C.ckpt_go_context_options().struct_size),
			uint32(C.ckpt_go_library_context_options_size())},
		{"ckpt_tensor_shard", uint32(C.ckpt_go_tensor_shard().struct_size),
			uint32(C.ckpt_go_library_tensor_shard_size())},
		{"ckpt_save_options", uint32(C.ckpt_go_save_options().struct_size),
			uint32(C.ckpt_go_library_save_options_size())},
		{"ckpt_load_options", uint32(C.ckpt_go_load_options().struct_size),
			uint32(C.ckpt_go_library_load_options_size())},
		{"ckpt_manager_options", uint32(C.ckpt_go_manager_options().struct_size),
			uint32(C.ckpt_go_library_manager_options_size())},
	}
}

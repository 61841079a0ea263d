// The init functions of ckpt.h's options structs, in every ABI version the library still serves.
//
// CKPT_0 (ckpt 0.1.0) declared `void ckpt_X_init(X* opts)`, which wrote the library's own sizeof: a program built
// against that header and run with a library whose struct had grown would have been overrun. Programs built since
// call `int32_t ckpt_X_init(X* opts, uint32_t struct_size)` (version CKPT_1), which writes at most the caller's
// size. Programs linked against the old header bind the name at version CKPT_0, so the one-argument functions stay,
// frozen: they write the CKPT_0 size and never more. `.symver` gives each implementation its versioned name;
// runtime/capi/libckpt.map lists the names under both versions and keeps the implementations' own names local.
#include <cstddef>
#include <cstring>

#include "ckpt.h"

namespace {

// The sizes of the options structs in CKPT_0 (LP64), which its programs allocated. Pinned: never change them.
// abi_v0_program_runs_on_this_library checks them against the CKPT_0 header itself (abi/v0/ckpt.h).
constexpr uint32_t kContextOptionsSizeV0 = 96;
constexpr uint32_t kTensorShardSizeV0 = 112;
constexpr uint32_t kSaveOptionsSizeV0 = 24;
constexpr uint32_t kLoadOptionsSizeV0 = 12;
constexpr uint32_t kManagerOptionsSizeV0 = 16;
// The sizes of ckpt_export_options and ckpt_collectives when they appeared (CKPT_2).
constexpr uint32_t kExportOptionsSizeV2 = 48;
constexpr uint32_t kCollectivesSizeV2 = 48;
static_assert(sizeof(void*) == 8, "the CKPT_0 sizes above are those of LP64 platforms");
// Structs only grow, by fields appended at the end.
static_assert(sizeof(ckpt_context_options) >= kContextOptionsSizeV0);
static_assert(sizeof(ckpt_tensor_shard) >= kTensorShardSizeV0);
static_assert(sizeof(ckpt_save_options) >= kSaveOptionsSizeV0);
static_assert(sizeof(ckpt_load_options) >= kLoadOptionsSizeV0);
static_assert(sizeof(ckpt_manager_options) >= kManagerOptionsSizeV0);
static_assert(sizeof(ckpt_export_options) >= kExportOptionsSizeV2);
static_assert(sizeof(ckpt_collectives) >= kCollectivesSizeV2);

// Writes the first `struct_size` bytes of `defaults` (with struct_size set) to `out`. Every version of a struct
// is a prefix of the current one, so a prefix of the current defaults is the defaults of the caller's version.
template <typename Options>
int32_t InitOptions(Options* out, uint32_t struct_size, uint32_t oldest_size, Options defaults) {
  if (out == nullptr || struct_size < oldest_size) return CKPT_E_INVALID_ARGUMENT;
  if (struct_size > sizeof(Options)) return CKPT_E_UNSUPPORTED;
  defaults.struct_size = struct_size;
  std::memcpy(out, &defaults, struct_size);
  return CKPT_OK;
}

}  // namespace

extern "C" {

CKPT_API int32_t ckpt_context_options_init_v1(ckpt_context_options* opts, uint32_t struct_size) {
  return InitOptions(opts, struct_size, kContextOptionsSizeV0, ckpt_context_options CKPT_CONTEXT_OPTIONS_INIT);
}
CKPT_API void ckpt_context_options_init_v0(ckpt_context_options* opts) {
  (void)ckpt_context_options_init_v1(opts, kContextOptionsSizeV0);
}
__asm__(".symver ckpt_context_options_init_v1, ckpt_context_options_init@@CKPT_1");
__asm__(".symver ckpt_context_options_init_v0, ckpt_context_options_init@CKPT_0");

CKPT_API int32_t ckpt_tensor_shard_init_v1(ckpt_tensor_shard* shard, uint32_t struct_size) {
  return InitOptions(shard, struct_size, kTensorShardSizeV0, ckpt_tensor_shard CKPT_TENSOR_SHARD_INIT);
}
CKPT_API void ckpt_tensor_shard_init_v0(ckpt_tensor_shard* shard) {
  (void)ckpt_tensor_shard_init_v1(shard, kTensorShardSizeV0);
}
__asm__(".symver ckpt_tensor_shard_init_v1, ckpt_tensor_shard_init@@CKPT_1");
__asm__(".symver ckpt_tensor_shard_init_v0, ckpt_tensor_shard_init@CKPT_0");

CKPT_API int32_t ckpt_save_options_init_v1(ckpt_save_options* opts, uint32_t struct_size) {
  return InitOptions(opts, struct_size, kSaveOptionsSizeV0, ckpt_save_options CKPT_SAVE_OPTIONS_INIT);
}
CKPT_API void ckpt_save_options_init_v0(ckpt_save_options* opts) {
  (void)ckpt_save_options_init_v1(opts, kSaveOptionsSizeV0);
}
__asm__(".symver ckpt_save_options_init_v1, ckpt_save_options_init@@CKPT_1");
__asm__(".symver ckpt_save_options_init_v0, ckpt_save_options_init@CKPT_0");

CKPT_API int32_t ckpt_load_options_init_v1(ckpt_load_options* opts, uint32_t struct_size) {
  return InitOptions(opts, struct_size, kLoadOptionsSizeV0, ckpt_load_options CKPT_LOAD_OPTIONS_INIT);
}
CKPT_API void ckpt_load_options_init_v0(ckpt_load_options* opts) {
  (void)ckpt_load_options_init_v1(opts, kLoadOptionsSizeV0);
}
__asm__(".symver ckpt_load_options_init_v1, ckpt_load_options_init@@CKPT_1");
__asm__(".symver ckpt_load_options_init_v0, ckpt_load_options_init@CKPT_0");

CKPT_API int32_t ckpt_manager_options_init_v1(ckpt_manager_options* opts, uint32_t struct_size) {
  return InitOptions(opts, struct_size, kManagerOptionsSizeV0, ckpt_manager_options CKPT_MANAGER_OPTIONS_INIT);
}
CKPT_API void ckpt_manager_options_init_v0(ckpt_manager_options* opts) {
  (void)ckpt_manager_options_init_v1(opts, kManagerOptionsSizeV0);
}
__asm__(".symver ckpt_manager_options_init_v1, ckpt_manager_options_init@@CKPT_1");
__asm__(".symver ckpt_manager_options_init_v0, ckpt_manager_options_init@CKPT_0");

// Since CKPT_2, with no older version to serve.
CKPT_API int32_t ckpt_export_options_init(ckpt_export_options* opts, uint32_t struct_size) {
  return InitOptions(opts, struct_size, kExportOptionsSizeV2, ckpt_export_options CKPT_EXPORT_OPTIONS_INIT);
}

CKPT_API int32_t ckpt_collectives_init(ckpt_collectives* collectives, uint32_t struct_size) {
  return InitOptions(collectives, struct_size, kCollectivesSizeV2, ckpt_collectives CKPT_COLLECTIVES_INIT);
}

}  // extern "C"

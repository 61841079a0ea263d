// The export functions of include/ckpt.h: any process, no collective.
#include <string>

#include "ckpt.h"
#include "runtime/capi/capi_internal.h"
#include "runtime/export/safetensors_export.h"

using ckpt::Status;
using ckpt::capi::CopyOptions;
using ckpt::capi::Guard;
using ckpt::capi::NullArgument;
namespace rt = ckpt::runtime;

extern "C" {

int32_t ckpt_export(const char* checkpoint, const char* out, const ckpt_export_options* opts, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (checkpoint == nullptr || out == nullptr) return NullArgument("checkpoint or out");
    ckpt_export_options given = CKPT_EXPORT_OPTIONS_INIT;
    RETURN_IF_ERROR(CopyOptions(opts, &given, "ckpt_export_options"));
    rt::ExportOptions options;
    options.max_shard_bytes = given.max_shard_bytes;
    if (given.key_count != 0 && given.keys == nullptr) return NullArgument("keys (key_count is not 0)");
    for (uint64_t i = 0; i < given.key_count; ++i) {
      if (given.keys[i] == nullptr) return ckpt::InvalidArgument("keys[" + std::to_string(i) + "] is NULL");
      options.keys.emplace_back(given.keys[i]);
    }
    options.part_index = given.part_index;
    options.part_count = given.part_count;
    options.dtype = given.dtype;
    return rt::ExportSafetensors(checkpoint, out, options).status();
  });
}

}  // extern "C"

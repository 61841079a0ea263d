// The `ckpt` tool's shared helpers (tools/cli_common.h).
#include "tools/cli_common.h"

#include <cstdio>

namespace ckpt_cli {

int UsageError(const std::string& message) {
  std::fprintf(stderr, "ckpt: %s\nRun with --help for more information.\n", message.c_str());
  return kExitUsage;
}

int Report(const std::string& what, int32_t status, const ckpt_error_t* err) {
  return Report(Failure{what, status, err ? ckpt_error_message(err) : ""});
}

int Report(const Failure& failure) {
  std::fprintf(stderr, "ckpt: %s: %s%s%s\n", failure.what.c_str(), ckpt_status_string(failure.status),
               failure.message.empty() ? "" : ": ", failure.message.c_str());
  return kExitFailed;
}

std::optional<Checkpoint> TryOpen(const std::string& dir, Failure* failure) {
  Checkpoint checkpoint;
  checkpoint.dir = dir;
  ckpt_error_t* err = nullptr;
  if (const int32_t status = ckpt_error_create(&err); status != CKPT_OK) {
    *failure = {"creating an error object", status, ""};
    return std::nullopt;
  }
  checkpoint.err.reset(err);
  ckpt_reader_t* reader = nullptr;
  if (const int32_t status = ckpt_reader_open(dir.c_str(), &reader, err); status != CKPT_OK) {
    *failure = {"opening " + dir, status, ckpt_error_message(err)};
    return std::nullopt;
  }
  checkpoint.reader.reset(reader);
  return checkpoint;
}

std::optional<Checkpoint> Open(const std::string& dir) {
  Failure failure;
  auto checkpoint = TryOpen(dir, &failure);
  if (!checkpoint) Report(failure);
  return checkpoint;
}

std::optional<ckpt_checkpoint_info> Info(Checkpoint& checkpoint, Failure* failure) {
  ckpt_checkpoint_info info = CKPT_CHECKPOINT_INFO_INIT;
  if (const int32_t status = ckpt_reader_info(checkpoint.reader.get(), &info, checkpoint.err.get());
      status != CKPT_OK) {
    *failure = {"reading " + checkpoint.dir, status, ckpt_error_message(checkpoint.err.get())};
    return std::nullopt;
  }
  return info;
}

std::optional<ckpt_tensor_info> FindTensor(Checkpoint& checkpoint, const std::string& key) {
  Failure ignored;
  const auto info = Info(checkpoint, &ignored);
  for (uint64_t t = 0; info && t < info->tensor_count; ++t) {
    ckpt_tensor_info tensor = CKPT_TENSOR_INFO_INIT;
    if (ckpt_reader_tensor(checkpoint.reader.get(), t, &tensor, checkpoint.err.get()) != CKPT_OK) break;
    if (tensor.key && key == tensor.key) return tensor;
  }
  return std::nullopt;
}

std::optional<uint64_t> ElementCount(uint32_t ndim, const uint64_t* shape) {
  uint64_t count = 1;
  for (uint32_t d = 0; d < ndim; ++d) {
    if (__builtin_mul_overflow(count, shape[d], &count)) return std::nullopt;
  }
  return count;
}

std::optional<uint64_t> BoxBytes(int32_t dtype, uint32_t ndim, const uint64_t* shape) {
  const auto count = ElementCount(ndim, shape);
  uint64_t bytes = 0;
  if (!count || __builtin_mul_overflow(*count, uint64_t{ckpt_dtype_size(dtype)}, &bytes)) return std::nullopt;
  return bytes;
}

std::string FormatShape(uint32_t ndim, const uint64_t* shape) {
  std::string text = "[";
  for (uint32_t d = 0; d < ndim; ++d) text += (d ? ", " : "") + std::to_string(shape[d]);
  return text + "]";
}

std::string FormatBox(uint32_t ndim, const uint64_t* offset, const uint64_t* shape) {
  std::string text = "[";
  for (uint32_t d = 0; d < ndim; ++d) {
    text += (d ? ", " : "") + std::to_string(offset[d]) + ":" + std::to_string(shape[d]);
  }
  return text + "]";
}

std::string FormatBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < sizeof(kUnits) / sizeof(kUnits[0])) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f %s", value, kUnits[unit]);
  return text;
}

std::string Count(uint64_t count, const char* singular, const char* plural) {
  return std::to_string(count) + " " + (count == 1 ? singular : plural);
}

nlohmann::json ShapeJson(uint32_t ndim, const uint64_t* shape) {
  nlohmann::json array = nlohmann::json::array();
  for (uint32_t d = 0; d < ndim; ++d) array.push_back(shape[d]);
  return array;
}

void PrintJson(const nlohmann::json& value) {
  // Keys and values are bytes from the checkpoint: invalid UTF-8 is replaced rather than thrown on.
  std::printf("%s\n", value.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

}  // namespace ckpt_cli

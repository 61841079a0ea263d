// What the `ckpt` tool's verbs share: exit codes, owned handles, an opened checkpoint, error reports, formatting.
#pragma once

#include <ckpt.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ckpt_cli {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;  // the checkpoint cannot be read, fails verification, or differs (diff)
constexpr int kExitUsage = 2;

struct ErrorFree {
  void operator()(ckpt_error_t* err) const { ckpt_error_free(err); }
};
struct ReaderFree {
  void operator()(ckpt_reader_t* reader) const { ckpt_reader_free(reader); }
};
using ErrorPtr = std::unique_ptr<ckpt_error_t, ErrorFree>;
using ReaderPtr = std::unique_ptr<ckpt_reader_t, ReaderFree>;

// An open checkpoint and the error object its calls fill.
struct Checkpoint {
  std::string dir;
  ErrorPtr err;
  ReaderPtr reader;
};

// Why a call failed: what was being done, the status, the library's message.
struct Failure {
  std::string what;
  int32_t status = CKPT_OK;
  std::string message;
};

// Prints "ckpt: MESSAGE" and a pointer to --help; returns kExitUsage. For what only the verb can check (a box
// against the tensor's rank); the parser reports the rest.
int UsageError(const std::string& message);
// Prints why a call failed and returns kExitFailed.
int Report(const std::string& what, int32_t status, const ckpt_error_t* err);
int Report(const Failure& failure);
// Opens `dir` (a checkpoint or safetensors weights), or says why it cannot in `failure`.
std::optional<Checkpoint> TryOpen(const std::string& dir, Failure* failure);
// TryOpen, reporting a failure on standard error.
std::optional<Checkpoint> Open(const std::string& dir);
// The info of an open checkpoint, or a failure.
std::optional<ckpt_checkpoint_info> Info(Checkpoint& checkpoint, Failure* failure);
// The tensor named `key`, or nothing if the checkpoint has none (or cannot list its tensors).
std::optional<ckpt_tensor_info> FindTensor(Checkpoint& checkpoint, const std::string& key);

// Element count of a shape, or nothing if it overflows 64 bits.
std::optional<uint64_t> ElementCount(uint32_t ndim, const uint64_t* shape);
// Bytes of a box of `dtype` elements, or nothing if it overflows 64 bits.
std::optional<uint64_t> BoxBytes(int32_t dtype, uint32_t ndim, const uint64_t* shape);
std::string FormatShape(uint32_t ndim, const uint64_t* shape);
std::string FormatBox(uint32_t ndim, const uint64_t* offset, const uint64_t* shape);
// "12 B", "1.5 KiB", ...
std::string FormatBytes(uint64_t bytes);
// "1 tensor", "2 tensors".
std::string Count(uint64_t count, const char* singular, const char* plural);
nlohmann::json ShapeJson(uint32_t ndim, const uint64_t* shape);
// Writes `value` to standard output, indented, with a final newline.
void PrintJson(const nlohmann::json& value);

}  // namespace ckpt_cli

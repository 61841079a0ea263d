// What the `ckpt` tool's commands share: exit codes, owned handles, an opened checkpoint, error reports.
#pragma once

#include <ckpt.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ckpt_cli {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
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

// Prints the message and the usage text; returns kExitUsage.
int UsageError(const std::string& message);
// Prints why a call failed and returns kExitFailed.
int Report(const std::string& what, int32_t status, const ckpt_error_t* err);
// Opens `dir` (a checkpoint or safetensors weights), or reports why it cannot and returns nothing.
std::optional<Checkpoint> Open(const std::string& dir);

// ckpt export [flags] DIR OUT, and ckpt import [flags] SOURCE DIR (tools/cli_convert.cc).
int Export(const std::string& dir, const std::string& out, const std::vector<std::string>& flags);
int Import(const std::string& source, const std::string& dir, const std::vector<std::string>& flags);

}  // namespace ckpt_cli

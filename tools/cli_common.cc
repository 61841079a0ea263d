// The `ckpt` tool's shared helpers (tools/cli_common.h).
#include "tools/cli_common.h"

#include <cstdio>

namespace ckpt_cli {

int Report(const std::string& what, int32_t status, const ckpt_error_t* err) {
  const char* message = err ? ckpt_error_message(err) : "";
  std::fprintf(stderr, "ckpt: %s: %s%s%s\n", what.c_str(), ckpt_status_string(status), *message ? ": " : "", message);
  return kExitFailed;
}

std::optional<Checkpoint> Open(const std::string& dir) {
  Checkpoint checkpoint;
  checkpoint.dir = dir;
  ckpt_error_t* err = nullptr;
  if (const int32_t status = ckpt_error_create(&err); status != CKPT_OK) {
    Report("creating an error object", status, nullptr);
    return std::nullopt;
  }
  checkpoint.err.reset(err);
  ckpt_reader_t* reader = nullptr;
  if (const int32_t status = ckpt_reader_open(dir.c_str(), &reader, err); status != CKPT_OK) {
    Report("opening " + dir, status, err);
    return std::nullopt;
  }
  checkpoint.reader.reset(reader);
  return checkpoint;
}

}  // namespace ckpt_cli

// The `ckpt` tool's verbs, each with the options its command line gives it (tools/ckpt_cli.cc parses them). Each
// returns an exit code of tools/cli_common.h.
#pragma once

#include <ckpt.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ckpt_cli {

// ckpt ls (tools/cli_list.cc): a checkpoint's contents, or a manager root's steps.
struct ListOptions {
  std::string dir;
  bool chunks = false;
  bool json = false;
};
int List(const ListOptions& options);

// ckpt verify, ckpt meta, ckpt cat (tools/cli_inspect.cc).
struct VerifyOptions {
  std::string dir;
  bool json = false;
};
int Verify(const VerifyOptions& options);

struct MetaOptions {
  std::string dir;
  std::vector<std::string> keys;
  bool json = false;
};
int Meta(const MetaOptions& options);

struct CatOptions {
  std::string dir;
  std::string key;
  std::optional<std::string> box;  // "START:LEN,START:LEN,...", one pair per dimension
  bool raw = false;
  std::string npy;  // a .npy file to write the box to; empty: none
};
int Cat(const CatOptions& options);

// ckpt diff (tools/cli_diff.cc).
struct DiffOptions {
  std::string a;
  std::string b;
  uint64_t window_bytes = 0;  // what is read of one tensor, from each side, at a time
  bool json = false;
};
int Diff(const DiffOptions& options);

// ckpt export and ckpt import (tools/cli_convert.cc).
struct ExportOptions {
  std::string dir;
  std::string out;
  std::optional<uint64_t> max_shard_bytes;  // none: the library's default
  std::vector<std::string> keys;            // empty: every tensor
  int32_t dtype = 0;                        // 0: as stored
  uint32_t part_index = 0;
  uint32_t part_count = 1;
};
int Export(const ExportOptions& options);

struct ImportOptions {
  std::string source;
  std::string dir;
  bool compress = false;  // CKPT_SAVE_COMPRESS
};
int Import(const ImportOptions& options);

// Parsers of option values, for the command line's checks: nothing if `text` is not one.
// A size such as 5GB, 500MB, 2GiB or 1000 (bytes), as Hugging Face writes max_shard_size.
std::optional<uint64_t> ParseSize(const std::string& text);
// The CKPT_DTYPE_* code whose name (ckpt_dtype_name) is `name`, in any case: "bf16", "F32".
std::optional<int32_t> ParseDtype(const std::string& name);

}  // namespace ckpt_cli

// ckpt: inspect, check, compare and convert checkpoints from the shell. It uses only the public C API
// (include/ckpt.h), so it also shows that the reader API is enough to explore a checkpoint without knowing the file
// format. This file is the command line (CLI11): each verb's arguments, help and checks; the verbs live in
// tools/cli_*.cc.

#include <ckpt.h>

#include <CLI/CLI.hpp>
#include <cinttypes>
#include <cstdio>
#include <sstream>

#include "tools/cli_common.h"
#include "tools/cli_verbs.h"

namespace {

using namespace ckpt_cli;

constexpr const char* kExitStatus =
    "Exit status: 0 on success; 1 if a checkpoint cannot be read or fails verification, or (diff) if the tensors\n"
    "differ; 2 on usage errors. `ckpt VERB --help` describes a verb.";

constexpr const char* kEscaping =
    "Text output shows what a checkpoint names escaped where it could drive a terminal: control characters\n"
    "as \\n, \\t, \\r, \\x1b or \\u0085, bytes that are not UTF-8 as \\xff, a backslash as \\\\.\n"
    "--json keeps every string exact.";

constexpr const char* kJsonHelp =
    "print one JSON object instead of text (ASCII, strings exact; refused if a string is not UTF-8)";

constexpr const char* kDirHelp = "a checkpoint directory, or safetensors weights (a file, a directory, an index)";

// The function an option runs on its value, as CLI11 takes it; `parse` throws CLI::ValidationError on a bad value.
template <typename Parse>
CLI::Option* AddParsedOption(CLI::App* command, const std::string& name, Parse parse, const std::string& help,
                             const std::string& value_name) {
  return command->add_option_function<std::string>(name, parse, help)->type_name(value_name);
}

// A verb: `summary` in the top-level list, `details` and the exit status under the verb's own --help.
CLI::App* AddVerb(CLI::App& app, const std::string& name, const std::string& summary, const std::string& details) {
  return app.add_subcommand(name, summary)->footer(details + "\n\n" + kExitStatus);
}

CLI::App* AddList(CLI::App& app, ListOptions& options) {
  CLI::App* ls = AddVerb(app, "ls", "list what a checkpoint holds, or the steps of a manager's root",
                         "Lists a checkpoint's tensors (dtype, shape, chunks, bytes), objects (grid, bytes), common\n"
                         "entries and metadata keys; or a manager root's committed steps (bytes, which one `latest`\n"
                         "names) and the directories of saves that did not commit. Changes nothing.");
  ls->add_flag("--chunks", options.chunks, "also list each tensor's stored chunks (box, file @ offset, bytes)");
  ls->add_flag("--json", options.json, kJsonHelp);
  ls->add_option("DIR", options.dir, std::string(kDirHelp) + ", or a manager's root of step-N directories")->required();
  return ls;
}

CLI::App* AddVerify(CLI::App& app, VerifyOptions& options) {
  CLI::App* verify = AddVerb(app, "verify", "check every checksum and file size",
                             "Reads every chunk and checks every checksum: prints OK, or the error (exit status 1).");
  verify->add_flag("--json", options.json, "print {\"path\", \"ok\", and on failure \"status\", \"error\"}");
  verify->add_option("DIR", options.dir, kDirHelp)->required();
  return verify;
}

CLI::App* AddCat(CLI::App& app, CatOptions& options) {
  CLI::App* cat = AddVerb(app, "cat", "print or write a tensor, a box of one, or a common entry",
                          "Prints a tensor, or a box of it, one line per row of its last dimension; or writes it with\n"
                          "--raw or --npy. A KEY that is a common entry prints its bytes (as text when they are text,\n"
                          "else in hex), or writes them with --raw.");
  CLI::Option* raw = cat->add_flag("--raw", options.raw, "write the row-major bytes to standard output instead");
  cat->add_option("--npy", options.npy,
                  "write the box to a new .npy file (numpy format 1.0; never over a file nor through a link); refused "
                  "for dtypes numpy lacks (BF16, float8, float4, sub-byte integers)")
      ->type_name("OUT.npy")
      ->excludes(raw);
  cat->add_option("DIR", options.dir, kDirHelp)->required();
  cat->add_option("KEY", options.key, "a tensor or common entry")->required();
  cat->add_option_function<std::string>(
      "BOX", [&options](const std::string& box) { options.box = box; },
      "START:LEN,START:LEN,... one pair per dimension (default: the whole tensor)");
  return cat;
}

CLI::App* AddMeta(CLI::App& app, MetaOptions& options) {
  CLI::App* meta = AddVerb(app, "meta", "print user metadata values", "Prints the value of each KEY, one a line.");
  meta->add_flag("--json", options.json, "print one JSON object of KEY: value");
  meta->add_option("DIR", options.dir, kDirHelp)->required();
  meta->add_option("KEY", options.keys, "metadata keys (ckpt ls lists them)")->required();
  return meta;
}

CLI::App* AddDiff(CLI::App& app, DiffOptions& options) {
  CLI::App* diff =
      AddVerb(app, "diff", "compare the tensors of two checkpoints, value by value",
              "Compares the tensors of A and B, which may be saved in different layouts or be safetensors\n"
              "weights: tensors only in one, dtype or shape differences, and per tensor `equal` or the\n"
              "maximum absolute difference (integers exactly, floating values in double). Reads each\n"
              "tensor in windows, never whole. Exit status 1 if anything differs.");
  options.window_bytes = uint64_t{64} << 20;
  AddParsedOption(
      diff, "--window",
      [&options](const std::string& text) {
        const auto bytes = ParseSize(text);
        if (!bytes || *bytes == 0) throw CLI::ValidationError("--window", "'" + text + "' is not a size such as 64MiB");
        options.window_bytes = *bytes;
      },
      "bytes of one tensor read from each side at a time (default 64MiB)", "SIZE");
  diff->add_flag("--json", options.json,
                 "print one JSON object: equal, only_in_a, only_in_b, and per tensor result (equal, different, "
                 "dtype, shape), differing_elements, max_abs_difference (null where NaN meets a number)");
  diff->add_option("A", options.a, kDirHelp)->required();
  diff->add_option("B", options.b, kDirHelp)->required();
  return diff;
}

CLI::App* AddExport(CLI::App& app, ExportOptions& options) {
  CLI::App* command =
      AddVerb(app, "export", "write the tensors as safetensors",
              "Writes the tensors (whole) as safetensors: OUT ending in .safetensors is one file, else a\n"
              "directory in the Hugging Face layout (model.safetensors, or numbered files of at most\n"
              "SIZE and an index).");
  AddParsedOption(
      command, "--max-shard-size",
      [&options](const std::string& text) {
        options.max_shard_bytes = ParseSize(text);
        if (!options.max_shard_bytes) {
          throw CLI::ValidationError("--max-shard-size", "'" + text + "' is not a size such as 5GB, 500MB or 2GiB");
        }
      },
      "the most bytes of a file of the directory layout (default 5GB)", "SIZE");
  AddParsedOption(
      command, "--keys",
      [&options](const std::string& text) {
        std::stringstream list(text);
        for (std::string key; std::getline(list, key, ',');) {
          if (!key.empty()) options.keys.push_back(key);
        }
      },
      "the tensors to export (default: all)", "K1,K2,...");
  AddParsedOption(
      command, "--dtype",
      [&options](const std::string& text) {
        const auto dtype = ParseDtype(text);
        if (!dtype) throw CLI::ValidationError("--dtype", "'" + text + "' names no dtype");
        options.dtype = *dtype;
      },
      "convert the floating tensors to F16, BF16, F32 or F64", "D");
  AddParsedOption(
      command, "--part",
      [&options](const std::string& text) {
        char rest = 0;
        if (std::sscanf(text.c_str(), "%" SCNu32 "/%" SCNu32 "%c", &options.part_index, &options.part_count, &rest) !=
                2 ||
            options.part_count == 0 || options.part_index >= options.part_count) {
          throw CLI::ValidationError("--part", "'" + text + "' is not I/N with 0 <= I < N");
        }
      },
      "write part I of N of one export shared by N processes (part 0 also writes the index)", "I/N");
  command->add_option("DIR", options.dir, "a checkpoint directory")->required();
  command->add_option("OUT", options.out, "a .safetensors file, or a directory")->required();
  return command;
}

CLI::App* AddImport(CLI::App& app, ImportOptions& options) {
  CLI::App* command =
      AddVerb(app, "import", "save safetensors weights (or a checkpoint) as a checkpoint",
              "Saves safetensors weights (a .safetensors file, a Hugging Face directory or its index), or a\n"
              "ckpt checkpoint, as a ckpt checkpoint with checksums. Reads every tensor as a load does (files\n"
              "opened beneath SOURCE, never through a link; a checkpoint's checksums checked) before the save\n"
              "starts, so it holds the whole model in memory: about its size in RAM.");
  command->add_option("SOURCE", options.source, "the safetensors weights, or a checkpoint directory")->required();
  command->add_option("DIR", options.dir, "the checkpoint to create")->required();
  command->add_flag("--compress", options.compress,
                    "store it compressed (CKPT_SAVE_COMPRESS: each 1 MiB block losslessly, floats by byte groups)");
  return command;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("ckpt: inspect, verify, compare and convert checkpoints.", "ckpt");
  app.footer(std::string(kEscaping) + "\n\n" + kExitStatus);
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("ckpt ") + ckpt_version_string(), "print the library's version");
  app.failure_message([](const CLI::App*, const CLI::Error& error) {
    return std::string("ckpt: ") + error.what() + "\nRun with --help for more information.\n";
  });

  ListOptions list;
  VerifyOptions verify;
  CatOptions cat;
  MetaOptions meta;
  DiffOptions diff;
  ExportOptions export_options;
  ImportOptions import_options;
  const CLI::App* ls_command = AddList(app, list);
  const CLI::App* verify_command = AddVerify(app, verify);
  const CLI::App* cat_command = AddCat(app, cat);
  const CLI::App* meta_command = AddMeta(app, meta);
  const CLI::App* diff_command = AddDiff(app, diff);
  const CLI::App* export_command = AddExport(app, export_options);
  const CLI::App* import_command = AddImport(app, import_options);
  const CLI::App* version_command = app.add_subcommand("version", "print the library's version");
  const CLI::App* help_command = app.add_subcommand("help", "print this help");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // --help and --version end the parse too, successfully.
    return app.exit(error) == 0 ? kExitOk : kExitUsage;
  }
  if (ls_command->parsed()) return List(list);
  if (verify_command->parsed()) return Verify(verify);
  if (cat_command->parsed()) return Cat(cat);
  if (meta_command->parsed()) return Meta(meta);
  if (diff_command->parsed()) return Diff(diff);
  if (export_command->parsed()) return Export(export_options);
  if (import_command->parsed()) return Import(import_options);
  if (version_command->parsed()) {
    std::printf("ckpt %s\n", ckpt_version_string());
  } else if (help_command->parsed()) {
    // App::help() would describe the parsed subcommand, `help` itself: ask the formatter for the top level.
    std::fputs(app.get_formatter()->make_help(&app, "ckpt", CLI::AppFormatMode::Normal).c_str(), stdout);
  }
  return kExitOk;
}

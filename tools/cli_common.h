// What the `ckpt` tool's verbs share: exit codes, owned handles, an opened checkpoint, error reports, formatting.
#pragma once

#include <ckpt.h>

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
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

// `text` (bytes from a checkpoint, a path, a library message) as it may reach a terminal, unambiguously: valid
// printable UTF-8 as it is; a backslash as `\\`; newline, tab and carriage return as `\n`, `\t`, `\r`; other C0
// controls and DEL as `\x1b`, `\x7f`; C1 controls (U+0080 to U+009F) as `\u0085`; each byte that is not part of
// valid UTF-8 as `\xff`. A hostile key can then neither send escape sequences nor fake a line of the listing. Every
// text output of every verb passes what it did not write itself through it.
std::string Escaped(std::string_view text);
// The same for text that escapes the names it quotes already (the library's messages: 'a\x1bb'): control characters
// and bytes that are not UTF-8 escaped, backslashes kept, so that an escape is not shown doubled.
std::string ControlsEscaped(std::string_view message);
// Whether `text` is valid UTF-8 with no control character but newline and tab: text that `cat` may print as it is.
bool IsPlainText(std::string_view text);

// Prints "ckpt: MESSAGE" and a pointer to --help; returns kExitUsage. For what only the verb can check (a box
// against the tensor's rank); the parser reports the rest.
int UsageError(const std::string& message);
// Prints why a call failed and returns kExitFailed: `what` escaped, the library's message with ControlsEscaped.
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
// Writes `value` to standard output, indented, with a final newline, and returns kExitOk. The output is ASCII: strings
// escaped as RFC 8259 asks, and every character past U+007E (DEL, C1 controls, all non-ASCII text) as \uXXXX, so
// that the parsed strings are exactly the checkpoint's and no control byte reaches a terminal. JSON strings are
// Unicode and cannot carry bytes that are not UTF-8: rather than replace them (U+FFFD) unnoticed, prints nothing,
// names the string that holds them, and returns kExitFailed (the text output shows them escaped).
int PrintJson(const nlohmann::json& value);

// The elements of an array too long to hold whole (a listing of millions of tensors), made one at a time: calls
// `sink` with each in order until it returns false; returns false if an element could not be made (after reporting
// why) or `sink` stopped.
using JsonElementSink = std::function<bool(const nlohmann::json&)>;
using JsonArrayProducer = std::function<bool(const JsonElementSink& sink)>;
// PrintJson of the object holding `members` and, under the names of `arrays`, the elements each produces: the same
// text, the same refusal of a string that is not UTF-8 before anything is printed, but only one element exists at a
// time. Each array is produced twice, to check its strings and to print them; an element that cannot be made
// returns kExitFailed.
int PrintJsonStreamed(const nlohmann::json& members, const std::map<std::string, JsonArrayProducer>& arrays);

}  // namespace ckpt_cli

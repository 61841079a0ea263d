// `ckpt verify`, `ckpt meta` and `ckpt cat` (tools/cli_verbs.h).
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <functional>

#include "common/os_error.h"
#include "tools/cli_common.h"
#include "tools/cli_dtype.h"
#include "tools/cli_output_file.h"
#include "tools/cli_verbs.h"
#include "tools/cli_windows.h"

namespace ckpt_cli {
namespace {

using nlohmann::json;

// What `cat` reads of a tensor at a time: its memory stays bounded whatever the box's size.
constexpr uint64_t kCatWindowBytes = uint64_t{64} << 20;

// Parses "START:LEN,START:LEN,..." with one pair per dimension; returns the problem, if any.
std::optional<std::string> ParseBox(const std::string& text, uint32_t ndim, uint64_t* offset, uint64_t* shape) {
  const char* at = text.c_str();
  const char* end = at + text.size();
  for (uint32_t d = 0; d < ndim; ++d) {
    auto parsed = std::from_chars(at, end, offset[d]);
    if (parsed.ec != std::errc() || parsed.ptr == end || *parsed.ptr != ':') break;
    parsed = std::from_chars(parsed.ptr + 1, end, shape[d]);
    if (parsed.ec != std::errc()) break;
    at = parsed.ptr;
    if (d + 1 == ndim) {
      if (at == end) return std::nullopt;
      break;
    }
    if (at == end || *at != ',') break;
    ++at;
  }
  return "box '" + text + "' is not " + std::to_string(ndim) + " START:LEN pair(s) separated by commas";
}

bool InsideShape(uint32_t ndim, const uint64_t* offset, const uint64_t* box, const uint64_t* shape) {
  for (uint32_t d = 0; d < ndim; ++d) {
    if (offset[d] > shape[d] || box[d] > shape[d] - offset[d]) return false;
  }
  return true;
}

// The .npy header (format 1.0) of a C-ordered array: magic, version, the dictionary's length, the dictionary,
// padded with spaces to end in a newline where the data may start 64-byte aligned.
std::string NpyHeader(const std::string& descr, uint32_t ndim, const uint64_t* shape) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
  for (uint32_t d = 0; d < ndim; ++d) {
    dict += std::to_string(shape[d]) + (ndim == 1 ? "," : d + 1 < ndim ? ", " : "");
  }
  dict += "), }";
  constexpr size_t kPrefix = 10;  // magic (6), version (2), dictionary length (2)
  dict.append((64 - (kPrefix + dict.size() + 1) % 64) % 64, ' ');
  dict += '\n';
  std::string header("\x93NUMPY\x01\x00", 8);
  header += static_cast<char>(dict.size() & 0xff);
  header += static_cast<char>(dict.size() >> 8);
  return header + dict;
}

bool WriteAll(std::FILE* out, const void* data, size_t size) { return std::fwrite(data, 1, size, out) == size; }

// Reads the box of tensor `key` window by window, in row-major order, handing each window's bytes to `consume`,
// which returns false to stop. Returns an exit code.
int StreamBox(Checkpoint& checkpoint, const ckpt_tensor_info& tensor, const uint64_t* offset, const uint64_t* shape,
              const std::function<bool(const unsigned char*, uint64_t)>& consume) {
  BoxWindows windows(tensor.ndim, offset, shape, ckpt_dtype_size(tensor.dtype), kCatWindowBytes);
  std::vector<unsigned char> buffer(windows.max_window_bytes());
  uint64_t window_offset[CKPT_MAX_NDIM], window_shape[CKPT_MAX_NDIM];
  while (windows.Next(window_offset, window_shape)) {
    const uint64_t bytes = *BoxBytes(tensor.dtype, tensor.ndim, window_shape);
    if (const int32_t status = ckpt_reader_read(checkpoint.reader.get(), tensor.key, tensor.ndim, window_offset,
                                                window_shape, buffer.data(), bytes, checkpoint.err.get());
        status != CKPT_OK) {
      return Report("reading " + FormatBox(tensor.ndim, window_offset, window_shape) + " of '" + tensor.key + "'",
                    status, checkpoint.err.get());
    }
    if (!consume(buffer.data(), bytes)) return kExitFailed;
  }
  return kExitOk;
}

// Prints elements as text, one line per row of the box's last dimension, across windows.
class ElementPrinter {
 public:
  ElementPrinter(int32_t dtype, uint32_t ndim, const uint64_t* shape)
      : dtype_(dtype), element_size_(ckpt_dtype_size(dtype)), row_length_(ndim == 0 ? 1 : shape[ndim - 1]) {}

  bool operator()(const unsigned char* data, uint64_t bytes) {
    for (uint64_t at = 0; at < bytes; at += element_size_) {
      line_ += (line_.empty() ? "" : " ") + FormatElement(dtype_, data + at);
      if (++in_row_ == row_length_) {
        std::printf("%s\n", line_.c_str());
        line_.clear();
        in_row_ = 0;
      }
    }
    return true;
  }

 private:
  int32_t dtype_;
  uint64_t element_size_;
  uint64_t row_length_;
  uint64_t in_row_ = 0;
  std::string line_;
};

int CatNpy(Checkpoint& checkpoint, const ckpt_tensor_info& tensor, const uint64_t* offset, const uint64_t* shape,
           const std::string& path) {
  const auto descr = NpyDescr(tensor.dtype);
  if (!descr) {
    return UsageError(std::string("numpy has no dtype for ") + ckpt_dtype_name(tensor.dtype) + " ('" + tensor.key +
                      "'): write the bytes with --raw, or convert with: ckpt export --dtype=f32");
  }
  std::string why;
  const std::unique_ptr<OutputFile> out = OutputFile::Create(path, &why);
  if (!out) {
    std::fprintf(stderr, "ckpt: %s\n", Escaped(why).c_str());
    return kExitFailed;
  }
  const std::string header = NpyHeader(*descr, tensor.ndim, shape);
  if (!WriteAll(out->stream(), header.data(), header.size())) {
    std::fprintf(stderr, "ckpt: writing %s failed: %s\n", Escaped(path).c_str(), ckpt::OsErrorText(errno).c_str());
    return kExitFailed;
  }
  const int code = StreamBox(checkpoint, tensor, offset, shape, [&](const unsigned char* data, uint64_t bytes) {
    if (WriteAll(out->stream(), data, bytes)) return true;
    std::fprintf(stderr, "ckpt: writing %s failed: %s\n", Escaped(path).c_str(), ckpt::OsErrorText(errno).c_str());
    return false;
  });
  // Only a complete file gets its name: a partial one would read back as a wrong array.
  if (code != kExitOk) return code;
  if (!out->Publish(&why)) {
    std::fprintf(stderr, "ckpt: %s\n", Escaped(why).c_str());
    return kExitFailed;
  }
  return kExitOk;
}

int CatTensor(Checkpoint& checkpoint, const ckpt_tensor_info& tensor, const CatOptions& options) {
  uint64_t offset[CKPT_MAX_NDIM] = {0};
  uint64_t shape[CKPT_MAX_NDIM] = {0};
  std::memcpy(shape, tensor.shape, sizeof(shape));
  if (options.box) {
    if (const auto problem = ParseBox(*options.box, tensor.ndim, offset, shape)) return UsageError(*problem);
    if (!InsideShape(tensor.ndim, offset, shape, tensor.shape)) {
      return UsageError("the box " + FormatBox(tensor.ndim, offset, shape) + " is outside '" + options.key +
                        "', of shape " + FormatShape(tensor.ndim, tensor.shape));
    }
  }
  if (!options.npy.empty()) return CatNpy(checkpoint, tensor, offset, shape, options.npy);
  if (options.raw) {
    return StreamBox(checkpoint, tensor, offset, shape, [](const unsigned char* data, uint64_t bytes) {
      if (WriteAll(stdout, data, bytes)) return true;
      std::fprintf(stderr, "ckpt: writing to standard output failed\n");
      return false;
    });
  }
  return StreamBox(checkpoint, tensor, offset, shape, ElementPrinter(tensor.dtype, tensor.ndim, shape));
}

// Common bytes as text when they are plain text (UTF-8, no control character but newline and tab), else as hex,
// 32 bytes a line: a terminal never receives a control sequence from them.
void PrintCommon(const unsigned char* bytes, uint64_t size) {
  if (IsPlainText(std::string_view(reinterpret_cast<const char*>(bytes), size))) {
    WriteAll(stdout, bytes, size);
    if (size > 0 && bytes[size - 1] != '\n') std::printf("\n");
    return;
  }
  for (uint64_t i = 0; i < size; ++i) std::printf("%02x%s", bytes[i], (i + 1) % 32 == 0 || i + 1 == size ? "\n" : "");
}

int CatCommon(const CatOptions& options, const void* data, uint64_t size) {
  if (options.box || !options.npy.empty()) {
    return UsageError("'" + options.key + "' is a common entry: a box and --npy apply to tensors");
  }
  if (options.raw) {
    if (WriteAll(stdout, data, size)) return kExitOk;
    std::fprintf(stderr, "ckpt: writing to standard output failed\n");
    return kExitFailed;
  }
  PrintCommon(static_cast<const unsigned char*>(data), size);
  return kExitOk;
}

}  // namespace

int Verify(const VerifyOptions& options) {
  Failure failure;
  auto checkpoint = TryOpen(options.dir, &failure);
  if (checkpoint) {
    if (const int32_t status = ckpt_reader_verify(checkpoint->reader.get(), checkpoint->err.get()); status != CKPT_OK) {
      failure = {"verifying " + options.dir, status, ckpt_error_message(checkpoint->err.get())};
    }
  }
  const bool ok = failure.status == CKPT_OK;
  if (options.json) {
    json result = {{"path", options.dir}, {"ok", ok}};
    if (!ok) {
      // The code's name alone ("CKPT_E_CORRUPT"), which the documented status string starts with.
      const std::string status = ckpt_status_string(failure.status);
      result["status"] = status.substr(0, status.find(':'));
      result["error"] = failure.message;
    }
    const int printed = PrintJson(result);
    return ok ? printed : kExitFailed;
  }
  if (!ok) return Report(failure);
  std::printf("OK %s\n", Escaped(options.dir).c_str());
  return kExitOk;
}

int Meta(const MetaOptions& options) {
  auto checkpoint = Open(options.dir);
  if (!checkpoint) return kExitFailed;
  json values = json::object();
  for (const std::string& key : options.keys) {
    const char* value = nullptr;
    if (const int32_t status =
            ckpt_reader_metadata(checkpoint->reader.get(), key.c_str(), &value, checkpoint->err.get());
        status != CKPT_OK) {
      return Report("metadata '" + key + "' of " + options.dir, status, checkpoint->err.get());
    }
    if (options.json) {
      values[key] = value ? value : "";
    } else {
      std::printf("%s\n", Escaped(value ? value : "").c_str());
    }
  }
  return options.json ? PrintJson(values) : kExitOk;
}

int Cat(const CatOptions& options) {
  auto checkpoint = Open(options.dir);
  if (!checkpoint) return kExitFailed;
  if (const auto tensor = FindTensor(*checkpoint, options.key)) return CatTensor(*checkpoint, *tensor, options);
  const void* data = nullptr;
  uint64_t size = 0;
  const int32_t status =
      ckpt_reader_common(checkpoint->reader.get(), options.key.c_str(), &data, &size, checkpoint->err.get());
  if (status == CKPT_OK) return CatCommon(options, data, size);
  if (status != CKPT_E_NOT_FOUND) {
    return Report("reading common entry '" + options.key + "'", status, checkpoint->err.get());
  }
  std::fprintf(stderr, "ckpt: %s has no tensor or common entry '%s' (list them with: ckpt ls %s)\n",
               Escaped(options.dir).c_str(), Escaped(options.key).c_str(), Escaped(options.dir).c_str());
  return kExitFailed;
}

}  // namespace ckpt_cli

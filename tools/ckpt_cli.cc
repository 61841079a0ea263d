// ckpt: inspect and check checkpoints from the shell. It uses only the public C API (include/ckpt.h), so it also
// shows that the reader API is enough to explore a checkpoint without knowing the file format.

#include <ckpt.h>

#include "tools/cli_common.h"

#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

// `ckpt cat` holds the whole box in memory and prints it as text: beyond this, ask for a smaller box.
constexpr uint64_t kMaxCatBytes = uint64_t{1} << 30;

constexpr const char* kUsage =
    "usage: ckpt ls [--chunks] DIR         list tensors (dtype, shape, chunks, bytes), common entries, metadata\n"
    "       ckpt verify DIR                read every chunk and check every checksum: prints OK or the error\n"
    "       ckpt cat [--raw] DIR KEY [BOX]   print a tensor, or the box START:LEN,START:LEN,... of it;\n"
    "                                      --raw writes the row-major bytes instead of text\n"
    "       ckpt meta DIR KEY...           print the user metadata value of each KEY\n"
    "       ckpt export [--max-shard-size=SIZE] [--keys=K1,K2,...] [--dtype=bf16] [--part=I/N] DIR OUT\n"
    "                                      write the tensors (whole) as safetensors: OUT ending in .safetensors is\n"
    "                                      one file, else a directory in the Hugging Face layout (model.safetensors,\n"
    "                                      or numbered files of at most SIZE, default 5GB, and an index); --dtype\n"
    "                                      converts floating tensors; --part shares one export among N processes\n"
    "       ckpt import SOURCE DIR         save safetensors weights (a .safetensors file, a Hugging Face directory or\n"
    "                                      its index) as a ckpt checkpoint, with checksums\n"
    "       ckpt version                   print the library's version\n"
    "\n"
    "Exit status: 0 on success, 1 if the checkpoint cannot be read or fails verification, 2 on usage errors.\n";

}  // namespace

namespace ckpt_cli {

int UsageError(const std::string& message) {
  std::fprintf(stderr, "ckpt: %s\n\n%s", message.c_str(), kUsage);
  return kExitUsage;
}

}  // namespace ckpt_cli

namespace {

using namespace ckpt_cli;

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

// Element count of a shape, or nothing if it overflows 64 bits.
std::optional<uint64_t> ElementCount(uint32_t ndim, const uint64_t* shape) {
  uint64_t count = 1;
  for (uint32_t d = 0; d < ndim; ++d) {
    if (__builtin_mul_overflow(count, shape[d], &count)) return std::nullopt;
  }
  return count;
}

std::string Count(uint64_t count, const char* singular, const char* plural) {
  return std::to_string(count) + " " + (count == 1 ? singular : plural);
}

// Short printable view of common bytes: quoted text if printable, else hex if short, else nothing.
std::string PreviewBytes(const void* data, uint64_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  bool printable = size > 0 && size <= 48;
  for (uint64_t i = 0; printable && i < size; ++i) printable = bytes[i] >= 0x20 && bytes[i] < 0x7f;
  if (printable) return "\"" + std::string(reinterpret_cast<const char*>(bytes), size) + "\"";
  if (size == 0 || size > 16) return "";
  std::string hex = "0x";
  char pair[3];
  for (uint64_t i = 0; i < size; ++i) {
    std::snprintf(pair, sizeof(pair), "%02x", bytes[i]);
    hex += pair;
  }
  return hex;
}

int ListChunks(Checkpoint& checkpoint, uint64_t tensor_index, uint64_t chunk_count) {
  for (uint64_t c = 0; c < chunk_count; ++c) {
    ckpt_chunk_info chunk = CKPT_CHUNK_INFO_INIT;
    if (const int32_t status =
            ckpt_reader_chunk(checkpoint.reader.get(), tensor_index, c, &chunk, checkpoint.err.get());
        status != CKPT_OK) {
      return Report("reading chunk " + std::to_string(c) + " of tensor " + std::to_string(tensor_index), status,
                    checkpoint.err.get());
    }
    std::printf("      %s  %s @%" PRIu64 "  %s\n", FormatBox(chunk.ndim, chunk.offset, chunk.shape).c_str(),
                chunk.file ? chunk.file : "?", chunk.file_offset, FormatBytes(chunk.byte_length).c_str());
  }
  return kExitOk;
}

int ListTensors(Checkpoint& checkpoint, uint64_t tensor_count, bool with_chunks) {
  struct Row {
    std::string key, dtype, shape, chunks, bytes;
    uint64_t chunk_count;
  };
  std::vector<Row> rows = {{"KEY", "DTYPE", "SHAPE", "CHUNKS", "BYTES", 0}};
  for (uint64_t t = 0; t < tensor_count; ++t) {
    ckpt_tensor_info tensor = CKPT_TENSOR_INFO_INIT;
    if (const int32_t status = ckpt_reader_tensor(checkpoint.reader.get(), t, &tensor, checkpoint.err.get());
        status != CKPT_OK) {
      return Report("reading tensor " + std::to_string(t), status, checkpoint.err.get());
    }
    const auto count = ElementCount(tensor.ndim, tensor.shape);
    uint64_t bytes = 0;
    const bool fits = count && !__builtin_mul_overflow(*count, ckpt_dtype_size(tensor.dtype), &bytes);
    rows.push_back({tensor.key ? tensor.key : "?", ckpt_dtype_name(tensor.dtype),
                    FormatShape(tensor.ndim, tensor.shape), std::to_string(tensor.chunk_count),
                    fits ? std::to_string(bytes) : "overflow", tensor.chunk_count});
  }
  size_t width[4] = {0, 0, 0, 0};
  for (const Row& row : rows) {
    width[0] = std::max(width[0], row.key.size());
    width[1] = std::max(width[1], row.dtype.size());
    width[2] = std::max(width[2], row.shape.size());
    width[3] = std::max(width[3], row.chunks.size());
  }
  std::printf("tensors\n");
  for (size_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    std::printf("  %-*s  %-*s  %-*s  %*s  %s\n", static_cast<int>(width[0]), row.key.c_str(),
                static_cast<int>(width[1]), row.dtype.c_str(), static_cast<int>(width[2]), row.shape.c_str(),
                static_cast<int>(width[3]), row.chunks.c_str(), row.bytes.c_str());
    if (with_chunks && r > 0) {
      if (const int code = ListChunks(checkpoint, r - 1, row.chunk_count); code != kExitOk) return code;
    }
  }
  return kExitOk;
}

int ListCommon(Checkpoint& checkpoint, uint64_t common_count) {
  std::printf("common\n");
  for (uint64_t i = 0; i < common_count; ++i) {
    const char* key = nullptr;
    const void* data = nullptr;
    uint64_t size = 0;
    if (const int32_t status =
            ckpt_reader_common_at(checkpoint.reader.get(), i, &key, &data, &size, checkpoint.err.get());
        status != CKPT_OK) {
      return Report("reading common entry " + std::to_string(i), status, checkpoint.err.get());
    }
    std::printf("  %s  %s  %s\n", key ? key : "?", FormatBytes(size).c_str(), PreviewBytes(data, size).c_str());
  }
  return kExitOk;
}

int List(const std::string& dir, bool with_chunks) {
  auto checkpoint = Open(dir);
  if (!checkpoint) return kExitFailed;
  ckpt_checkpoint_info info = CKPT_CHECKPOINT_INFO_INIT;
  if (const int32_t status = ckpt_reader_info(checkpoint->reader.get(), &info, checkpoint->err.get());
      status != CKPT_OK) {
    return Report("reading " + dir, status, checkpoint->err.get());
  }
  std::printf("checkpoint %s\n", dir.c_str());
  std::printf("  format %u.%u, saved by %s on %s\n", info.format_major, info.format_minor,
              Count(info.world_size, "rank", "ranks").c_str(), Count(info.node_count, "node", "nodes").c_str());
  std::printf("  %s, %s, %s, %s, %s of data\n", Count(info.tensor_count, "tensor", "tensors").c_str(),
              Count(info.object_count, "object", "objects").c_str(),
              Count(info.common_count, "common entry", "common entries").c_str(),
              Count(info.file_count, "data file", "data files").c_str(), FormatBytes(info.total_bytes).c_str());
  if (info.tensor_count > 0) {
    if (const int code = ListTensors(*checkpoint, info.tensor_count, with_chunks); code != kExitOk) return code;
  }
  if (info.common_count > 0) {
    if (const int code = ListCommon(*checkpoint, info.common_count); code != kExitOk) return code;
  }
  // The C API looks metadata up by key; it has no way to enumerate the keys.
  if (info.metadata_count > 0) {
    std::printf("metadata: %s (print one with: ckpt meta %s KEY)\n",
                Count(info.metadata_count, "entry", "entries").c_str(), dir.c_str());
  }
  return kExitOk;
}

int Verify(const std::string& dir) {
  auto checkpoint = Open(dir);
  if (!checkpoint) return kExitFailed;
  if (const int32_t status = ckpt_reader_verify(checkpoint->reader.get(), checkpoint->err.get()); status != CKPT_OK) {
    return Report("verifying " + dir, status, checkpoint->err.get());
  }
  std::printf("OK %s\n", dir.c_str());
  return kExitOk;
}

int Meta(const std::string& dir, const std::vector<std::string>& keys) {
  auto checkpoint = Open(dir);
  if (!checkpoint) return kExitFailed;
  for (const std::string& key : keys) {
    const char* value = nullptr;
    if (const int32_t status =
            ckpt_reader_metadata(checkpoint->reader.get(), key.c_str(), &value, checkpoint->err.get());
        status != CKPT_OK) {
      return Report("metadata '" + key + "' of " + dir, status, checkpoint->err.get());
    }
    std::printf("%s\n", value ? value : "");
  }
  return kExitOk;
}

// Decodes IEEE binary16.
float HalfToFloat(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 0x1f) {
    magnitude = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa + 0x400), exponent - 25);
  }
  return (bits & 0x8000) ? -magnitude : magnitude;
}

// Decodes float8 E4M3 in its "FN" form (no infinities, one NaN pattern per sign), as safetensors uses it.
float F8E4M3ToFloat(uint8_t bits) {
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  float magnitude;
  if (exponent == 0xf && mantissa == 0x7) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa + 0x8), exponent - 10);
  }
  return (bits & 0x80) ? -magnitude : magnitude;
}

template <typename T>
T Load(const unsigned char* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

template <typename T>
std::string FormatNumber(T value) {
  char text[64];
  const auto result = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, result.ptr);
}

std::string FormatElement(int32_t dtype, const unsigned char* at) {
  switch (dtype) {
    case CKPT_DTYPE_BOOL:
      return at[0] ? "true" : "false";
    case CKPT_DTYPE_U8:
      return FormatNumber(Load<uint8_t>(at));
    case CKPT_DTYPE_I8:
      return FormatNumber(Load<int8_t>(at));
    case CKPT_DTYPE_I16:
      return FormatNumber(Load<int16_t>(at));
    case CKPT_DTYPE_U16:
      return FormatNumber(Load<uint16_t>(at));
    case CKPT_DTYPE_I32:
      return FormatNumber(Load<int32_t>(at));
    case CKPT_DTYPE_U32:
      return FormatNumber(Load<uint32_t>(at));
    case CKPT_DTYPE_I64:
      return FormatNumber(Load<int64_t>(at));
    case CKPT_DTYPE_U64:
      return FormatNumber(Load<uint64_t>(at));
    case CKPT_DTYPE_F16:
      return FormatNumber(HalfToFloat(Load<uint16_t>(at)));
    case CKPT_DTYPE_BF16: {
      const uint32_t bits = uint32_t{Load<uint16_t>(at)} << 16;
      return FormatNumber(Load<float>(reinterpret_cast<const unsigned char*>(&bits)));
    }
    case CKPT_DTYPE_F32:
      return FormatNumber(Load<float>(at));
    case CKPT_DTYPE_F64:
      return FormatNumber(Load<double>(at));
    case CKPT_DTYPE_C64:
      return "(" + FormatNumber(Load<float>(at)) + "," + FormatNumber(Load<float>(at + 4)) + ")";
    case CKPT_DTYPE_F8_E4M3:
      return FormatNumber(F8E4M3ToFloat(at[0]));
    case CKPT_DTYPE_F8_E5M2:
      return FormatNumber(HalfToFloat(static_cast<uint16_t>(at[0] << 8)));
    case CKPT_DTYPE_C128:
      return "(" + FormatNumber(Load<double>(at)) + "," + FormatNumber(Load<double>(at + 8)) + ")";
    case CKPT_DTYPE_I4:  // sub-byte integers: the low bits of their byte, sign-extended for the signed ones
      return FormatNumber(static_cast<int>(static_cast<int8_t>(at[0] << 4)) >> 4);
    case CKPT_DTYPE_U4:
      return FormatNumber(at[0] & 0xF);
    case CKPT_DTYPE_I2:
      return FormatNumber(static_cast<int>(static_cast<int8_t>(at[0] << 6)) >> 6);
    case CKPT_DTYPE_U2:
      return FormatNumber(at[0] & 0x3);
    default:
      return "?";
  }
}

// Parses "START:LEN,START:LEN,..." with one pair per dimension.
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

// Prints the box's elements as text: one line per row of the last dimension.
void PrintElements(int32_t dtype, uint32_t ndim, const uint64_t* shape, const std::vector<unsigned char>& data) {
  const uint64_t element_size = ckpt_dtype_size(dtype);
  const uint64_t row_length = ndim == 0 ? 1 : shape[ndim - 1];
  const uint64_t count = data.size() / element_size;
  std::string line;
  for (uint64_t i = 0; i < count; ++i) {
    line += (i % row_length ? " " : "") + FormatElement(dtype, data.data() + i * element_size);
    if ((i + 1) % row_length == 0) {
      std::printf("%s\n", line.c_str());
      line.clear();
    }
  }
}

std::optional<ckpt_tensor_info> FindTensor(Checkpoint& checkpoint, const std::string& key) {
  ckpt_checkpoint_info info = CKPT_CHECKPOINT_INFO_INIT;
  if (ckpt_reader_info(checkpoint.reader.get(), &info, checkpoint.err.get()) != CKPT_OK) return std::nullopt;
  for (uint64_t t = 0; t < info.tensor_count; ++t) {
    ckpt_tensor_info tensor = CKPT_TENSOR_INFO_INIT;
    if (ckpt_reader_tensor(checkpoint.reader.get(), t, &tensor, checkpoint.err.get()) != CKPT_OK) break;
    if (tensor.key && key == tensor.key) return tensor;
  }
  return std::nullopt;
}

int Cat(const std::string& dir, const std::string& key, const std::optional<std::string>& box, bool raw) {
  auto checkpoint = Open(dir);
  if (!checkpoint) return kExitFailed;
  const auto tensor = FindTensor(*checkpoint, key);
  if (!tensor) {
    std::fprintf(stderr, "ckpt: %s has no tensor '%s' (list them with: ckpt ls %s)\n", dir.c_str(), key.c_str(),
                 dir.c_str());
    return kExitFailed;
  }
  uint64_t offset[CKPT_MAX_NDIM] = {0};
  uint64_t shape[CKPT_MAX_NDIM] = {0};
  std::memcpy(shape, tensor->shape, sizeof(shape));
  if (box) {
    if (const auto problem = ParseBox(*box, tensor->ndim, offset, shape)) return UsageError(*problem);
  }
  const auto count = ElementCount(tensor->ndim, shape);
  uint64_t bytes = 0;
  if (!count || __builtin_mul_overflow(*count, ckpt_dtype_size(tensor->dtype), &bytes) || bytes > kMaxCatBytes) {
    std::fprintf(stderr, "ckpt: the box %s of '%s' holds more than %s: ask for a smaller box\n",
                 FormatBox(tensor->ndim, offset, shape).c_str(), key.c_str(), FormatBytes(kMaxCatBytes).c_str());
    return kExitFailed;
  }
  std::vector<unsigned char> data(bytes);
  if (const int32_t status = ckpt_reader_read(checkpoint->reader.get(), key.c_str(), tensor->ndim, offset, shape,
                                              data.data(), bytes, checkpoint->err.get());
      status != CKPT_OK) {
    return Report("reading " + FormatBox(tensor->ndim, offset, shape) + " of '" + key + "'", status,
                  checkpoint->err.get());
  }
  if (raw) {
    if (std::fwrite(data.data(), 1, data.size(), stdout) != data.size()) {
      std::fprintf(stderr, "ckpt: writing to standard output failed\n");
      return kExitFailed;
    }
  } else if (bytes > 0) {
    PrintElements(tensor->dtype, tensor->ndim, shape, data);
  }
  return kExitOk;
}

// Splits the arguments after the command into flags (starting with "--") and positional operands.
void SplitArguments(int argc, char** argv, std::vector<std::string>& flags, std::vector<std::string>& operands) {
  bool only_operands = false;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!only_operands && arg == "--") {
      only_operands = true;
    } else if (!only_operands && arg.size() > 1 && arg[0] == '-') {
      flags.push_back(arg);
    } else {
      operands.push_back(arg);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return UsageError("missing command");
  const std::string command = argv[1];
  if (command == "-h" || command == "--help" || command == "help") {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  if (command == "version" || command == "--version") {
    std::printf("ckpt %s\n", ckpt_version_string());
    return kExitOk;
  }
  std::vector<std::string> flags;
  std::vector<std::string> operands;
  SplitArguments(argc, argv, flags, operands);
  auto only_flag = [&flags](const char* allowed) {
    return flags.empty() || (flags.size() == 1 && flags[0] == allowed);
  };
  if (command == "ls") {
    if (!only_flag("--chunks") || operands.size() != 1) return UsageError("usage: ckpt ls [--chunks] DIR");
    return List(operands[0], !flags.empty());
  }
  if (command == "verify") {
    if (!flags.empty() || operands.size() != 1) return UsageError("usage: ckpt verify DIR");
    return Verify(operands[0]);
  }
  if (command == "cat") {
    if (!only_flag("--raw") || operands.size() < 2 || operands.size() > 3) {
      return UsageError("usage: ckpt cat [--raw] DIR KEY [START:LEN,...]");
    }
    const auto box = operands.size() == 3 ? std::optional<std::string>(operands[2]) : std::nullopt;
    return Cat(operands[0], operands[1], box, !flags.empty());
  }
  if (command == "meta") {
    if (!flags.empty() || operands.size() < 2) return UsageError("usage: ckpt meta DIR KEY...");
    return Meta(operands[0], std::vector<std::string>(operands.begin() + 1, operands.end()));
  }
  if (command == "export") {
    if (operands.size() != 2) {
      return UsageError("usage: ckpt export [--max-shard-size=SIZE] [--keys=K,...] [--dtype=D] [--part=I/N] DIR OUT");
    }
    return Export(operands[0], operands[1], flags);
  }
  if (command == "import") {
    if (operands.size() != 2) return UsageError("usage: ckpt import SOURCE DIR");
    return Import(operands[0], operands[1], flags);
  }
  return UsageError("unknown command '" + command + "'");
}

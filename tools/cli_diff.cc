// `ckpt diff A B`: the tensors of two checkpoints (any layouts, or safetensors), compared value by value through
// bounded windows (tools/cli_verbs.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "tools/cli_common.h"
#include "tools/cli_dtype.h"
#include "tools/cli_verbs.h"
#include "tools/cli_windows.h"

namespace ckpt_cli {
namespace {

using nlohmann::json;

struct TensorShape {
  int32_t dtype = 0;
  uint32_t ndim = 0;
  uint64_t shape[CKPT_MAX_NDIM] = {0};

  bool SameShape(const TensorShape& other) const {
    return ndim == other.ndim && std::equal(shape, shape + ndim, other.shape);
  }
};

// How two tensors of one dtype and shape differ. Integers differ exactly (a magnitude up to 2^64 - 1); floating
// and complex values in double, which holds every floating dtype exactly.
struct Difference {
  uint64_t differing = 0;  // elements that differ
  uint64_t max_integer = 0;
  double max_floating = 0;
  bool nan = false;  // some element is NaN on one side only
};

std::optional<std::map<std::string, TensorShape>> Tensors(Checkpoint& checkpoint) {
  Failure failure;
  const auto info = Info(checkpoint, &failure);
  if (!info) {
    Report(failure);
    return std::nullopt;
  }
  std::map<std::string, TensorShape> tensors;
  for (uint64_t t = 0; t < info->tensor_count; ++t) {
    ckpt_tensor_info tensor = CKPT_TENSOR_INFO_INIT;
    if (const int32_t status = ckpt_reader_tensor(checkpoint.reader.get(), t, &tensor, checkpoint.err.get());
        status != CKPT_OK) {
      Report("reading tensor " + std::to_string(t) + " of " + checkpoint.dir, status, checkpoint.err.get());
      return std::nullopt;
    }
    TensorShape& entry = tensors[tensor.key];
    entry.dtype = tensor.dtype;
    entry.ndim = tensor.ndim;
    std::copy(tensor.shape, tensor.shape + tensor.ndim, entry.shape);
  }
  return tensors;
}

// NaN equals NaN here: a tensor compared with its copy is equal.
bool SameReal(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

void AddFloating(double delta, Difference* difference) {
  ++difference->differing;
  if (std::isnan(delta)) {
    difference->nan = true;
  } else {
    difference->max_floating = std::max(difference->max_floating, delta);
  }
}

void AddInteger(uint64_t magnitude, Difference* difference) {
  ++difference->differing;
  difference->max_integer = std::max(difference->max_integer, magnitude);
}

// Compares `count` elements of `dtype` at `a` and `b`.
void Compare(int32_t dtype, const unsigned char* a, const unsigned char* b, uint64_t count, Difference* difference) {
  const uint64_t size = ckpt_dtype_size(dtype);
  if (std::memcmp(a, b, count * size) == 0) return;
  const ElementKind kind = KindOf(dtype);
  for (uint64_t i = 0; i < count; ++i, a += size, b += size) {
    if (kind == ElementKind::kUnsigned) {
      const uint64_t x = LoadUnsigned(dtype, a), y = LoadUnsigned(dtype, b);
      if (x != y) AddInteger(x > y ? x - y : y - x, difference);
    } else if (kind == ElementKind::kSigned) {
      const int64_t x = LoadSigned(dtype, a), y = LoadSigned(dtype, b);
      // In unsigned arithmetic, which wraps, the distance between any two int64 values is exact.
      const uint64_t ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
      if (x != y) AddInteger(x > y ? ux - uy : uy - ux, difference);
    } else if (kind == ElementKind::kComplex) {
      const auto [xr, xi] = LoadComplex(dtype, a);
      const auto [yr, yi] = LoadComplex(dtype, b);
      if (!SameReal(xr, yr) || !SameReal(xi, yi)) AddFloating(std::hypot(xr - yr, xi - yi), difference);
    } else {
      const double x = LoadFloating(dtype, a), y = LoadFloating(dtype, b);
      if (!SameReal(x, y)) AddFloating(std::fabs(x - y), difference);
    }
  }
}

// Reads both tensors window by window, the same boxes from each side; nothing after reporting a failed read.
std::optional<Difference> CompareTensor(Checkpoint& a, Checkpoint& b, const std::string& key, const TensorShape& tensor,
                                        uint64_t window_bytes) {
  const uint64_t zero[CKPT_MAX_NDIM] = {0};
  const uint64_t element_size = ckpt_dtype_size(tensor.dtype);
  BoxWindows windows(tensor.ndim, zero, tensor.shape, element_size, window_bytes);
  std::vector<unsigned char> from_a(windows.max_window_bytes()), from_b(windows.max_window_bytes());
  uint64_t offset[CKPT_MAX_NDIM], shape[CKPT_MAX_NDIM];
  Difference difference;
  while (windows.Next(offset, shape)) {
    const uint64_t bytes = *BoxBytes(tensor.dtype, tensor.ndim, shape);
    for (auto [side, buffer] : {std::pair{&a, &from_a}, std::pair{&b, &from_b}}) {
      if (const int32_t status = ckpt_reader_read(side->reader.get(), key.c_str(), tensor.ndim, offset, shape,
                                                  buffer->data(), bytes, side->err.get());
          status != CKPT_OK) {
        Report("reading " + FormatBox(tensor.ndim, offset, shape) + " of '" + key + "' in " + side->dir, status,
               side->err.get());
        return std::nullopt;
      }
    }
    Compare(tensor.dtype, from_a.data(), from_b.data(), bytes / element_size, &difference);
  }
  return difference;
}

// One tensor's entry of the result: its text line and its JSON. `equal` says whether it matched.
struct Outcome {
  std::string line;
  json entry;
  bool equal = false;
};

Outcome Describe(const std::string& key, const TensorShape& in_a, const TensorShape& in_b,
                 const std::optional<Difference>& difference) {
  Outcome outcome;
  outcome.entry = {{"key", key}};
  if (in_a.dtype != in_b.dtype) {
    outcome.line = key + ": dtype " + ckpt_dtype_name(in_a.dtype) + " in A, " + ckpt_dtype_name(in_b.dtype) + " in B";
    outcome.entry.update(
        {{"result", "dtype"}, {"dtype_a", ckpt_dtype_name(in_a.dtype)}, {"dtype_b", ckpt_dtype_name(in_b.dtype)}});
    return outcome;
  }
  if (!in_a.SameShape(in_b)) {
    outcome.line = key + ": shape " + FormatShape(in_a.ndim, in_a.shape) + " in A, " +
                   FormatShape(in_b.ndim, in_b.shape) + " in B";
    outcome.entry.update({{"result", "shape"},
                          {"shape_a", ShapeJson(in_a.ndim, in_a.shape)},
                          {"shape_b", ShapeJson(in_b.ndim, in_b.shape)}});
    return outcome;
  }
  const uint64_t elements = *ElementCount(in_a.ndim, in_a.shape);
  outcome.equal = difference->differing == 0;
  outcome.entry.update({{"result", outcome.equal ? "equal" : "different"},
                        {"dtype", ckpt_dtype_name(in_a.dtype)},
                        {"shape", ShapeJson(in_a.ndim, in_a.shape)},
                        {"elements", elements},
                        {"differing_elements", difference->differing}});
  if (outcome.equal) {
    outcome.line = key + ": equal";
    return outcome;
  }
  const ElementKind kind = KindOf(in_a.dtype);
  const bool integral = kind == ElementKind::kUnsigned || kind == ElementKind::kSigned;
  // JSON has no NaN: null says that some element is NaN on one side only.
  const json max = difference->nan ? json() : integral ? json(difference->max_integer) : json(difference->max_floating);
  outcome.entry["max_abs_difference"] = max;
  const std::string max_text = difference->nan ? "nan"
                               : integral      ? std::to_string(difference->max_integer)
                                               : FormatDouble(difference->max_floating);
  outcome.line = key + ": max abs difference " + max_text + " (" + std::to_string(difference->differing) + " of " +
                 std::to_string(elements) + " elements differ)";
  return outcome;
}

}  // namespace

int Diff(const DiffOptions& options) {
  auto a = Open(options.a);
  if (!a) return kExitFailed;
  auto b = Open(options.b);
  if (!b) return kExitFailed;
  const auto tensors_a = Tensors(*a);
  const auto tensors_b = Tensors(*b);
  if (!tensors_a || !tensors_b) return kExitFailed;

  json only_in_a = json::array(), only_in_b = json::array(), compared = json::array();
  std::vector<std::string> lines;
  bool equal = true;
  for (const auto& [key, in_a] : *tensors_a) {
    const auto found = tensors_b->find(key);
    if (found == tensors_b->end()) {
      only_in_a.push_back(key);
      lines.push_back("only in A: " + key);
      equal = false;
      continue;
    }
    std::optional<Difference> difference;
    if (in_a.dtype == found->second.dtype && in_a.SameShape(found->second)) {
      difference = CompareTensor(*a, *b, key, in_a, options.window_bytes);
      if (!difference) return kExitFailed;
    }
    Outcome outcome = Describe(key, in_a, found->second, difference);
    equal = equal && outcome.equal;
    lines.push_back(std::move(outcome.line));
    compared.push_back(std::move(outcome.entry));
  }
  for (const auto& entry : *tensors_b) {
    if (tensors_a->count(entry.first)) continue;
    only_in_b.push_back(entry.first);
    lines.push_back("only in B: " + entry.first);
    equal = false;
  }

  if (options.json) {
    const int printed = PrintJson({{"a", options.a},
                                   {"b", options.b},
                                   {"equal", equal},
                                   {"only_in_a", std::move(only_in_a)},
                                   {"only_in_b", std::move(only_in_b)},
                                   {"tensors", std::move(compared)}});
    if (printed != kExitOk) return printed;
  } else {
    std::printf("A: %s\nB: %s\n", Escaped(options.a).c_str(), Escaped(options.b).c_str());
    // The lines quote the checkpoints' keys.
    for (const std::string& line : lines) std::printf("%s\n", Escaped(line).c_str());
    std::printf("%s\n", equal ? "the tensors are equal" : "the tensors differ");
  }
  return equal ? kExitOk : kExitFailed;
}

}  // namespace ckpt_cli

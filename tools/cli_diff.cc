// `ckpt diff A B`: the tensors of two checkpoints (any layouts, or safetensors), compared value by value through
// bounded windows, the two lists of tensors walked together in key order (tools/cli_verbs.h).
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string_view>

#include "tools/cli_common.h"
#include "tools/cli_dtype.h"
#include "tools/cli_verbs.h"
#include "tools/cli_windows.h"

namespace ckpt_cli {
namespace {

using nlohmann::json;

bool SameShape(const ckpt_tensor_info& a, const ckpt_tensor_info& b) {
  return a.ndim == b.ndim && std::equal(a.shape, a.shape + a.ndim, b.shape);
}

// How two tensors of one dtype and shape differ. Integers differ exactly (a magnitude up to 2^64 - 1); floating
// and complex values in double, which holds every floating dtype exactly.
struct Difference {
  uint64_t differing = 0;  // elements that differ
  uint64_t max_integer = 0;
  double max_floating = 0;
  bool nan = false;  // some element is NaN on one side only
};

// The tensor at `index` of `checkpoint` (in key order), or nothing after reporting why it cannot be read.
std::optional<ckpt_tensor_info> TensorAt(Checkpoint& checkpoint, uint64_t index) {
  ckpt_tensor_info tensor = CKPT_TENSOR_INFO_INIT;
  if (const int32_t status = ckpt_reader_tensor(checkpoint.reader.get(), index, &tensor, checkpoint.err.get());
      status != CKPT_OK) {
    Report("reading tensor " + std::to_string(index) + " of " + checkpoint.dir, status, checkpoint.err.get());
    return std::nullopt;
  }
  return tensor;
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
      // std::abs of a complex (cabs), not std::hypot: glibc 2.35 versioned hypot anew, and that one symbol would
      // raise the glibc the packaged tool needs (tools/package.sh).
      if (!SameReal(xr, yr) || !SameReal(xi, yi)) {
        AddFloating(std::abs(std::complex<double>(xr - yr, xi - yi)), difference);
      }
    } else {
      const double x = LoadFloating(dtype, a), y = LoadFloating(dtype, b);
      if (!SameReal(x, y)) AddFloating(std::fabs(x - y), difference);
    }
  }
}

// Reads both tensors window by window, the same boxes from each side; nothing after reporting a failed read.
std::optional<Difference> CompareTensor(Checkpoint& a, Checkpoint& b, const ckpt_tensor_info& tensor,
                                        uint64_t window_bytes) {
  const std::string key = tensor.key;
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

// One tensor's entry of the result: its text line and its JSON.
struct Outcome {
  std::string line;
  json entry;
};

Outcome Describe(const ckpt_tensor_info& in_a, const ckpt_tensor_info& in_b,
                 const std::optional<Difference>& difference) {
  const std::string key = in_a.key;
  Outcome outcome;
  outcome.entry = {{"key", key}};
  if (in_a.dtype != in_b.dtype) {
    outcome.line = key + ": dtype " + ckpt_dtype_name(in_a.dtype) + " in A, " + ckpt_dtype_name(in_b.dtype) + " in B";
    outcome.entry.update(
        {{"result", "dtype"}, {"dtype_a", ckpt_dtype_name(in_a.dtype)}, {"dtype_b", ckpt_dtype_name(in_b.dtype)}});
    return outcome;
  }
  if (!SameShape(in_a, in_b)) {
    outcome.line = key + ": shape " + FormatShape(in_a.ndim, in_a.shape) + " in A, " +
                   FormatShape(in_b.ndim, in_b.shape) + " in B";
    outcome.entry.update({{"result", "shape"},
                          {"shape_a", ShapeJson(in_a.ndim, in_a.shape)},
                          {"shape_b", ShapeJson(in_b.ndim, in_b.shape)}});
    return outcome;
  }
  const uint64_t elements = *ElementCount(in_a.ndim, in_a.shape);
  const bool equal = difference->differing == 0;
  outcome.entry.update({{"result", equal ? "equal" : "different"},
                        {"dtype", ckpt_dtype_name(in_a.dtype)},
                        {"shape", ShapeJson(in_a.ndim, in_a.shape)},
                        {"elements", elements},
                        {"differing_elements", difference->differing}});
  if (equal) {
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

// What became of a tensor of A: the index of B's tensor of its key, if any, and how the two differ if they have one
// dtype and shape. The comparison keeps these few words per tensor, not its text or JSON, and the listing is printed
// once it is complete: keys, dtypes and shapes read again from the readers.
struct Match {
  std::optional<uint64_t> b_index;
  std::optional<Difference> difference;
};

struct Comparison {
  std::vector<Match> of_a;          // a match per tensor of A, in A's order
  std::vector<uint64_t> only_in_b;  // B's tensors that A lacks, by index
  bool equal = true;
};

// Compares A's tensor `in_a` with B's tensor `in_b` of the same key, at `b_index`; nothing after reporting a failed
// read.
std::optional<Match> MatchTensors(Checkpoint& a, Checkpoint& b, const ckpt_tensor_info& in_a,
                                  const ckpt_tensor_info& in_b, uint64_t b_index, uint64_t window_bytes) {
  Match match{b_index, std::nullopt};
  if (in_a.dtype == in_b.dtype && SameShape(in_a, in_b)) {
    match.difference = CompareTensor(a, b, in_a, window_bytes);
    if (!match.difference) return std::nullopt;
  }
  return match;
}

// Walks both tensor lists at once, both in key order as ckpt_reader_tensor gives them; nothing after reporting a
// failure.
std::optional<Comparison> CompareAll(Checkpoint& a, Checkpoint& b, uint64_t window_bytes) {
  Failure failure;
  const auto info_a = Info(a, &failure);
  const auto info_b = info_a ? Info(b, &failure) : std::nullopt;
  if (!info_b) {
    Report(failure);
    return std::nullopt;
  }
  Comparison comparison;
  comparison.of_a.reserve(info_a->tensor_count);
  for (uint64_t i = 0, j = 0; i < info_a->tensor_count || j < info_b->tensor_count;) {
    std::optional<ckpt_tensor_info> in_a, in_b;
    if ((i < info_a->tensor_count && !(in_a = TensorAt(a, i))) ||
        (j < info_b->tensor_count && !(in_b = TensorAt(b, j)))) {
      return std::nullopt;
    }
    const int order = !in_a ? 1 : !in_b ? -1 : std::string_view(in_a->key).compare(in_b->key);
    if (order > 0) {
      comparison.only_in_b.push_back(j++);
      continue;
    }
    Match match;
    if (order == 0) {
      const auto compared = MatchTensors(a, b, *in_a, *in_b, j++, window_bytes);
      if (!compared) return std::nullopt;
      match = *compared;
    }
    comparison.equal = comparison.equal && match.difference && match.difference->differing == 0;
    comparison.of_a.push_back(match);
    ++i;
  }
  comparison.equal = comparison.equal && comparison.only_in_b.empty();
  return comparison;
}

// Calls `visit` with each tensor of A, B's tensor of its key (null if none) and their difference; false after
// reporting a failed read, or when `visit` returns false.
using MatchVisitor =
    std::function<bool(const ckpt_tensor_info& in_a, const ckpt_tensor_info* in_b, const std::optional<Difference>&)>;
bool ForEachOfA(Checkpoint& a, Checkpoint& b, const Comparison& comparison, const MatchVisitor& visit) {
  for (uint64_t i = 0; i < comparison.of_a.size(); ++i) {
    const Match& match = comparison.of_a[i];
    const auto in_a = TensorAt(a, i);
    const auto in_b = match.b_index ? TensorAt(b, *match.b_index) : std::nullopt;
    if (!in_a || (match.b_index && !in_b)) return false;
    if (!visit(*in_a, in_b ? &*in_b : nullptr, match.difference)) return false;
  }
  return true;
}

// Calls `visit` with the key of each tensor only in B; as ForEachOfA.
bool ForEachOnlyInB(Checkpoint& b, const Comparison& comparison, const std::function<bool(const char* key)>& visit) {
  for (const uint64_t j : comparison.only_in_b) {
    const auto in_b = TensorAt(b, j);
    if (!in_b || !visit(in_b->key)) return false;
  }
  return true;
}

int PrintDiffText(const DiffOptions& options, Checkpoint& a, Checkpoint& b, const Comparison& comparison) {
  std::printf("A: %s\nB: %s\n", Escaped(options.a).c_str(), Escaped(options.b).c_str());
  // The lines quote the checkpoints' keys.
  const auto print = [](const std::string& line) {
    std::printf("%s\n", Escaped(line).c_str());
    return true;
  };
  const bool printed =
      ForEachOfA(
          a, b, comparison,
          [&](const ckpt_tensor_info& in_a, const ckpt_tensor_info* in_b, const std::optional<Difference>& difference) {
            return print(in_b ? Describe(in_a, *in_b, difference).line : std::string("only in A: ") + in_a.key);
          }) &&
      ForEachOnlyInB(b, comparison, [&](const char* key) { return print(std::string("only in B: ") + key); });
  if (!printed) return kExitFailed;
  std::printf("%s\n", comparison.equal ? "the tensors are equal" : "the tensors differ");
  return kExitOk;
}

int PrintDiffJson(const DiffOptions& options, Checkpoint& a, Checkpoint& b, const Comparison& comparison) {
  const JsonArrayProducer only_in_a = [&](const JsonElementSink& sink) {
    return ForEachOfA(a, b, comparison,
                      [&](const ckpt_tensor_info& in_a, const ckpt_tensor_info* in_b,
                          const std::optional<Difference>&) { return in_b || sink(in_a.key); });
  };
  const JsonArrayProducer only_in_b = [&](const JsonElementSink& sink) {
    return ForEachOnlyInB(b, comparison, [&](const char* key) { return sink(key); });
  };
  const JsonArrayProducer tensors = [&](const JsonElementSink& sink) {
    return ForEachOfA(
        a, b, comparison,
        [&](const ckpt_tensor_info& in_a, const ckpt_tensor_info* in_b, const std::optional<Difference>& difference) {
          return !in_b || sink(Describe(in_a, *in_b, difference).entry);
        });
  };
  return PrintJsonStreamed({{"a", options.a}, {"b", options.b}, {"equal", comparison.equal}},
                           {{"only_in_a", only_in_a}, {"only_in_b", only_in_b}, {"tensors", tensors}});
}

}  // namespace

int Diff(const DiffOptions& options) {
  auto a = Open(options.a);
  if (!a) return kExitFailed;
  auto b = Open(options.b);
  if (!b) return kExitFailed;
  const auto comparison = CompareAll(*a, *b, options.window_bytes);
  if (!comparison) return kExitFailed;
  const int printed =
      options.json ? PrintDiffJson(options, *a, *b, *comparison) : PrintDiffText(options, *a, *b, *comparison);
  if (printed != kExitOk) return printed;
  return comparison->equal ? kExitOk : kExitFailed;
}

}  // namespace ckpt_cli

// `ckpt ls`: what a checkpoint holds, or which steps a manager's root holds (tools/cli_verbs.h). Both are gathered
// as JSON first, so that --json and the text show the same facts; a checkpoint's entries one at a time, so that a
// listing of millions of tensors costs no more memory than the reader's own records.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <system_error>

#include "tools/cli_common.h"
#include "tools/cli_verbs.h"

namespace ckpt_cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

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

std::optional<json> ChunksJson(Checkpoint& checkpoint, uint64_t tensor_index, uint64_t chunk_count) {
  json chunks = json::array();
  for (uint64_t c = 0; c < chunk_count; ++c) {
    ckpt_chunk_info chunk = CKPT_CHUNK_INFO_INIT;
    if (const int32_t status =
            ckpt_reader_chunk(checkpoint.reader.get(), tensor_index, c, &chunk, checkpoint.err.get());
        status != CKPT_OK) {
      Report("reading chunk " + std::to_string(c) + " of tensor " + std::to_string(tensor_index), status,
             checkpoint.err.get());
      return std::nullopt;
    }
    chunks.push_back({{"offset", ShapeJson(chunk.ndim, chunk.offset)},
                      {"shape", ShapeJson(chunk.ndim, chunk.shape)},
                      {"file", chunk.file ? chunk.file : "?"},
                      {"file_offset", chunk.file_offset},
                      {"bytes", chunk.byte_length}});
  }
  return chunks;
}

// The sections of a checkpoint's listing, each produced an entry at a time from the reader: a listing of millions
// of tensors never exists whole, in --json as in the text.
JsonArrayProducer TensorsSection(Checkpoint& checkpoint, uint64_t count, bool with_chunks) {
  return [&checkpoint, count, with_chunks](const JsonElementSink& sink) {
    for (uint64_t t = 0; t < count; ++t) {
      ckpt_tensor_info tensor = CKPT_TENSOR_INFO_INIT;
      if (const int32_t status = ckpt_reader_tensor(checkpoint.reader.get(), t, &tensor, checkpoint.err.get());
          status != CKPT_OK) {
        Report("reading tensor " + std::to_string(t), status, checkpoint.err.get());
        return false;
      }
      const auto bytes = BoxBytes(tensor.dtype, tensor.ndim, tensor.shape);
      json entry = {{"key", tensor.key ? tensor.key : "?"},
                    {"dtype", ckpt_dtype_name(tensor.dtype)},
                    {"shape", ShapeJson(tensor.ndim, tensor.shape)},
                    {"chunk_count", tensor.chunk_count},
                    {"bytes", bytes ? json(*bytes) : json()}};
      if (with_chunks) {
        auto chunks = ChunksJson(checkpoint, t, tensor.chunk_count);
        if (!chunks) return false;
        entry["chunks"] = std::move(*chunks);
      }
      if (!sink(entry)) return false;
    }
    return true;
  };
}

JsonArrayProducer ObjectsSection(Checkpoint& checkpoint, uint64_t count) {
  return [&checkpoint, count](const JsonElementSink& sink) {
    for (uint64_t i = 0; i < count; ++i) {
      const char* key = nullptr;
      uint32_t grid_ndim = 0;
      const uint64_t* grid_shape = nullptr;
      uint64_t bytes = 0;
      if (const int32_t status = ckpt_reader_object_at(checkpoint.reader.get(), i, &key, &grid_ndim, &grid_shape,
                                                       &bytes, checkpoint.err.get());
          status != CKPT_OK) {
        Report("reading object " + std::to_string(i), status, checkpoint.err.get());
        return false;
      }
      if (!sink({{"key", key}, {"grid", ShapeJson(grid_ndim, grid_shape)}, {"bytes", bytes}})) return false;
    }
    return true;
  };
}

JsonArrayProducer CommonSection(Checkpoint& checkpoint, uint64_t count) {
  return [&checkpoint, count](const JsonElementSink& sink) {
    for (uint64_t i = 0; i < count; ++i) {
      const char* key = nullptr;
      const void* data = nullptr;
      uint64_t size = 0;
      if (const int32_t status =
              ckpt_reader_common_at(checkpoint.reader.get(), i, &key, &data, &size, checkpoint.err.get());
          status != CKPT_OK) {
        Report("reading common entry " + std::to_string(i), status, checkpoint.err.get());
        return false;
      }
      if (!sink({{"key", key}, {"bytes", size}, {"preview", PreviewBytes(data, size)}})) return false;
    }
    return true;
  };
}

JsonArrayProducer MetadataSection(Checkpoint& checkpoint, uint64_t count) {
  return [&checkpoint, count](const JsonElementSink& sink) {
    for (uint64_t i = 0; i < count; ++i) {
      const char* key = nullptr;
      const char* value = nullptr;
      if (const int32_t status =
              ckpt_reader_metadata_at(checkpoint.reader.get(), i, &key, &value, checkpoint.err.get());
          status != CKPT_OK) {
        Report("reading metadata entry " + std::to_string(i), status, checkpoint.err.get());
        return false;
      }
      if (!sink(key)) return false;
    }
    return true;
  };
}

// A checkpoint's listing: its facts, and its sections as they are produced.
struct CheckpointListing {
  json facts;
  JsonArrayProducer tensors, objects, common, metadata;
};

CheckpointListing ListingOf(Checkpoint& checkpoint, const ckpt_checkpoint_info& info, bool with_chunks) {
  return {json{{"path", checkpoint.dir},
               {"format", std::to_string(info.format_major) + "." + std::to_string(info.format_minor)},
               {"world_size", info.world_size},
               {"node_count", info.node_count},
               {"data_files", info.file_count},
               {"total_bytes", info.total_bytes}},
          TensorsSection(checkpoint, info.tensor_count, with_chunks), ObjectsSection(checkpoint, info.object_count),
          CommonSection(checkpoint, info.common_count), MetadataSection(checkpoint, info.metadata_count)};
}

int PrintCheckpointJson(const CheckpointListing& listing) {
  return PrintJsonStreamed(listing.facts, {{"tensors", listing.tensors},
                                           {"objects", listing.objects},
                                           {"common", listing.common},
                                           {"metadata", listing.metadata}});
}

// A cell of the text output: strings (keys, file and directory names, paths) escaped, other values as JSON writes them.
std::string Text(const json& value) { return value.is_string() ? Escaped(value.get<std::string>()) : value.dump(); }

std::string ShapeText(const json& shape) {
  std::string text = "[";
  for (size_t d = 0; d < shape.size(); ++d) text += (d ? ", " : "") + shape[d].dump();
  return text + "]";
}

// Widens the columns of `width` to hold the cells of `row`.
void Widen(const std::vector<std::string>& row, std::vector<size_t>* width) {
  for (size_t c = 0; c < row.size(); ++c) (*width)[c] = std::max((*width)[c], row[c].size());
}

// `row` as a line of columns of `width`.
std::string ColumnLine(const std::vector<std::string>& row, const std::vector<size_t>& width,
                       const std::vector<bool>& right_aligned) {
  std::string line;
  for (size_t c = 0; c < row.size(); ++c) {
    const std::string padding(width[c] - row[c].size(), ' ');
    line += "  " + (right_aligned[c] ? padding + row[c] : row[c] + padding);
  }
  line.erase(line.find_last_not_of(' ') + 1);  // an empty last cell leaves no trailing blanks
  return line;
}

// `rows` as lines of columns, each column as wide as its widest cell.
std::vector<std::string> Columns(const std::vector<std::vector<std::string>>& rows,
                                 const std::vector<bool>& right_aligned) {
  std::vector<size_t> width(right_aligned.size(), 0);
  for (const auto& row : rows) Widen(row, &width);
  std::vector<std::string> lines;
  for (const auto& row : rows) lines.push_back(ColumnLine(row, width, right_aligned));
  return lines;
}

// A section of the text listing as a table, a row per entry under an optional heading row, each column as wide as
// its widest cell. Measure passes over the section once before Print passes again, so that no row is kept.
class SectionTable {
 public:
  using Cells = std::function<std::vector<std::string>(const json& entry)>;

  SectionTable(std::vector<std::string> heading, std::vector<bool> right_aligned, Cells cells)
      : heading_(std::move(heading)),
        right_aligned_(std::move(right_aligned)),
        cells_(std::move(cells)),
        width_(right_aligned_.size(), 0) {
    if (!heading_.empty()) Widen(heading_, &width_);
  }

  bool Measure(const JsonArrayProducer& section) {
    return section([this](const json& entry) {
      Widen(cells_(entry), &width_);
      return true;
    });
  }

  // Prints the heading and a row per entry, calling `after_row` with each entry once its row is printed.
  bool Print(const JsonArrayProducer& section, const std::function<void(const json&)>& after_row = nullptr) const {
    if (!heading_.empty()) std::printf("%s\n", ColumnLine(heading_, width_, right_aligned_).c_str());
    return section([&](const json& entry) {
      std::printf("%s\n", ColumnLine(cells_(entry), width_, right_aligned_).c_str());
      if (after_row) after_row(entry);
      return true;
    });
  }

 private:
  std::vector<std::string> heading_;
  std::vector<bool> right_aligned_;
  Cells cells_;
  std::vector<size_t> width_;
};

SectionTable TensorTable() {
  return SectionTable({"KEY", "DTYPE", "SHAPE", "CHUNKS", "BYTES"}, {false, false, false, true, false},
                      [](const json& t) -> std::vector<std::string> {
                        return {Text(t["key"]), Text(t["dtype"]), ShapeText(t["shape"]), Text(t["chunk_count"]),
                                t["bytes"].is_null() ? "overflow" : Text(t["bytes"])};
                      });
}

SectionTable ObjectTable() {
  return SectionTable({"KEY", "GRID", "BYTES"}, {false, false, true}, [](const json& o) -> std::vector<std::string> {
    return {Text(o["key"]), ShapeText(o["grid"]), Text(o["bytes"])};
  });
}

SectionTable CommonTable() {
  return SectionTable({}, {false, true, false}, [](const json& c) -> std::vector<std::string> {
    return {Text(c["key"]), FormatBytes(c["bytes"].get<uint64_t>()), Text(c["preview"])};
  });
}

// The chunks of a tensor listed with --chunks, under its row.
void PrintChunks(const json& tensor) {
  if (!tensor.contains("chunks")) return;
  for (const json& chunk : tensor["chunks"]) {
    std::string box = "[";
    for (size_t d = 0; d < chunk["shape"].size(); ++d) {
      box += (d ? ", " : "") + chunk["offset"][d].dump() + ":" + chunk["shape"][d].dump();
    }
    std::printf("      %s]  %s @%s  %s\n", box.c_str(), Text(chunk["file"]).c_str(), Text(chunk["file_offset"]).c_str(),
                FormatBytes(chunk["bytes"].get<uint64_t>()).c_str());
  }
}

void PrintSummary(const std::string& path, const ckpt_checkpoint_info& info) {
  std::printf("checkpoint %s\n", path.c_str());
  std::printf("  format %u.%u, saved by %s on %s\n", info.format_major, info.format_minor,
              Count(info.world_size, "rank", "ranks").c_str(), Count(info.node_count, "node", "nodes").c_str());
  std::printf("  %s, %s, %s, %s, %s of data\n", Count(info.tensor_count, "tensor", "tensors").c_str(),
              Count(info.object_count, "object", "objects").c_str(),
              Count(info.common_count, "common entry", "common entries").c_str(),
              Count(info.file_count, "data file", "data files").c_str(), FormatBytes(info.total_bytes).c_str());
}

// The text listing: every table measured (and so every entry read) before the first line is printed.
int PrintCheckpoint(const CheckpointListing& listing, const ckpt_checkpoint_info& info) {
  SectionTable tensors = TensorTable(), objects = ObjectTable(), common = CommonTable();
  if (!tensors.Measure(listing.tensors) || !objects.Measure(listing.objects) || !common.Measure(listing.common) ||
      !listing.metadata([](const json&) { return true; })) {
    return kExitFailed;
  }
  const std::string path = Text(listing.facts["path"]);
  PrintSummary(path, info);
  bool printed = true;
  if (info.tensor_count > 0) {
    std::printf("tensors\n");
    printed = tensors.Print(listing.tensors, PrintChunks);
  }
  if (printed && info.object_count > 0) {
    std::printf("objects\n");
    printed = objects.Print(listing.objects);
  }
  if (printed && info.common_count > 0) {
    std::printf("common\n");
    printed = common.Print(listing.common);
  }
  if (printed && info.metadata_count > 0) {
    std::printf("metadata (print a value with: ckpt meta %s KEY)\n", path.c_str());
    printed = listing.metadata([](const json& key) {
      std::printf("  %s\n", Text(key).c_str());
      return true;
    });
  }
  return printed ? kExitOk : kExitFailed;
}

// A manager's root, as runtime/manager/manager.cc lays it out: committed steps are "step-<12 digits>" directories
// holding a MANIFEST, `latest` holds the published step's directory name and a newline, and what did not commit is a
// step directory without MANIFEST or a name with ".tmp-" after a step's name or "latest". The tool reads the layout
// itself because ckpt_manager_open, which knows it too, removes leftovers: `ls` changes nothing.
constexpr char kStepPrefix[] = "step-";
constexpr char kTemporaryInfix[] = ".tmp-";
constexpr char kLatestName[] = "latest";
constexpr char kManifestName[] = "MANIFEST";

// The step that directory `name` holds: only the canonical spelling counts, as in the manager.
std::optional<uint64_t> ParseStepName(const std::string& name) {
  if (name.rfind(kStepPrefix, 0) != 0) return std::nullopt;
  uint64_t step = 0;
  const std::string digits = name.substr(sizeof(kStepPrefix) - 1);
  if (std::sscanf(digits.c_str(), "%" SCNu64, &step) != 1) return std::nullopt;
  char canonical[40];
  std::snprintf(canonical, sizeof canonical, "%s%012" PRIu64, kStepPrefix, step);
  return name == canonical ? std::optional<uint64_t>(step) : std::nullopt;
}

bool IsLeftoverName(const std::string& name) {
  const size_t infix = name.find(kTemporaryInfix);
  if (infix == std::string::npos) return false;
  const std::string stem = name.substr(0, infix);
  return stem == kLatestName || ParseStepName(stem).has_value();
}

// Bytes of the regular files under `path` (or of `path` itself), not following links.
uint64_t DiskBytes(const fs::path& path) {
  std::error_code error;
  if (fs::is_regular_file(fs::symlink_status(path, error))) return fs::file_size(path, error);
  uint64_t bytes = 0;
  for (fs::recursive_directory_iterator it(path, error), end; !error && it != end; it.increment(error)) {
    if (it->is_regular_file(error) && !it->is_symlink(error)) bytes += it->file_size(error);
  }
  return bytes;
}

// A directory that is no checkpoint itself but holds steps, leftovers of steps, or a `latest` pointer.
bool IsManagerRoot(const std::string& dir) {
  std::error_code error;
  if (!fs::is_directory(dir, error) || fs::exists(fs::path(dir) / kManifestName, error)) return false;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name == kLatestName || ParseStepName(name) || IsLeftoverName(name)) return true;
  }
  return false;
}

// The bytes of the regular file `path` if it has at most `max_bytes`, read as the manager reads `latest`: not
// through a link, and without waiting (opening a FIFO would block until a writer came).
std::optional<std::string> ReadSmallRegularFile(const fs::path& path, size_t max_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st;
  std::optional<std::string> contents;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) <= max_bytes) {
    std::string bytes(static_cast<size_t>(st.st_size), '\0');
    if (pread(fd, bytes.data(), bytes.size(), 0) == st.st_size) contents = std::move(bytes);
  }
  close(fd);
  return contents;
}

// The step `latest` names, if it holds one step directory name and a newline (as the manager writes it).
std::optional<uint64_t> ReadLatestPointer(const fs::path& root) {
  constexpr size_t kMaxPointerBytes = 64;
  const std::optional<std::string> text = ReadSmallRegularFile(root / kLatestName, kMaxPointerBytes);
  if (!text || text->empty() || text->back() != '\n') return std::nullopt;
  return ParseStepName(text->substr(0, text->size() - 1));
}

json RootJson(const std::string& dir) {
  const fs::path root(dir);
  json steps = json::array(), leftovers = json::array();
  std::vector<std::pair<uint64_t, fs::path>> committed;
  std::error_code error;
  for (fs::directory_iterator it(root, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    const std::optional<uint64_t> step = ParseStepName(name);
    std::error_code ignored;
    if (step && fs::exists(it->path() / kManifestName, ignored)) {
      committed.emplace_back(*step, it->path());
    } else if ((step && it->is_directory(ignored)) || IsLeftoverName(name)) {
      leftovers.push_back({{"name", name}, {"path", it->path().string()}, {"bytes", DiskBytes(it->path())}});
    }
  }
  std::sort(committed.begin(), committed.end());
  std::sort(leftovers.begin(), leftovers.end(), [](const json& a, const json& b) { return a["name"] < b["name"]; });
  // What a load takes, as ckpt_manager_latest says: the published step if committed, else the newest committed.
  const std::optional<uint64_t> pointer = ReadLatestPointer(root);
  const bool published = pointer && std::any_of(committed.begin(), committed.end(),
                                                [&](const auto& entry) { return entry.first == *pointer; });
  json latest;
  if (published) {
    latest = *pointer;
  } else if (!committed.empty()) {
    latest = committed.back().first;
  }
  for (const auto& [step, path] : committed) {
    steps.push_back({{"step", step}, {"path", path.string()}, {"bytes", DiskBytes(path)}, {"latest", latest == step}});
  }
  return json{{"root", dir},
              {"latest", latest},
              {"latest_pointer", pointer ? json(*pointer) : json()},
              {"steps", std::move(steps)},
              {"uncommitted", std::move(leftovers)}};
}

void PrintRoot(const json& listing) {
  std::printf("checkpoint root %s\n", Text(listing["root"]).c_str());
  const json& pointer = listing["latest_pointer"];
  if (listing["latest"].is_null()) {
    std::printf("  no committed step\n");
  } else if (pointer == listing["latest"]) {
    std::printf("  latest -> step %s\n", Text(pointer).c_str());
  } else {
    std::printf(
        "  latest -> step %s (the `latest` pointer %s: a load takes the newest committed step)\n",
        Text(listing["latest"]).c_str(),
        pointer.is_null() ? "is missing or unreadable" : ("names step " + Text(pointer) + ", not committed").c_str());
  }
  if (!listing["steps"].empty()) {
    std::printf("steps\n");
    std::vector<std::vector<std::string>> rows = {{"STEP", "BYTES", ""}};
    for (const json& s : listing["steps"]) {
      rows.push_back(
          {Text(s["step"]), FormatBytes(s["bytes"].get<uint64_t>()), s["latest"].get<bool>() ? "latest" : ""});
    }
    for (const std::string& line : Columns(rows, {true, true, false})) std::printf("%s\n", line.c_str());
  }
  if (!listing["uncommitted"].empty()) {
    // A save still writing has a temporary directory too: the listing cannot tell it from a dead one's.
    std::printf("uncommitted (left by saves that did not commit, or being written now)\n");
    std::vector<std::vector<std::string>> rows;
    for (const json& l : listing["uncommitted"])
      rows.push_back({Text(l["name"]), FormatBytes(l["bytes"].get<uint64_t>())});
    for (const std::string& line : Columns(rows, {false, true})) std::printf("%s\n", line.c_str());
  }
}

}  // namespace

int List(const ListOptions& options) {
  if (IsManagerRoot(options.dir)) {
    const json listing = RootJson(options.dir);
    if (options.json) return PrintJson(listing);
    PrintRoot(listing);
    return kExitOk;
  }
  auto checkpoint = Open(options.dir);
  if (!checkpoint) return kExitFailed;
  Failure failure;
  const auto info = Info(*checkpoint, &failure);
  if (!info) return Report(failure);
  const CheckpointListing listing = ListingOf(*checkpoint, *info, options.chunks);
  return options.json ? PrintCheckpointJson(listing) : PrintCheckpoint(listing, *info);
}

}  // namespace ckpt_cli

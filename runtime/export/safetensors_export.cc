#include "runtime/export/safetensors_export.h"

#include <unistd.h>

#include <algorithm>

#include "common/key_text.h"
#include "io/durable_publish.h"
#include "io/file_io.h"
#include "io/object_storage.h"
#include "runtime/core/dtype.h"
#include "runtime/export/export_writer.h"
#include "runtime/format/safetensors.h"

namespace ckpt::runtime {
namespace {

struct PlannedFile {
  std::string name;
  std::vector<ExportedTensor> tensors;
  uint64_t data_bytes = 0;
};

bool IsFloating(int32_t dtype) {
  const auto d = static_cast<DType>(dtype);
  return d == DType::kF16 || d == DType::kBF16 || d == DType::kF32 || d == DType::kF64;
}

// The tensors to export, in key order, each with the dtype it is written in.
Result<std::vector<ExportedTensor>> SelectTensors(const Manifest& manifest, const ExportOptions& options,
                                                  const std::string& dir) {
  const std::vector<std::string>& keys = options.keys;
  std::vector<const TensorRecord*> selected;
  if (keys.empty()) {
    for (const TensorRecord& t : manifest.tensors) selected.push_back(&t);
  } else {
    for (const std::string& key : keys) {
      auto it = std::lower_bound(manifest.tensors.begin(), manifest.tensors.end(), key,
                                 [](const TensorRecord& t, const std::string& k) { return t.key < k; });
      if (it == manifest.tensors.end() || it->key != key) {
        return NotFound("tensor " + Quoted(key) + " is not in the checkpoint at " + dir);
      }
      selected.push_back(&*it);
    }
    std::sort(selected.begin(), selected.end(),
              [](const TensorRecord* a, const TensorRecord* b) { return a->key < b->key; });
    selected.erase(std::unique(selected.begin(), selected.end()), selected.end());
  }
  if (options.dtype != 0 && !IsFloating(options.dtype)) {
    return InvalidArgument(std::string("an export converts floating tensors to F16, BF16, F32 or F64, not to ") +
                           DTypeName(options.dtype));
  }
  std::vector<ExportedTensor> exported;
  for (const TensorRecord* t : selected) {
    exported.push_back(ExportedTensor{t, options.dtype != 0 && IsFloating(t->dtype) ? options.dtype : t->dtype});
  }
  return exported;
}

// Tensors in key order, a new file whenever the next tensor would take the current one past max_bytes.
std::vector<PlannedFile> PlanShards(const std::vector<ExportedTensor>& tensors, uint64_t max_bytes) {
  std::vector<PlannedFile> files(1);
  for (const ExportedTensor& t : tensors) {
    const uint64_t bytes = t.bytes();
    if (max_bytes != 0 && !files.back().tensors.empty() && files.back().data_bytes + bytes > max_bytes) {
      files.emplace_back();
    }
    files.back().tensors.push_back(t);
    files.back().data_bytes += bytes;
  }
  if (files.size() == 1) {
    files[0].name = kHfSingleFileName;
    return files;
  }
  for (size_t i = 0; i < files.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, files.size());
    files[i].name = name;
  }
  return files;
}

// The checkpoint's metadata, sorted by key, each key once (its first value, as ckpt_reader_metadata finds it).
std::vector<std::pair<std::string, std::string>> FileMetadata(const Manifest& manifest) {
  std::vector<std::pair<std::string, std::string>> metadata = manifest.metadata;
  const bool names_format =
      std::any_of(metadata.begin(), metadata.end(), [](const auto& entry) { return entry.first == "format"; });
  if (!names_format) metadata.emplace_back("format", "pt");
  const auto by_key = [](const auto& a, const auto& b) { return a.first < b.first; };
  std::stable_sort(metadata.begin(), metadata.end(), by_key);
  const auto same_key = [](const auto& a, const auto& b) { return a.first == b.first; };
  metadata.erase(std::unique(metadata.begin(), metadata.end(), same_key), metadata.end());
  return metadata;
}

// The header of every planned file, encoded before any file is written: a name that safetensors cannot hold fails
// the export with nothing written, in every part alike.
Result<std::vector<std::string>> EncodeHeaders(const std::string& dir, const std::vector<PlannedFile>& files,
                                               const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::vector<std::string> headers;
  for (const PlannedFile& file : files) {
    std::vector<SafetensorsTensor> entries;
    uint64_t data_offset = 0;
    for (const ExportedTensor& t : file.tensors) {
      entries.push_back(
          SafetensorsTensor{t.record->key, t.dtype, t.record->shape, data_offset, data_offset + t.bytes()});
      data_offset += t.bytes();
    }
    Result<std::string> header = EncodeSafetensorsHeader(entries, metadata, kExportDataAlignment);
    if (!header.ok()) return header.status().WithContext("exporting " + io::JoinPath(dir, file.name));
    headers.push_back(std::move(header).value());
  }
  return headers;
}

// Writes `file` as `dir`/`file.name`, beginning with `header`: under a temporary name, synced, then published
// without replacing anything.
Status WriteSafetensorsFile(const io::IoTuning& tuning, const CheckpointSource& source, const std::string& checkpoint,
                            const std::string& dir, const PlannedFile& file, const std::string& header,
                            uint64_t window_bytes) {
  const std::string final_path = io::JoinPath(dir, file.name);
  if (io::PathExists(final_path)) return AlreadyExists(final_path + " already exists; export never replaces a file");
  // An object appears whole when its upload completes: nothing to publish.
  if (io::IsObjectStorePath(final_path)) {
    return WriteExportFile(tuning, source, checkpoint, final_path, header, file.tensors, window_bytes);
  }
  const std::string temporary = io::JoinPath(dir, "." + file.name + ".tmp-" + std::to_string(getpid()));
  RETURN_IF_ERROR(WriteExportFile(tuning, source, checkpoint, temporary, header, file.tensors, window_bytes));
  return io::PublishFile(temporary, final_path);
}

// A directory that already holds safetensors of another export would mix two models for whoever loads it. Files
// of this very plan may be there, written by the other parts of a shared export.
Status RefuseForeignFiles(const std::string& dir, const std::vector<PlannedFile>& files) {
  ASSIGN_OR_RETURN(std::vector<std::string> present, io::ListDirectory(dir));
  for (const std::string& name : present) {
    if (!IsSafetensorsFileName(name) && name != kHfIndexName) continue;
    const bool planned =
        std::any_of(files.begin(), files.end(), [&](const PlannedFile& f) { return f.name == name; }) ||
        (name == kHfIndexName && files.size() > 1);
    if (!planned) {
      return AlreadyExists(io::JoinPath(dir, name) + " is from another export; export never mixes two in a directory");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<ExportSummary> ExportSafetensors(const std::string& checkpoint, const std::string& out,
                                        const ExportOptions& options) {
  if (options.part_count == 0 || options.part_index >= options.part_count) {
    return InvalidArgument("export part " + std::to_string(options.part_index) + " of " +
                           std::to_string(options.part_count) + " does not exist");
  }
  if (options.window_bytes == 0) return InvalidArgument("the export window must be at least one byte");
  ASSIGN_OR_RETURN(const CheckpointSource source, OpenCheckpointSource(checkpoint));
  const Manifest& manifest = source.manifest;
  ASSIGN_OR_RETURN(std::vector<ExportedTensor> tensors, SelectTensors(manifest, options, checkpoint));

  std::string dir = out;
  std::vector<PlannedFile> files;
  if (IsSafetensorsFileName(out)) {
    dir = io::ParentDirectory(out);
    files = PlanShards(tensors, 0);
    files[0].name = out.substr(out.rfind('/') + 1);
  } else {
    files = PlanShards(tensors, options.max_shard_bytes);
  }
  ASSIGN_OR_RETURN(const std::vector<std::string> headers, EncodeHeaders(dir, files, FileMetadata(manifest)));
  RETURN_IF_ERROR(io::MakeDirectoriesDurably(dir));
  if (!IsSafetensorsFileName(out)) RETURN_IF_ERROR(RefuseForeignFiles(dir, files));

  // The export reads and writes in this process, with the default tuning: it needs no staging arena, whose pages
  // would cost it more than its reads (a 256 MiB arena took half of a 256 MiB export's time on the RAM disk).
  const io::IoTuning tuning;
  ExportSummary summary;
  for (size_t i = 0; i < files.size(); ++i) {
    const bool mine = i % options.part_count == options.part_index;
    if (mine) {
      RETURN_IF_ERROR(WriteSafetensorsFile(tuning, source, checkpoint, dir, files[i], headers[i], options.window_bytes)
                          .WithContext("exporting " + io::JoinPath(dir, files[i].name)));
    }
    summary.files.push_back(ExportedFile{files[i].name, files[i].tensors.size(), files[i].data_bytes, mine});
    summary.tensor_count += files[i].tensors.size();
    summary.data_bytes += files[i].data_bytes;
  }
  if (files.size() > 1 && options.part_index == 0) {
    HfIndex index;
    index.total_size = summary.data_bytes;
    for (const PlannedFile& f : files) {
      for (const ExportedTensor& t : f.tensors) index.weight_map.emplace_back(t.record->key, f.name);
    }
    const std::string json = EncodeHfIndex(index);
    const std::string index_path = io::JoinPath(dir, kHfIndexName);
    if (io::IsObjectStorePath(index_path)) {
      RETURN_IF_ERROR(io::WriteFileDurably(index_path, json.data(), json.size()));
      summary.wrote_index = true;
      return summary;
    }
    const std::string temporary =
        io::JoinPath(dir, std::string(".") + kHfIndexName + ".tmp-" + std::to_string(getpid()));
    RETURN_IF_ERROR(io::WriteFileDurably(temporary, json.data(), json.size()));
    RETURN_IF_ERROR(io::PublishFile(temporary, index_path));
    summary.wrote_index = true;
  }
  return summary;
}

}  // namespace ckpt::runtime

#include "runtime/safetensors_export.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cerrno>
#include <iterator>
#include <cstdio>
#include <mutex>
#include <thread>

#include "io/file_io.h"
#include "runtime/dtype.h"
#include "runtime/dtype_cast.h"
#include "runtime/safetensors.h"

namespace ckpt::runtime {
namespace {

constexpr char kSingleFileName[] = "model.safetensors";
constexpr char kSafetensorsSuffix[] = ".safetensors";

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A tensor as exported: its record and the dtype it is written in.
struct ExportedTensor {
  const TensorRecord* record = nullptr;
  int32_t dtype = 0;
  uint64_t bytes() const { return Volume(record->shape) * DTypeSize(dtype); }
};

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
        return NotFound("tensor '" + key + "' is not in the checkpoint at " + dir);
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
    const int32_t dtype = options.dtype != 0 && IsFloating(t->dtype) ? options.dtype : t->dtype;
    if (SafetensorsDTypeName(dtype).empty()) {
      return Unsupported("tensor '" + t->key + "' is " + DTypeName(dtype) + ", which safetensors has no name for");
    }
    exported.push_back(ExportedTensor{t, dtype});
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
    files[0].name = kSingleFileName;
    return files;
  }
  for (size_t i = 0; i < files.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, files.size());
    files[i].name = name;
  }
  return files;
}

std::vector<std::pair<std::string, std::string>> FileMetadata(const Manifest& manifest) {
  std::vector<std::pair<std::string, std::string>> metadata = manifest.metadata;
  const bool names_format = std::any_of(metadata.begin(), metadata.end(),
                                        [](const auto& entry) { return entry.first == "format"; });
  if (!names_format) metadata.emplace_back("format", "pt");
  std::sort(metadata.begin(), metadata.end());
  return metadata;
}

// One read of the export: a box of a tensor, contiguous in the tensor's row-major order, and where it goes.
struct Window {
  ExportedTensor tensor;
  Box box;
  uint64_t file_offset = 0;
  uint64_t stored_bytes = 0;  // read, in the stored dtype
  uint64_t bytes = 0;         // written, in the exported dtype
};

// Splits a tensor into boxes of at most `window_bytes` as stored (or one element, if a single element is larger),
// each contiguous in row-major order: a slab of the outermost dimension whose inner block fits, at every index of
// the dimensions before it.
void AppendWindows(const ExportedTensor& tensor, uint64_t file_offset, uint64_t window_bytes,
                   std::vector<Window>& windows) {
  const uint64_t stored_element = DTypeSize(tensor.record->dtype);
  const uint64_t element = DTypeSize(tensor.dtype);
  const Shape& shape = tensor.record->shape;
  const size_t ndim = shape.size();
  if (Volume(shape) == 0) return;
  if (ndim == 0) {
    windows.push_back(Window{tensor, Box{}, file_offset, stored_element, element});
    return;
  }
  // inner[d]: elements of one index step along dimension d.
  std::vector<uint64_t> inner(ndim);
  inner[ndim - 1] = 1;
  for (size_t d = ndim - 1; d > 0; --d) inner[d - 1] = inner[d] * shape[d];
  size_t split = 0;
  while (split + 1 < ndim && inner[split] * stored_element > window_bytes) ++split;
  const uint64_t step = std::max<uint64_t>(1, window_bytes / (inner[split] * stored_element));
  Shape outer(split, 0);  // odometer over the dimensions before `split`
  for (;;) {
    for (uint64_t start = 0; start < shape[split]; start += step) {
      Box box;
      box.offset.assign(ndim, 0);
      box.shape = shape;
      uint64_t first = 0;  // the box's first element, in row-major order
      for (size_t d = 0; d < split; ++d) {
        box.offset[d] = outer[d];
        box.shape[d] = 1;
        first += outer[d] * inner[d];
      }
      box.offset[split] = start;
      box.shape[split] = std::min(step, shape[split] - start);
      first += start * inner[split];
      const uint64_t count = box.shape[split] * inner[split];
      windows.push_back(Window{tensor, box, file_offset + first * element, count * stored_element, count * element});
    }
    size_t d = split;
    while (d > 0 && ++outer[d - 1] == shape[d - 1]) outer[--d] = 0;
    if (d == 0) return;
  }
}

// Reads windows on a thread of its own while the caller writes the ones already read: two buffers, so that the
// time is about max(read, write) rather than their sum.
class WindowPipeline {
 public:
  WindowPipeline(CheckpointReader& reader, const std::vector<Window>& windows) : reader_(reader), windows_(windows) {
    uint64_t largest = 0, largest_cast = 0;
    for (const Window& w : windows) {
      largest = std::max(largest, w.bytes);
      if (Casts(w)) largest_cast = std::max(largest_cast, w.stored_bytes);
    }
    for (auto& buffer : buffers_) buffer.resize(largest);
    stored_.resize(largest_cast);
  }

  Status Run(io::File& out) {
    std::thread reading([this] { ReadAll(); });
    Status status = WriteAll(out);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!status.ok()) stopped_ = true;
    }
    changed_.notify_all();
    reading.join();
    if (!status.ok()) return status;
    return read_status_;
  }

 private:
  void ReadAll() {
    Status status;
    if (auto failure = ExceptionIn("reading windows for export", [&] { status = ReadWindows(); })) status = *failure;
    std::lock_guard<std::mutex> lock(mutex_);
    read_status_ = status;
    if (!status.ok()) stopped_ = true;
    changed_.notify_all();
  }

  Status ReadWindows() {
    for (size_t i = 0; i < windows_.size(); ++i) {
      std::string* buffer = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return stopped_ || read_ - written_ < std::size(buffers_); });
        if (stopped_) return Status::Ok();
        buffer = &buffers_[i % std::size(buffers_)];
      }
      const Window& w = windows_[i];
      if (Casts(w)) {
        RETURN_IF_ERROR(reader_.ReadBox(w.tensor.record->key, w.box, stored_.data(), w.stored_bytes));
        CastElements(w.tensor.record->dtype, w.tensor.dtype, stored_.data(), buffer->data(), w.box.volume());
      } else {
        RETURN_IF_ERROR(reader_.ReadBox(w.tensor.record->key, w.box, buffer->data(), w.bytes));
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++read_;
      }
      changed_.notify_all();
    }
    return Status::Ok();
  }

  Status WriteAll(io::File& out) {
    for (size_t i = 0; i < windows_.size(); ++i) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return stopped_ || read_ > i; });
        if (read_ <= i) return Status::Ok();  // the reader failed; Run returns its status
      }
      const Window& w = windows_[i];
      RETURN_IF_ERROR(out.WriteAt(buffers_[i % std::size(buffers_)].data(), w.bytes, w.file_offset));
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++written_;
      }
      changed_.notify_all();
    }
    return Status::Ok();
  }

  static bool Casts(const Window& w) { return w.tensor.dtype != w.tensor.record->dtype; }

  CheckpointReader& reader_;
  const std::vector<Window>& windows_;
  std::string buffers_[2];
  std::string stored_;  // the window as stored, before its conversion (used by the reading thread only)
  std::mutex mutex_;
  std::condition_variable changed_;
  size_t read_ = 0;
  size_t written_ = 0;
  bool stopped_ = false;
  Status read_status_;
};

// Writes `file` as `dir`/`file.name`: under a temporary name, synced, then renamed without replacing anything.
Status WriteSafetensorsFile(CheckpointReader& reader, const std::string& dir, const PlannedFile& file,
                            const std::vector<std::pair<std::string, std::string>>& metadata,
                            uint64_t window_bytes) {
  std::vector<SafetensorsTensor> entries;
  uint64_t data_offset = 0;
  for (const ExportedTensor& t : file.tensors) {
    entries.push_back(SafetensorsTensor{t.record->key, t.dtype, t.record->shape, data_offset, data_offset + t.bytes()});
    data_offset += t.bytes();
  }
  const std::string header = EncodeSafetensorsHeader(entries, metadata, kExportDataAlignment);
  std::vector<Window> windows;
  for (size_t i = 0; i < file.tensors.size(); ++i) {
    AppendWindows(file.tensors[i], header.size() + entries[i].begin, window_bytes, windows);
  }

  const std::string final_path = io::JoinPath(dir, file.name);
  if (io::PathExists(final_path)) return AlreadyExists(final_path + " already exists; export never replaces a file");
  const std::string temporary = io::JoinPath(dir, "." + file.name + ".tmp-" + std::to_string(getpid()));
  ASSIGN_OR_RETURN(io::File out, io::File::CreateNew(temporary));
  Status status = out.WriteAt(header.data(), header.size(), 0);
  if (status.ok()) status = WindowPipeline(reader, windows).Run(out);
  // The file's length is set even when its last tensors are empty.
  if (status.ok() && ftruncate(out.fd(), static_cast<off_t>(header.size() + data_offset)) != 0) {
    status = io::ErrnoStatus(errno, "cannot size " + temporary);
  }
  if (status.ok()) status = out.Sync();
  const Status closed = out.Close();
  if (status.ok()) status = closed;
  if (status.ok()) status = io::RenameNoReplace(temporary, final_path);
  if (!status.ok()) unlink(temporary.c_str());
  return status;
}

// A directory that already holds safetensors of another export would mix two models for whoever loads it. Files
// of this very plan may be there, written by the other parts of a shared export.
Status RefuseForeignFiles(const std::string& dir, const std::vector<PlannedFile>& files) {
  ASSIGN_OR_RETURN(std::vector<std::string> present, io::ListDirectory(dir));
  for (const std::string& name : present) {
    if (!EndsWith(name, kSafetensorsSuffix) && name != kHfIndexName) continue;
    const bool planned = std::any_of(files.begin(), files.end(), [&](const PlannedFile& f) { return f.name == name; }) ||
                         (name == kHfIndexName && files.size() > 1);
    if (!planned) {
      return AlreadyExists(io::JoinPath(dir, name) + " is from another export; export never mixes two in a directory");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<ExportSummary> ExportSafetensors(CheckpointReader& reader, const std::string& out,
                                        const ExportOptions& options) {
  if (options.part_count == 0 || options.part_index >= options.part_count) {
    return InvalidArgument("export part " + std::to_string(options.part_index) + " of " +
                           std::to_string(options.part_count) + " does not exist");
  }
  if (options.window_bytes == 0) return InvalidArgument("the export window must be at least one byte");
  const Manifest& manifest = reader.manifest();
  ASSIGN_OR_RETURN(std::vector<ExportedTensor> tensors, SelectTensors(manifest, options, reader.dir()));

  std::string dir = out;
  std::vector<PlannedFile> files;
  if (EndsWith(out, kSafetensorsSuffix)) {
    dir = io::ParentDirectory(out);
    files = PlanShards(tensors, 0);
    files[0].name = out.substr(out.rfind('/') + 1);
  } else {
    files = PlanShards(tensors, options.max_shard_bytes);
  }
  RETURN_IF_ERROR(io::MakeDirectories(dir));
  if (!EndsWith(out, kSafetensorsSuffix)) RETURN_IF_ERROR(RefuseForeignFiles(dir, files));

  const auto metadata = FileMetadata(manifest);
  ExportSummary summary;
  for (size_t i = 0; i < files.size(); ++i) {
    const bool mine = i % options.part_count == options.part_index;
    if (mine) {
      RETURN_IF_ERROR(WriteSafetensorsFile(reader, dir, files[i], metadata, options.window_bytes)
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
    const std::string temporary = io::JoinPath(dir, std::string(".") + kHfIndexName + ".tmp-" + std::to_string(getpid()));
    RETURN_IF_ERROR(io::WriteFileDurably(temporary, json.data(), json.size()));
    if (Status renamed = io::RenameNoReplace(temporary, index_path); !renamed.ok()) {
      unlink(temporary.c_str());
      return renamed;
    }
    summary.wrote_index = true;
  }
  RETURN_IF_ERROR(io::SyncDirectory(dir));
  return summary;
}

}  // namespace ckpt::runtime

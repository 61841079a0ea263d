#include "runtime/save/commit.h"

#include <algorithm>
#include <map>

#include "io/durable_publish.h"
#include "io/file_io.h"
#include "io/object_storage.h"
#include "runtime/format/manifest.h"
#include "runtime/save/replica_check.h"

namespace ckpt::runtime {
namespace {

template <typename T, typename Less>
void SortBy(std::vector<T>& values, Less less) {
  std::sort(values.begin(), values.end(), less);
}

Manifest BuildManifest(const CommitInputs& inputs, std::vector<WriterReport> reports) {
  Manifest m;
  m.library_version = CKPT_LIBRARY_VERSION;
  m.checkpoint_id = inputs.save_id;
  m.world_size = static_cast<uint32_t>(inputs.world_size);
  m.metadata = inputs.metadata;

  std::map<std::string, TensorRecord> tensors;
  std::map<std::string, ObjectRecord> objects;
  for (const TensorRecord& t : inputs.skeleton->tensors) tensors.emplace(t.key, t);
  for (const ObjectRecord& o : inputs.skeleton->objects) objects.emplace(o.key, o);
  m.node_count = inputs.skeleton->node_count;

  // Other checkpoints' files, listed once however many ranks refer to them, after this checkpoint's own.
  std::map<std::pair<std::string, std::string>, uint32_t> referenced;
  std::vector<DataFileRecord> referenced_files;
  std::vector<std::pair<WrittenItem, uint32_t>> references;  // with the index into referenced_files
  for (WriterReport& report : reports) {
    std::vector<uint32_t> renumbered;
    for (DataFileRecord& file : report.referenced_files) {
      const auto [at, added] = referenced.emplace(std::make_pair(file.checkpoint, file.name),
                                                  static_cast<uint32_t>(referenced_files.size()));
      if (added) referenced_files.push_back(std::move(file));
      renumbered.push_back(at->second);
    }
    for (WrittenItem& item : report.references) {
      const uint32_t file = renumbered[item.bytes.file_index];
      references.emplace_back(std::move(item), file);
    }
    for (TensorDigests& d : report.digests) tensors[d.key].digests.push_back(std::move(d.digests));
  }

  for (WriterReport& report : reports) {
    const auto base = static_cast<uint32_t>(m.files.size());
    for (DataFileRecord& file : report.files) m.files.push_back(std::move(file));
    for (WrittenItem& item : report.items) {
      item.bytes.file_index += base;
      if (item.is_object) {
        objects[item.key].pieces.push_back(ObjectPieceRecord{item.index, std::move(item.bytes)});
      } else {
        tensors[item.key].chunks.push_back(ChunkRecord{item.box, std::move(item.bytes)});
      }
    }
    for (CommonRecord& c : report.stored_common) {
      c.stored.file_index += base;
      m.common.push_back(std::move(c));
    }
  }
  const auto first_referenced = static_cast<uint32_t>(m.files.size());
  for (DataFileRecord& file : referenced_files) m.files.push_back(std::move(file));
  for (auto& [item, file] : references) {
    item.bytes.file_index = first_referenced + file;
    tensors[item.key].chunks.push_back(ChunkRecord{item.box, std::move(item.bytes)});
  }
  for (const CommonRecord& c : inputs.inline_common) m.common.push_back(c);
  SortBy(m.common, [](const auto& a, const auto& b) { return a.key < b.key; });
  for (auto& [key, t] : tensors) {
    SortBy(t.chunks, [](const auto& a, const auto& b) { return a.box < b.box; });
    SortBy(t.digests, [](const auto& a, const auto& b) { return a.box < b.box; });
    m.tensors.push_back(std::move(t));
  }
  for (auto& [key, o] : objects) {
    SortBy(o.pieces, [](const auto& a, const auto& b) { return a.index < b.index; });
    m.objects.push_back(std::move(o));
  }
  m.format_major = FormatMajorFor(m);
  return m;
}

}  // namespace

Status CommitSave(const CommitInputs& inputs, const std::vector<std::string>& encoded_reports) {
  std::vector<WriterReport> reports;
  for (size_t r = 0; r < encoded_reports.size(); ++r) {
    ASSIGN_OR_RETURN(WriterReport report, DecodeWriterReport(encoded_reports[r], static_cast<int>(r)));
    reports.push_back(std::move(report));
  }
  RETURN_IF_ERROR(CheckReplicas(reports));
  Manifest manifest = BuildManifest(inputs, std::move(reports));
  // On object storage the data objects are where they stay: the manifest, created only if absent, is the commit.
  if (io::IsObjectStorePath(inputs.path)) {
    if (inputs.before_commit) RETURN_IF_ERROR(inputs.before_commit(inputs.path));
    return WriteManifest(inputs.path, manifest);
  }
  // A save in which nobody had bytes to write created no directory yet.
  RETURN_IF_ERROR(io::MakeDirectories(io::JoinPath(inputs.tmp_dir, kDataDirName)));
  if (inputs.before_commit) RETURN_IF_ERROR(inputs.before_commit(inputs.tmp_dir));
  RETURN_IF_ERROR(WriteManifest(inputs.tmp_dir, manifest));
  return io::PublishDirectory(inputs.tmp_dir, {kDataDirName}, inputs.path);
}

}  // namespace ckpt::runtime

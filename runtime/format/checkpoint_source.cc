#include "runtime/format/checkpoint_source.h"

#include <algorithm>
#include <map>
#include <set>

#include "common/key_text.h"
#include "io/file_io.h"
#include "io/object_storage.h"
#include "runtime/format/safetensors.h"

namespace ckpt::runtime {
namespace {

std::string BaseName(const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  return trimmed.substr(trimmed.rfind('/') + 1);
}

// Adds every tensor of safetensors file `name` (beneath `dir`) to `manifest`, as one unverified chunk each.
Status AddSafetensorsFile(const std::string& dir, const std::string& name, Manifest& manifest,
                          std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(SafetensorsHeader header, ReadSafetensorsHeader(dir, name));
  const uint32_t file_index = static_cast<uint32_t>(manifest.files.size());
  uint64_t data_end = 0;
  for (const SafetensorsTensor& t : header.tensors) data_end = std::max(data_end, t.end);
  manifest.files.push_back(DataFileRecord{name, header.data_start + data_end});
  // Room for exactly this file's records, or twice what is there (many files): left to double by itself, the vector
  // would hold up to twice the records of a large header, and both copies while it grows.
  const size_t needed = manifest.tensors.size() + header.tensors.size();
  if (needed > manifest.tensors.capacity()) manifest.tensors.reserve(std::max(needed, 2 * manifest.tensors.size()));
  for (SafetensorsTensor& t : header.tensors) {
    TensorRecord record;
    record.key = std::move(t.key);
    record.dtype = t.dtype;
    ChunkRecord chunk;
    chunk.box = WholeBox(t.shape);
    record.shape = std::move(t.shape);
    chunk.bytes.file_index = file_index;
    chunk.bytes.file_offset = header.data_start + t.begin;
    chunk.bytes.byte_length = t.end - t.begin;
    chunk.bytes.block_size = kForeignBlockSize;
    record.chunks.push_back(std::move(chunk));
    manifest.tensors.push_back(std::move(record));
  }
  for (const auto& [key, value] : header.metadata) metadata.emplace(key, value);
  return Status::Ok();
}

Result<CheckpointSource> FromSafetensors(const std::string& dir, const std::vector<std::string>& files,
                                         const HfIndex* index) {
  CheckpointSource source;
  source.dir = dir;
  source.safetensors = true;
  Manifest& manifest = source.manifest;
  manifest.library_version = "safetensors";
  std::map<std::string, std::string> metadata;
  for (const std::string& name : files) {
    RETURN_IF_ERROR(AddSafetensorsFile(dir, name, manifest, metadata));
  }
  std::sort(manifest.tensors.begin(), manifest.tensors.end(),
            [](const TensorRecord& a, const TensorRecord& b) { return a.key < b.key; });
  for (size_t i = 1; i < manifest.tensors.size(); ++i) {
    if (manifest.tensors[i].key == manifest.tensors[i - 1].key) {
      return Corrupt(dir + ": tensor " + Quoted(manifest.tensors[i].key) + " is in both " +
                     manifest.files[manifest.tensors[i - 1].chunks[0].bytes.file_index].name + " and " +
                     manifest.files[manifest.tensors[i].chunks[0].bytes.file_index].name);
    }
  }
  if (index != nullptr) {
    // The index and the files must tell the same story: each listed tensor in the file named, nothing unlisted.
    std::map<std::string, std::string> listed(index->weight_map.begin(), index->weight_map.end());
    for (const TensorRecord& t : manifest.tensors) {
      const std::string& file = manifest.files[t.chunks[0].bytes.file_index].name;
      auto it = listed.find(t.key);
      if (it == listed.end()) {
        return Corrupt(dir + ": " + file + " holds tensor " + Quoted(t.key) + ", which " + kHfIndexName +
                       " does not list");
      }
      if (it->second != file) {
        return Corrupt(dir + ": " + kHfIndexName + " puts tensor " + Quoted(t.key) + " in " + it->second +
                       ", but it is in " + file);
      }
      listed.erase(it);
    }
    if (!listed.empty()) {
      return Corrupt(dir + ": " + kHfIndexName + " lists tensor " + Quoted(listed.begin()->first) + " in " +
                     listed.begin()->second + ", which does not hold it");
    }
  }
  manifest.metadata.assign(metadata.begin(), metadata.end());
  return source;
}

Result<CheckpointSource> FromCheckpoint(const std::string& dir, ChunkDecoding chunks) {
  if (chunks == ChunkDecoding::kAll) {
    ASSIGN_OR_RETURN(Manifest manifest, ReadManifest(dir));
    return CheckpointSource{dir, std::move(manifest), false, nullptr};
  }
  ASSIGN_OR_RETURN(ManifestWithoutChunks read, ReadManifestWithoutChunks(dir));
  return CheckpointSource{dir, std::move(read.manifest), false, std::move(read.chunks)};
}

Result<CheckpointSource> FromHfIndex(const std::string& dir, const std::string& index_name) {
  ASSIGN_OR_RETURN(std::string json, io::ReadWholeFile(dir, index_name, kMaxHfIndexBytes));
  ASSIGN_OR_RETURN(HfIndex index, ParseHfIndex(json, io::JoinPath(dir, index_name)));
  std::set<std::string> files;
  for (const auto& entry : index.weight_map) files.insert(entry.second);
  return FromSafetensors(dir, std::vector<std::string>(files.begin(), files.end()), &index);
}

}  // namespace

Result<CheckpointSource> OpenCheckpointSource(const std::string& path, ChunkDecoding chunks) {
  if (io::IsObjectStorePath(path)) {
    const std::string name = BaseName(path);
    if (IsSafetensorsFileName(name)) return FromSafetensors(io::ParentDirectory(path), {name}, nullptr);
    if (IsIndexFileName(name)) return FromHfIndex(io::ParentDirectory(path), name);
    // A prefix: a checkpoint if its MANIFEST is there, else Hugging Face weights (HEADs, no LIST).
    if (!io::ObjectSize(io::JoinPath(path, kManifestName)).ok()) {
      if (io::ObjectSize(io::JoinPath(path, kHfIndexName)).ok()) return FromHfIndex(path, kHfIndexName);
      if (io::ObjectSize(io::JoinPath(path, kHfSingleFileName)).ok()) {
        return FromSafetensors(path, {kHfSingleFileName}, nullptr);
      }
    }
    return FromCheckpoint(path, chunks);
  }
  if (io::IsDirectory(path)) {
    if (io::PathExists(io::JoinPath(path, kManifestName)) ||
        !(io::PathExists(io::JoinPath(path, kHfIndexName)) || io::PathExists(io::JoinPath(path, kHfSingleFileName)))) {
      return FromCheckpoint(path, chunks);
    }
    if (io::PathExists(io::JoinPath(path, kHfIndexName))) return FromHfIndex(path, kHfIndexName);
    return FromSafetensors(path, {kHfSingleFileName}, nullptr);
  }
  const std::string dir = io::ParentDirectory(path);
  const std::string name = BaseName(path);
  if (IsSafetensorsFileName(name)) return FromSafetensors(dir, {name}, nullptr);
  if (IsIndexFileName(name)) return FromHfIndex(dir, name);
  // Neither: the usual error of a checkpoint directory that is not there.
  return FromCheckpoint(path, chunks);
}

ChunkDecoder ChunkDecoderOf(CheckpointSource& source) {
  if (!source.encoded_chunks) return ChunkDecoder();
  return ChunkDecoder(
      [&source](const std::vector<uint32_t>& tensors) {
        return source.encoded_chunks->DecodeInto(source.manifest, tensors);
      },
      [&source](const std::vector<ChunkIndex>& chunks) {
        return source.encoded_chunks->DecodeRecordsInto(source.manifest, chunks);
      });
}

}  // namespace ckpt::runtime

// The reader functions of include/ckpt.h: any process, no collective.
#include <memory>
#include <string>
#include <vector>

#include "ckpt.h"
#include "runtime/capi/capi_internal.h"
#include "runtime/load/reader.h"

using ckpt::Status;
using ckpt::capi::FillInfo;
using ckpt::capi::Guard;
using ckpt::capi::NullArgument;
using ckpt::capi::ToShape;
namespace rt = ckpt::runtime;

struct ckpt_reader {
  std::unique_ptr<rt::CheckpointReader> impl;
  // ckpt_chunk_info.file of each data file: its name, or for a file of another checkpoint (an incremental
  // checkpoint's reference), its path from this checkpoint's directory.
  std::vector<std::string> file_paths;
};

extern "C" {

int32_t ckpt_reader_open(const char* path, ckpt_reader_t** out, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (path == nullptr || out == nullptr) return NullArgument("path or out");
    *out = nullptr;
    ASSIGN_OR_RETURN(std::unique_ptr<rt::CheckpointReader> impl, rt::CheckpointReader::Open(path));
    std::vector<std::string> file_paths;
    for (const rt::DataFileRecord& file : impl->manifest().files) {
      file_paths.push_back(file.checkpoint.empty() ? file.name : "../" + rt::DataFileBeneathRoot(file));
    }
    *out = new ckpt_reader{std::move(impl), std::move(file_paths)};
    return Status::Ok();
  });
}

void ckpt_reader_free(ckpt_reader_t* reader) { delete reader; }

int32_t ckpt_reader_info(const ckpt_reader_t* reader, ckpt_checkpoint_info* info, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (reader == nullptr || info == nullptr) return NullArgument("reader or info");
    const rt::Manifest& m = reader->impl->manifest();
    ckpt_checkpoint_info full = CKPT_CHECKPOINT_INFO_INIT;
    full.format_major = m.format_major;
    full.format_minor = m.format_minor;
    full.world_size = m.world_size;
    full.node_count = m.node_count;
    full.tensor_count = m.tensors.size();
    full.object_count = m.objects.size();
    full.common_count = m.common.size();
    full.metadata_count = m.metadata.size();
    full.file_count = m.files.size();
    for (const auto& t : m.tensors) {
      for (const auto& c : t.chunks) full.total_bytes += c.bytes.byte_length;
    }
    for (const auto& o : m.objects) {
      for (const auto& p : o.pieces) full.total_bytes += p.bytes.byte_length;
    }
    return FillInfo(full, info, "ckpt_checkpoint_info");
  });
}

int32_t ckpt_reader_tensor(const ckpt_reader_t* reader, uint64_t index, ckpt_tensor_info* info, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (reader == nullptr || info == nullptr) return NullArgument("reader or info");
    const auto& tensors = reader->impl->manifest().tensors;
    if (index >= tensors.size()) return ckpt::NotFound("tensor index " + std::to_string(index) + " out of range");
    const rt::TensorRecord& t = tensors[index];
    ckpt_tensor_info full = CKPT_TENSOR_INFO_INIT;
    full.key = t.key.c_str();
    full.dtype = t.dtype;
    full.ndim = static_cast<uint32_t>(t.shape.size());
    std::copy(t.shape.begin(), t.shape.end(), full.shape);
    full.chunk_count = t.chunks.size();
    return FillInfo(full, info, "ckpt_tensor_info");
  });
}

int32_t ckpt_reader_chunk(const ckpt_reader_t* reader, uint64_t tensor_index, uint64_t chunk_index,
                          ckpt_chunk_info* info, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (reader == nullptr || info == nullptr) return NullArgument("reader or info");
    const rt::Manifest& m = reader->impl->manifest();
    if (tensor_index >= m.tensors.size() || chunk_index >= m.tensors[tensor_index].chunks.size()) {
      return ckpt::NotFound("chunk " + std::to_string(chunk_index) + " of tensor " + std::to_string(tensor_index) +
                            " does not exist");
    }
    const rt::ChunkRecord& c = m.tensors[tensor_index].chunks[chunk_index];
    ckpt_chunk_info full = CKPT_CHUNK_INFO_INIT;
    full.ndim = static_cast<uint32_t>(c.box.ndim());
    std::copy(c.box.offset.begin(), c.box.offset.end(), full.offset);
    std::copy(c.box.shape.begin(), c.box.shape.end(), full.shape);
    full.file = reader->file_paths[c.bytes.file_index].c_str();
    full.file_offset = c.bytes.file_offset;
    full.byte_length = c.bytes.byte_length;
    return FillInfo(full, info, "ckpt_chunk_info");
  });
}

int32_t ckpt_reader_read(ckpt_reader_t* reader, const char* key, uint32_t ndim, const uint64_t* offset,
                         const uint64_t* shape, void* buffer, uint64_t buffer_size, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (reader == nullptr || key == nullptr) return NullArgument("reader or key");
    if (ndim > CKPT_MAX_NDIM) return ckpt::InvalidArgument("ndim exceeds 8");
    if (ndim > 0 && (offset == nullptr || shape == nullptr)) return NullArgument("offset or shape");
    if (buffer == nullptr && buffer_size != 0) return NullArgument("buffer");
    return reader->impl->ReadBox(key, rt::Box{ToShape(offset, ndim), ToShape(shape, ndim)}, buffer, buffer_size);
  });
}

int32_t ckpt_reader_object_at(const ckpt_reader_t* reader, uint64_t index, const char** key, uint32_t* grid_ndim,
                              const uint64_t** grid_shape, uint64_t* bytes, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (reader == nullptr || key == nullptr || grid_ndim == nullptr || grid_shape == nullptr || bytes == nullptr) {
      return NullArgument("reader, key, grid_ndim, grid_shape or bytes");
    }
    const auto& objects = reader->impl->manifest().objects;
    if (index >= objects.size()) return ckpt::NotFound("object index " + std::to_string(index) + " out of range");
    const rt::ObjectRecord& o = objects[index];
    *key = o.key.c_str();
    *grid_ndim = static_cast<uint32_t>(o.grid_shape.size());
    *grid_shape = o.grid_shape.empty() ? nullptr : o.grid_shape.data();
    *bytes = 0;
    for (const auto& p : o.pieces) *bytes += p.bytes.byte_length;
    return Status::Ok();
  });
}

int32_t ckpt_reader_common_at(const ckpt_reader_t* reader, uint64_t index, const char** key, const void** data,
                              uint64_t* size, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (reader == nullptr || key == nullptr || data == nullptr || size == nullptr) {
      return NullArgument("reader, key, data or size");
    }
    const auto& common = reader->impl->manifest().common;
    if (index >= common.size()) return ckpt::NotFound("common index " + std::to_string(index) + " out of range");
    ASSIGN_OR_RETURN(const std::string* bytes, reader->impl->Common(common[index].key));
    *key = common[index].key.c_str();
    *data = bytes->data();
    *size = bytes->size();
    return Status::Ok();
  });
}

int32_t ckpt_reader_common(const ckpt_reader_t* reader, const char* key, const void** data, uint64_t* size,
                           ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (reader == nullptr || key == nullptr || data == nullptr || size == nullptr) {
      return NullArgument("reader, key, data or size");
    }
    ASSIGN_OR_RETURN(const std::string* bytes, reader->impl->Common(key));
    *data = bytes->data();
    *size = bytes->size();
    return Status::Ok();
  });
}

int32_t ckpt_reader_metadata(const ckpt_reader_t* reader, const char* key, const char** value, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (reader == nullptr || key == nullptr || value == nullptr) return NullArgument("reader, key or value");
    for (const auto& [k, v] : reader->impl->manifest().metadata) {
      if (k == key) {
        *value = v.c_str();
        return Status::Ok();
      }
    }
    return ckpt::NotFound(std::string("metadata '") + key + "' not found");
  });
}

int32_t ckpt_reader_metadata_at(const ckpt_reader_t* reader, uint64_t index, const char** key, const char** value,
                                ckpt_error_t* err) {
  return Guard(err, [&]() -> Status {
    if (reader == nullptr || key == nullptr || value == nullptr) return NullArgument("reader, key or value");
    const auto& metadata = reader->impl->manifest().metadata;
    if (index >= metadata.size()) return ckpt::NotFound("metadata index " + std::to_string(index) + " out of range");
    *key = metadata[index].first.c_str();
    *value = metadata[index].second.c_str();
    return Status::Ok();
  });
}

int32_t ckpt_reader_verify(ckpt_reader_t* reader, ckpt_error_t* err) {
  return Guard(err, [&]() -> Status { return reader ? reader->impl->Verify() : NullArgument("reader"); });
}

}  // extern "C"

#include "runtime/format/manifest_validation.h"

#include <algorithm>
#include <set>

#include "common/key_text.h"
#include "io/block_codec.h"
#include "io/confined_open.h"
#include "runtime/core/dtype.h"

namespace ckpt::runtime {
namespace {

constexpr size_t kMaxFileNameBytes = 4096;

// A data file name must stay inside <checkpoint>/data/, whatever directory the checkpoint is opened from.
Status ValidateFileName(const std::string& name) {
  if (name.empty()) return Corrupt("empty file name");
  if (name.size() > kMaxFileNameBytes) return Corrupt("file name of " + std::to_string(name.size()) + " bytes");
  if (name.find('\0') != std::string::npos) return Corrupt("file name " + Quoted(name) + " contains a NUL byte");
  if (name.front() == '/') return Corrupt("file name " + Quoted(name) + " is absolute");
  const std::vector<std::string> components = io::PathComponents(name);
  if (const std::string* c = io::FirstNonPlainComponent(components)) {
    return Corrupt("file name " + Quoted(name) + " has a component " + Quoted(*c) + " (only plain names are allowed)");
  }
  if (components.size() < 2 || components.front() != kDataDirName) {
    return Corrupt("file name " + Quoted(name) + " is not under " + kDataDirName + "/");
  }
  return Status::Ok();
}

// A referenced checkpoint is a sibling of this one: one plain name, so that its files stay inside the parent
// directory the two share.
Status ValidateCheckpointName(const std::string& name) {
  if (name.size() > 255) return Corrupt("checkpoint name of " + std::to_string(name.size()) + " bytes");
  if (name.find('\0') != std::string::npos) return Corrupt("checkpoint name " + Quoted(name) + " contains a NUL byte");
  const std::vector<std::string> components = io::PathComponents(name);
  if (components.size() != 1 || components.front() != name || io::FirstNonPlainComponent(components) != nullptr) {
    return Corrupt("checkpoint name " + Quoted(name) + " is not one plain name of a sibling directory");
  }
  return Status::Ok();
}

Status ValidateFiles(const std::vector<DataFileRecord>& files) {
  std::set<std::pair<std::string, std::string>> seen;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string where = "data file " + std::to_string(i);
    RETURN_IF_ERROR(ValidateFileName(files[i].name).WithContext(where));
    if (!files[i].checkpoint.empty()) RETURN_IF_ERROR(ValidateCheckpointName(files[i].checkpoint).WithContext(where));
    if (!seen.emplace(files[i].checkpoint, files[i].name).second) {
      return Corrupt("data file " + DescribeDataFile(files[i]) + " is listed twice");
    }
  }
  return Status::Ok();
}

// ceil(length / block_size) without the overflow of the (length + block_size - 1) form on hostile values.
uint64_t SafeBlockCount(uint64_t length, uint64_t block_size) {
  return length / block_size + (length % block_size != 0 ? 1 : 0);
}

// A codec's fields: a known codec and grouping, and one stored size per block, none longer than its block.
Status ValidateCoding(const StoredBytes& s, uint64_t blocks) {
  if (s.codec == static_cast<uint8_t>(io::Codec::kNone)) {
    if (!s.stored_sizes.empty()) return Corrupt("stored sizes for bytes that are not compressed");
    return Status::Ok();
  }
  if (s.codec != static_cast<uint8_t>(io::Codec::kZstd)) return Corrupt("unknown codec " + std::to_string(s.codec));
  if (!io::ValidByteGroups(s.byte_groups)) {
    return Corrupt("byte grouping " + std::to_string(s.byte_groups) + " is none of 1, 2, 4 and 8");
  }
  if (s.stored_sizes.size() != blocks) {
    return Corrupt(std::to_string(s.stored_sizes.size()) + " stored sizes for " + std::to_string(blocks) +
                   " blocks");
  }
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t length = std::min(s.block_size, s.byte_length - b * s.block_size);
    if (s.stored_sizes[b] > length || (s.stored_sizes[b] == 0 && length > 0)) {
      return Corrupt("block " + std::to_string(b) + " of " + std::to_string(length) + " bytes is stored in " +
                     std::to_string(s.stored_sizes[b]));
    }
  }
  return Status::Ok();
}

Status ValidateStoredBytes(const StoredBytes& s, const std::vector<DataFileRecord>& files) {
  if (s.file_index >= files.size()) {
    return Corrupt("file index " + std::to_string(s.file_index) + " out of range (" + std::to_string(files.size()) +
                   " data files)");
  }
  if (s.block_size == 0) return Corrupt("block size is 0");
  const uint64_t expected = SafeBlockCount(s.byte_length, s.block_size);
  if (s.block_checksums.size() != expected) {
    return Corrupt(std::to_string(s.block_checksums.size()) + " block checksums for " + std::to_string(expected) +
                   " blocks of " + std::to_string(s.block_size) + " bytes");
  }
  RETURN_IF_ERROR(ValidateCoding(s, expected));
  // Stored sizes are at most their blocks' lengths (checked above): their sum cannot overflow.
  const uint64_t length = StoredLength(s);
  const DataFileRecord& file = files[s.file_index];
  if (length > file.size || s.file_offset > file.size - length) {
    return Corrupt("byte range [" + std::to_string(s.file_offset) + ", +" + std::to_string(length) +
                   ") is past the end of " + DescribeDataFile(file) + " (" + std::to_string(file.size) + " bytes)");
  }
  return Status::Ok();
}

std::string ShapeToString(const Shape& shape) {
  std::string out = "[";
  for (size_t d = 0; d < shape.size(); ++d) out += (d ? ", " : "") + std::to_string(shape[d]);
  return out + "]";
}

Status ValidateChunkGeometry(const ChunkRecord& chunk, const Shape& shape, uint32_t element_size) {
  const Box& box = chunk.box;
  if (box.offset.size() != shape.size() || box.shape.size() != shape.size()) {
    return Corrupt("offset has " + std::to_string(box.offset.size()) + " and shape " +
                   std::to_string(box.shape.size()) + " dimensions, the tensor has " + std::to_string(shape.size()));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (box.offset[d] > shape[d] || box.shape[d] > shape[d] - box.offset[d]) {
      return Corrupt("box " + box.ToString() + " is outside the tensor's shape " + ShapeToString(shape));
    }
  }
  // The tensor's volume times element_size fits (checked first), so the chunk's does too.
  const uint64_t expected = Volume(box.shape) * element_size;
  if (chunk.bytes.byte_length != expected) {
    return Corrupt("byte length " + std::to_string(chunk.bytes.byte_length) + " differs from " +
                   std::to_string(expected) + " (" + std::to_string(Volume(box.shape)) + " elements of " +
                   std::to_string(element_size) + " bytes)");
  }
  return Status::Ok();
}

// The dimension along which chunk starts are most spread out: sweeping along it keeps the set of chunks that can
// still overlap the next one small for the usual grid-like and flattened-range layouts.
size_t SweepDimension(const std::vector<ChunkRecord>& chunks, size_t ndim) {
  size_t best = 0;
  size_t best_distinct = 0;
  for (size_t d = 0; d < ndim; ++d) {
    std::set<uint64_t> starts;
    for (const ChunkRecord& c : chunks) starts.insert(c.box.offset[d]);
    if (starts.size() > best_distinct) {
      best = d;
      best_distinct = starts.size();
    }
  }
  return best;
}

// Intersect without building the common box: the sweep asks this for many pairs that do not overlap.
bool Overlap(const Box& a, const Box& b) {
  for (size_t d = 0; d < a.ndim(); ++d) {
    if (a.offset[d] + a.shape[d] <= b.offset[d] || b.offset[d] + b.shape[d] <= a.offset[d]) return false;
  }
  return true;
}

// Chunks already inside the tensor tile it exactly iff no two overlap and their volumes add up to the tensor's.
Status ValidateTiling(const std::vector<ChunkRecord>& chunks, const Shape& shape) {
  std::vector<size_t> order;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (!chunks[i].box.empty()) order.push_back(i);
  }
  const size_t ndim = shape.size();
  if (ndim > 0) {
    const size_t dim = SweepDimension(chunks, ndim);
    auto start = [&](size_t i) { return chunks[i].box.offset[dim]; };
    auto end = [&](size_t i) { return chunks[i].box.offset[dim] + chunks[i].box.shape[dim]; };
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return start(a) < start(b); });
    std::vector<size_t> active;  // chunks whose extent along `dim` reaches the current start
    for (size_t i : order) {
      active.erase(std::remove_if(active.begin(), active.end(), [&](size_t a) { return end(a) <= start(i); }),
                   active.end());
      for (size_t a : active) {
        if (Overlap(chunks[a].box, chunks[i].box)) {
          return Corrupt("chunks " + std::to_string(std::min(a, i)) + " and " + std::to_string(std::max(a, i)) +
                         " overlap in " + Intersect(chunks[a].box, chunks[i].box)->ToString());
        }
      }
      active.push_back(i);
    }
  } else if (order.size() > 1) {
    return Corrupt("chunks " + std::to_string(order[0]) + " and " + std::to_string(order[1]) + " both hold the scalar");
  }
  uint64_t covered = 0;  // cannot overflow: the chunks are disjoint and inside the tensor
  for (size_t i : order) covered += chunks[i].box.volume();
  const uint64_t total = Volume(shape);
  if (covered != total) {
    return Corrupt("chunks cover " + std::to_string(covered) + " of " + std::to_string(total) +
                   " elements (a gap in the tensor)");
  }
  return Status::Ok();
}

Status ValidateTensorHeader(const TensorRecord& t) {
  const uint32_t element_size = DTypeSize(t.dtype);
  if (element_size == 0) return Corrupt("dtype " + std::to_string(t.dtype) + " is not a known dtype");
  if (t.shape.size() > kMaxDims) {
    return Corrupt("ndim " + std::to_string(t.shape.size()) + " exceeds the maximum of " + std::to_string(kMaxDims));
  }
  if (!VolumeFits(t.shape, element_size)) return Corrupt("shape " + ShapeToString(t.shape) + " overflows 64 bits");
  return Status::Ok();
}

Status ValidateObject(const ObjectRecord& o, const std::vector<DataFileRecord>& files) {
  const Shape& grid = o.grid_shape;
  if (grid.size() > kMaxDims) {
    return Corrupt("grid ndim " + std::to_string(grid.size()) + " exceeds the maximum of " + std::to_string(kMaxDims));
  }
  if (!VolumeFits(grid, 1) || o.pieces.size() != Volume(grid)) {
    return Corrupt(std::to_string(o.pieces.size()) + " pieces for a grid of shape " + ShapeToString(grid));
  }
  std::set<Shape> seen;
  for (size_t i = 0; i < o.pieces.size(); ++i) {
    const std::string where = "piece " + std::to_string(i);
    const Shape& index = o.pieces[i].index;
    bool inside = index.size() == grid.size();
    for (size_t d = 0; inside && d < grid.size(); ++d) inside = index[d] < grid[d];
    if (!inside)
      return Corrupt(where + ": index " + ShapeToString(index) + " is outside the grid " + ShapeToString(grid));
    if (!seen.insert(index).second) return Corrupt(where + ": index " + ShapeToString(index) + " appears twice");
    RETURN_IF_ERROR(ValidateStoredBytes(o.pieces[i].bytes, files).WithContext(where));
  }
  return Status::Ok();
}

Status ValidateCommon(const CommonRecord& c, const std::vector<DataFileRecord>& files) {
  return c.is_inline ? Status::Ok() : ValidateStoredBytes(c.stored, files);
}

// Keys name records in every later error message and are looked up by binary search, so they must be text
// (common/key_text.h), sorted and unique.
template <typename Record>
Status ValidateKeys(const std::vector<Record>& records, const char* kind) {
  for (size_t i = 0; i < records.size(); ++i) {
    const std::string& key = records[i].key;
    RETURN_IF_ERROR(CheckKeyText(key, std::string(kind) + " key", Code::kCorrupt));
    if (i > 0 && !(records[i - 1].key < key)) {
      return Corrupt(std::string(kind) + " keys are not sorted and unique: " + Quoted(records[i - 1].key) +
                     " comes before " + Quoted(key));
    }
  }
  return Status::Ok();
}

template <typename Record, typename Validate>
Status ValidateRecords(const std::vector<Record>& records, const char* kind, Validate&& validate) {
  RETURN_IF_ERROR(ValidateKeys(records, kind));
  for (const Record& r : records) {
    RETURN_IF_ERROR(validate(r).WithContext(std::string(kind) + " " + Quoted(r.key)));
  }
  return Status::Ok();
}

// The user metadata is text too: the C API hands its keys and values out as C strings.
Status ValidateMetadata(const std::vector<std::pair<std::string, std::string>>& metadata) {
  for (const auto& [key, value] : metadata) {
    RETURN_IF_ERROR(CheckKeyText(key, "metadata key", Code::kCorrupt));
    RETURN_IF_ERROR(CheckKeyText(value, "value", Code::kCorrupt).WithContext("metadata " + Quoted(key)));
  }
  return Status::Ok();
}

}  // namespace

Status ValidateChunkRecord(const TensorRecord& t, size_t chunk, const std::vector<DataFileRecord>& files) {
  const std::string where = "chunk " + std::to_string(chunk);
  RETURN_IF_ERROR(ValidateChunkGeometry(t.chunks[chunk], t.shape, DTypeSize(t.dtype)).WithContext(where));
  return ValidateStoredBytes(t.chunks[chunk].bytes, files).WithContext(where);
}

Status ValidateTensorChunks(const TensorRecord& t, const std::vector<DataFileRecord>& files) {
  const uint32_t element_size = DTypeSize(t.dtype);
  for (size_t i = 0; i < t.chunks.size(); ++i) RETURN_IF_ERROR(ValidateChunkRecord(t, i, files));
  for (size_t i = 0; i < t.digests.size(); ++i) {
    const BoxDigests& d = t.digests[i];
    const std::string where = "digests " + std::to_string(i);
    ChunkRecord as_chunk{d.box, {}};
    as_chunk.bytes.byte_length = d.box.offset.size() == t.shape.size() ? d.box.volume() * element_size : 0;
    RETURN_IF_ERROR(ValidateChunkGeometry(as_chunk, t.shape, element_size).WithContext(where));
    if (d.block_size == 0) return Corrupt(where + ": block size is 0");
    const uint64_t blocks = SafeBlockCount(as_chunk.bytes.byte_length, d.block_size);
    if (d.sha256.size() / kDigestBytes != blocks || d.sha256.size() % kDigestBytes != 0) {
      return Corrupt(where + ": " + std::to_string(d.sha256.size()) + " digest bytes for " + std::to_string(blocks) +
                     " blocks of " + std::to_string(d.block_size) + " bytes");
    }
  }
  return ValidateTiling(t.chunks, t.shape);
}

Status ValidateManifestWithoutChunks(const Manifest& m) {
  if (m.world_size == 0) return Corrupt("world size is 0");
  RETURN_IF_ERROR(ValidateFiles(m.files));
  const auto reference = std::find_if(m.files.begin(), m.files.end(),
                                      [](const DataFileRecord& f) { return !f.checkpoint.empty(); });
  if (reference != m.files.end() && m.format_major < kFormatMajorWithReferences) {
    return Corrupt("format " + std::to_string(m.format_major) + " cannot refer to another checkpoint's files, as " +
                   DescribeDataFile(*reference) + " does");
  }
  RETURN_IF_ERROR(ValidateMetadata(m.metadata));
  auto& files = m.files;
  RETURN_IF_ERROR(ValidateRecords(m.tensors, "tensor", ValidateTensorHeader));
  RETURN_IF_ERROR(
      ValidateRecords(m.objects, "object", [&](const ObjectRecord& o) { return ValidateObject(o, files); }));
  return ValidateRecords(m.common, "common", [&](const CommonRecord& c) { return ValidateCommon(c, files); });
}

Status ValidateManifest(const Manifest& m) {
  RETURN_IF_ERROR(ValidateManifestWithoutChunks(m));
  for (const TensorRecord& t : m.tensors) {
    RETURN_IF_ERROR(ValidateTensorChunks(t, m.files).WithContext("tensor " + Quoted(t.key)));
  }
  return Status::Ok();
}

}  // namespace ckpt::runtime

#include "runtime/manifest.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "io/checksum.h"
#include "io/confined_open.h"
#include "io/file_io.h"
#include "manifest.capnp.h"  // generated into the build's runtime/ directory
#include "runtime/dtype.h"

namespace ckpt::runtime {
namespace {

constexpr char kMagic[8] = {'C', 'K', 'P', 'T', 'M', 'N', 'F', 'S'};
constexpr size_t kHeaderBytes = 32;
constexpr size_t kMaxNdim = 8;  // CKPT_MAX_NDIM
constexpr size_t kMaxFileNameBytes = 4096;
// Every capnp object of a well-formed manifest is read once; the factor and slack leave room for the reader's
// own accounting while still bounding the work a hostile message can cause to a multiple of its size.
constexpr uint64_t kTraversalWordsPerWord = 8;
constexpr uint64_t kTraversalSlackWords = 1024;
constexpr int kNestingLimit = 16;

// ---- Header -------------------------------------------------------------------------------------------------------

template <typename T>
void PutLittleEndian(char* out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

template <typename T>
T GetLittleEndian(const char* in) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(static_cast<unsigned char>(in[i])) << (8 * i);
  return value;
}

struct Header {
  uint32_t major = 0;
  uint32_t minor = 0;
  uint64_t message_length = 0;
  uint64_t message_checksum = 0;
};

std::string FormatVersion(uint32_t major, uint32_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

// The header checks, in the order that gives the most useful error for each kind of bad file.
Result<Header> ParseHeader(const std::string& bytes, const std::string& origin) {
  if (bytes.size() < kHeaderBytes) {
    return Corrupt(origin + ": truncated: " + std::to_string(bytes.size()) + " bytes, shorter than the " +
                   std::to_string(kHeaderBytes) + "-byte MANIFEST header");
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    return Corrupt(origin + ": not a ckpt MANIFEST (foreign file)");
  Header h;
  h.major = GetLittleEndian<uint32_t>(bytes.data() + 8);
  h.minor = GetLittleEndian<uint32_t>(bytes.data() + 12);
  h.message_length = GetLittleEndian<uint64_t>(bytes.data() + 16);
  h.message_checksum = GetLittleEndian<uint64_t>(bytes.data() + 24);
  if (h.major > kFormatMajor) {
    return VersionError(origin + ": written by format " + FormatVersion(h.major, h.minor) +
                        ", this library reads up to " + std::to_string(kFormatMajor) + ".x");
  }
  if (h.major == 0) return Corrupt(origin + ": format " + FormatVersion(h.major, h.minor) + " does not exist");
  const uint64_t present = bytes.size() - kHeaderBytes;
  if (h.message_length > present) {
    return Corrupt(origin + ": truncated: the header announces a " + std::to_string(h.message_length) +
                   "-byte message, only " + std::to_string(present) + " bytes follow");
  }
  if (h.message_length < present) {
    return Corrupt(origin + ": " + std::to_string(present - h.message_length) + " trailing bytes after the " +
                   std::to_string(h.message_length) + "-byte message");
  }
  if (h.message_length % sizeof(capnp::word) != 0) {
    return Corrupt(origin + ": message length " + std::to_string(h.message_length) + " is not a whole number of words");
  }
  const uint64_t actual = io::Checksum(bytes.data() + kHeaderBytes, h.message_length);
  if (actual != h.message_checksum) {
    return Corrupt(origin + ": checksum mismatch: the message hashes to " + std::to_string(actual) +
                   ", the header records " + std::to_string(h.message_checksum) + " (damaged file)");
  }
  return h;
}

// ---- Model -> Cap'n Proto ---------------------------------------------------------------------------------------

kj::StringPtr AsText(const std::string& s) { return kj::StringPtr(s.c_str(), s.size()); }

void FillUInt64s(capnp::List<uint64_t>::Builder out, const std::vector<uint64_t>& values) {
  for (size_t i = 0; i < values.size(); ++i) out.set(static_cast<unsigned>(i), values[i]);
}

void FillStoredBytes(schema::StoredBytes::Builder out, const StoredBytes& in) {
  out.setFileIndex(in.file_index);
  out.setFileOffset(in.file_offset);
  out.setByteLength(in.byte_length);
  out.setBlockSize(in.block_size);
  FillUInt64s(out.initBlockChecksums(static_cast<unsigned>(in.block_checksums.size())), in.block_checksums);
}

void FillTensor(schema::Tensor::Builder out, const TensorRecord& in) {
  out.setKey(AsText(in.key));
  out.setDtype(in.dtype);
  FillUInt64s(out.initShape(static_cast<unsigned>(in.shape.size())), in.shape);
  auto chunks = out.initChunks(static_cast<unsigned>(in.chunks.size()));
  for (size_t i = 0; i < in.chunks.size(); ++i) {
    const ChunkRecord& chunk = in.chunks[i];
    auto c = chunks[static_cast<unsigned>(i)];
    FillUInt64s(c.initOffset(static_cast<unsigned>(chunk.box.offset.size())), chunk.box.offset);
    FillUInt64s(c.initShape(static_cast<unsigned>(chunk.box.shape.size())), chunk.box.shape);
    FillStoredBytes(c.initBytes(), chunk.bytes);
  }
}

void FillObject(schema::Object::Builder out, const ObjectRecord& in) {
  out.setKey(AsText(in.key));
  FillUInt64s(out.initGridShape(static_cast<unsigned>(in.grid_shape.size())), in.grid_shape);
  auto pieces = out.initPieces(static_cast<unsigned>(in.pieces.size()));
  for (size_t i = 0; i < in.pieces.size(); ++i) {
    auto p = pieces[static_cast<unsigned>(i)];
    FillUInt64s(p.initIndex(static_cast<unsigned>(in.pieces[i].index.size())), in.pieces[i].index);
    FillStoredBytes(p.initBytes(), in.pieces[i].bytes);
  }
}

void FillCommon(schema::Common::Builder out, const CommonRecord& in) {
  out.setKey(AsText(in.key));
  if (in.is_inline) {
    out.setInline(kj::arrayPtr(reinterpret_cast<const kj::byte*>(in.inline_bytes.data()), in.inline_bytes.size()));
  } else {
    FillStoredBytes(out.initStored(), in.stored);
  }
}

void FillManifest(schema::Manifest::Builder out, const Manifest& in) {
  out.setFormatMajor(in.format_major);
  out.setFormatMinor(in.format_minor);
  out.setLibraryVersion(AsText(in.library_version));
  out.setCheckpointId(AsText(in.checkpoint_id));
  out.setWorldSize(in.world_size);
  out.setNodeCount(in.node_count);
  auto metadata = out.initMetadata(static_cast<unsigned>(in.metadata.size()));
  for (size_t i = 0; i < in.metadata.size(); ++i) {
    metadata[static_cast<unsigned>(i)].setKey(AsText(in.metadata[i].first));
    metadata[static_cast<unsigned>(i)].setValue(AsText(in.metadata[i].second));
  }
  auto files = out.initFiles(static_cast<unsigned>(in.files.size()));
  for (size_t i = 0; i < in.files.size(); ++i) {
    files[static_cast<unsigned>(i)].setName(AsText(in.files[i].name));
    files[static_cast<unsigned>(i)].setSize(in.files[i].size);
  }
  auto tensors = out.initTensors(static_cast<unsigned>(in.tensors.size()));
  for (size_t i = 0; i < in.tensors.size(); ++i) FillTensor(tensors[static_cast<unsigned>(i)], in.tensors[i]);
  auto objects = out.initObjects(static_cast<unsigned>(in.objects.size()));
  for (size_t i = 0; i < in.objects.size(); ++i) FillObject(objects[static_cast<unsigned>(i)], in.objects[i]);
  auto common = out.initCommon(static_cast<unsigned>(in.common.size()));
  for (size_t i = 0; i < in.common.size(); ++i) FillCommon(common[static_cast<unsigned>(i)], in.common[i]);
}

// ---- Cap'n Proto -> model (throws kj::Exception on a malformed message) -------------------------------------------

std::string ToString(capnp::Text::Reader text) { return std::string(text.begin(), text.size()); }

Shape ToShape(capnp::List<uint64_t>::Reader list) {
  Shape shape;
  shape.reserve(list.size());
  for (uint64_t extent : list) shape.push_back(extent);
  return shape;
}

StoredBytes ToStoredBytes(schema::StoredBytes::Reader in) {
  StoredBytes out;
  out.file_index = in.getFileIndex();
  out.file_offset = in.getFileOffset();
  out.byte_length = in.getByteLength();
  out.block_size = in.getBlockSize();
  out.block_checksums = ToShape(in.getBlockChecksums());
  return out;
}

TensorRecord ToTensor(schema::Tensor::Reader in) {
  TensorRecord out;
  out.key = ToString(in.getKey());
  out.dtype = in.getDtype();
  out.shape = ToShape(in.getShape());
  for (auto chunk : in.getChunks()) {
    out.chunks.push_back(
        ChunkRecord{Box{ToShape(chunk.getOffset()), ToShape(chunk.getShape())}, ToStoredBytes(chunk.getBytes())});
  }
  return out;
}

ObjectRecord ToObject(schema::Object::Reader in) {
  ObjectRecord out;
  out.key = ToString(in.getKey());
  out.grid_shape = ToShape(in.getGridShape());
  for (auto piece : in.getPieces()) {
    out.pieces.push_back(ObjectPieceRecord{ToShape(piece.getIndex()), ToStoredBytes(piece.getBytes())});
  }
  return out;
}

Result<CommonRecord> ToCommon(schema::Common::Reader in, const std::string& origin) {
  CommonRecord out;
  out.key = ToString(in.getKey());
  switch (in.which()) {
    case schema::Common::INLINE: {
      auto data = in.getInline();
      out.inline_bytes.assign(reinterpret_cast<const char*>(data.begin()), data.size());
      return out;
    }
    case schema::Common::STORED:
      out.is_inline = false;
      out.stored = ToStoredBytes(in.getStored());
      return out;
  }
  return Corrupt(origin + ": common '" + out.key + "' has an unknown storage kind " +
                 std::to_string(static_cast<unsigned>(in.which())));
}

Result<Manifest> ToManifest(schema::Manifest::Reader in, const std::string& origin) {
  Manifest out;
  out.format_major = in.getFormatMajor();
  out.format_minor = in.getFormatMinor();
  out.library_version = ToString(in.getLibraryVersion());
  out.checkpoint_id = ToString(in.getCheckpointId());
  out.world_size = in.getWorldSize();
  out.node_count = in.getNodeCount();
  for (auto kv : in.getMetadata()) out.metadata.emplace_back(ToString(kv.getKey()), ToString(kv.getValue()));
  for (auto file : in.getFiles()) out.files.push_back(DataFileRecord{ToString(file.getName()), file.getSize()});
  for (auto tensor : in.getTensors()) out.tensors.push_back(ToTensor(tensor));
  for (auto object : in.getObjects()) out.objects.push_back(ToObject(object));
  for (auto common : in.getCommon()) {
    ASSIGN_OR_RETURN(CommonRecord record, ToCommon(common, origin));
    out.common.push_back(std::move(record));
  }
  return out;
}

Result<Manifest> ParseMessage(const char* data, uint64_t length, const std::string& origin) {
  // FlatArrayMessageReader needs word alignment, which a std::string's buffer does not promise.
  const size_t words = length / sizeof(capnp::word);
  kj::Array<capnp::word> aligned = kj::heapArray<capnp::word>(words);
  std::memcpy(aligned.begin(), data, length);
  capnp::ReaderOptions options;
  options.traversalLimitInWords = words * kTraversalWordsPerWord + kTraversalSlackWords;
  options.nestingLimit = kNestingLimit;
  try {
    capnp::FlatArrayMessageReader reader(aligned.asPtr(), options);
    if (reader.getEnd() != aligned.end()) return Corrupt(origin + ": data after the end of the Cap'n Proto message");
    return ToManifest(reader.getRoot<schema::Manifest>(), origin);
  } catch (const kj::Exception& e) {
    return Corrupt(origin + ": malformed message: " + e.getDescription().cStr());
  }
}

// ---- Semantic validation ------------------------------------------------------------------------------------------

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

Status ValidateFiles(const std::vector<DataFileRecord>& files) {
  std::set<std::string> seen;
  for (size_t i = 0; i < files.size(); ++i) {
    RETURN_IF_ERROR(ValidateFileName(files[i].name).WithContext("data file " + std::to_string(i)));
    if (!seen.insert(files[i].name).second) return Corrupt("data file " + Quoted(files[i].name) + " is listed twice");
  }
  return Status::Ok();
}

// ceil(length / block_size) without the overflow of the (length + block_size - 1) form on hostile values.
uint64_t SafeBlockCount(uint64_t length, uint64_t block_size) {
  return length / block_size + (length % block_size != 0 ? 1 : 0);
}

Status ValidateStoredBytes(const StoredBytes& s, const std::vector<DataFileRecord>& files) {
  if (s.file_index >= files.size()) {
    return Corrupt("file index " + std::to_string(s.file_index) + " out of range (" + std::to_string(files.size()) +
                   " data files)");
  }
  const DataFileRecord& file = files[s.file_index];
  if (s.byte_length > file.size || s.file_offset > file.size - s.byte_length) {
    return Corrupt("byte range [" + std::to_string(s.file_offset) + ", +" + std::to_string(s.byte_length) +
                   ") is past the end of " + Quoted(file.name) + " (" + std::to_string(file.size) + " bytes)");
  }
  if (s.block_size == 0) return Corrupt("block size is 0");
  const uint64_t expected = SafeBlockCount(s.byte_length, s.block_size);
  if (s.block_checksums.size() != expected) {
    return Corrupt(std::to_string(s.block_checksums.size()) + " block checksums for " + std::to_string(expected) +
                   " blocks of " + std::to_string(s.block_size) + " bytes");
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

Status ValidateTensor(const TensorRecord& t, const std::vector<DataFileRecord>& files) {
  const uint32_t element_size = DTypeSize(t.dtype);
  if (element_size == 0) return Corrupt("dtype " + std::to_string(t.dtype) + " is not a known dtype");
  if (t.shape.size() > kMaxNdim) {
    return Corrupt("ndim " + std::to_string(t.shape.size()) + " exceeds the maximum of " + std::to_string(kMaxNdim));
  }
  if (!VolumeFits(t.shape, element_size)) return Corrupt("shape " + ShapeToString(t.shape) + " overflows 64 bits");
  for (size_t i = 0; i < t.chunks.size(); ++i) {
    const std::string where = "chunk " + std::to_string(i);
    RETURN_IF_ERROR(ValidateChunkGeometry(t.chunks[i], t.shape, element_size).WithContext(where));
    RETURN_IF_ERROR(ValidateStoredBytes(t.chunks[i].bytes, files).WithContext(where));
  }
  return ValidateTiling(t.chunks, t.shape);
}

Status ValidateObject(const ObjectRecord& o, const std::vector<DataFileRecord>& files) {
  const Shape& grid = o.grid_shape;
  if (grid.size() > kMaxNdim) {
    return Corrupt("grid ndim " + std::to_string(grid.size()) + " exceeds the maximum of " + std::to_string(kMaxNdim));
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

// Keys name records in every later error message and are looked up by binary search, so they must be sorted.
template <typename Record>
Status ValidateKeys(const std::vector<Record>& records, const char* kind) {
  for (size_t i = 0; i < records.size(); ++i) {
    const std::string& key = records[i].key;
    if (key.find('\0') != std::string::npos)
      return Corrupt(std::string(kind) + " key " + Quoted(key) + " contains a NUL");
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
  for (const Record& r : records) RETURN_IF_ERROR(validate(r).WithContext(std::string(kind) + " " + Quoted(r.key)));
  return Status::Ok();
}

// Everything the loaders rely on without checking again.
Status ValidateManifest(const Manifest& m) {
  if (m.world_size == 0) return Corrupt("world size is 0");
  RETURN_IF_ERROR(ValidateFiles(m.files));
  auto& files = m.files;
  RETURN_IF_ERROR(
      ValidateRecords(m.tensors, "tensor", [&](const TensorRecord& t) { return ValidateTensor(t, files); }));
  RETURN_IF_ERROR(
      ValidateRecords(m.objects, "object", [&](const ObjectRecord& o) { return ValidateObject(o, files); }));
  return ValidateRecords(m.common, "common", [&](const CommonRecord& c) { return ValidateCommon(c, files); });
}

}  // namespace

Result<std::string> EncodeManifest(const Manifest& manifest) {
  Status valid = ValidateManifest(manifest);
  if (!valid.ok()) return Internal("refusing to write an inconsistent manifest: " + valid.message());
  std::string out(kHeaderBytes, '\0');
  try {
    capnp::MallocMessageBuilder builder;
    FillManifest(builder.initRoot<schema::Manifest>(), manifest);
    const kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
    const kj::ArrayPtr<const kj::byte> message = words.asBytes();
    out.append(reinterpret_cast<const char*>(message.begin()), message.size());
  } catch (const kj::Exception& e) {
    return InvalidArgument(std::string("cannot encode the manifest: ") + e.getDescription().cStr());
  }
  const uint64_t length = out.size() - kHeaderBytes;
  std::memcpy(out.data(), kMagic, sizeof kMagic);
  PutLittleEndian<uint32_t>(out.data() + 8, manifest.format_major);
  PutLittleEndian<uint32_t>(out.data() + 12, manifest.format_minor);
  PutLittleEndian<uint64_t>(out.data() + 16, length);
  PutLittleEndian<uint64_t>(out.data() + 24, io::Checksum(out.data() + kHeaderBytes, length));
  return out;
}

Result<Manifest> DecodeManifest(const std::string& bytes, const std::string& origin) {
  ASSIGN_OR_RETURN(Header header, ParseHeader(bytes, origin));
  ASSIGN_OR_RETURN(Manifest manifest, ParseMessage(bytes.data() + kHeaderBytes, header.message_length, origin));
  if (manifest.format_major != header.major || manifest.format_minor != header.minor) {
    return Corrupt(origin + ": the header says format " + FormatVersion(header.major, header.minor) +
                   ", the message says " + FormatVersion(manifest.format_major, manifest.format_minor));
  }
  RETURN_IF_ERROR(ValidateManifest(manifest).WithContext(origin));
  return manifest;
}

Status WriteManifest(const std::string& dir, const Manifest& manifest) {
  ASSIGN_OR_RETURN(std::string bytes, EncodeManifest(manifest));
  return io::WriteFileDurably(io::JoinPath(dir, kManifestName), bytes.data(), bytes.size());
}

Result<Manifest> ReadManifest(const std::string& dir) {
  const std::string path = io::JoinPath(dir, kManifestName);
  Result<std::string> bytes = io::ReadWholeFile(dir, kManifestName, kMaxManifestBytes);
  if (!bytes.ok()) {
    if (bytes.status().code() == Code::kNotFound) return NotFound("no checkpoint at " + dir + " (MANIFEST missing)");
    return bytes.status();
  }
  return DecodeManifest(bytes.value(), path);
}

}  // namespace ckpt::runtime

#include "runtime/format/manifest_capnp.h"

#include <cstring>
#include <utility>

namespace ckpt::runtime::manifest_capnp {
namespace {

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
  if (IsCompressed(in)) {
    out.setCodec(in.codec);
    out.setByteGroups(in.byte_groups);
    auto sizes = out.initStoredSizes(static_cast<unsigned>(in.stored_sizes.size()));
    for (size_t i = 0; i < in.stored_sizes.size(); ++i) sizes.set(static_cast<unsigned>(i), in.stored_sizes[i]);
  }
}

void FillDigests(capnp::List<schema::BoxDigests>::Builder out, const std::vector<BoxDigests>& in) {
  for (size_t i = 0; i < in.size(); ++i) {
    auto d = out[static_cast<unsigned>(i)];
    FillUInt64s(d.initOffset(static_cast<unsigned>(in[i].box.offset.size())), in[i].box.offset);
    FillUInt64s(d.initShape(static_cast<unsigned>(in[i].box.shape.size())), in[i].box.shape);
    d.setBlockSize(in[i].block_size);
    d.setSha256(kj::arrayPtr(reinterpret_cast<const kj::byte*>(in[i].sha256.data()), in[i].sha256.size()));
  }
}

void FillChunks(capnp::List<schema::Chunk>::Builder out, const std::vector<ChunkRecord>& in, size_t first) {
  for (unsigned i = 0; i < out.size(); ++i) {
    const ChunkRecord& chunk = in[first + i];
    auto c = out[i];
    FillUInt64s(c.initOffset(static_cast<unsigned>(chunk.box.offset.size())), chunk.box.offset);
    FillUInt64s(c.initShape(static_cast<unsigned>(chunk.box.shape.size())), chunk.box.shape);
    FillStoredBytes(c.initBytes(), chunk.bytes);
  }
}

void FillTensor(schema::Tensor::Builder out, const TensorRecord& in, Chunks chunks) {
  out.setKey(AsText(in.key));
  out.setDtype(in.dtype);
  FillUInt64s(out.initShape(static_cast<unsigned>(in.shape.size())), in.shape);
  if (chunks == Chunks::kElsewhere) return;
  FillChunks(out.initChunks(static_cast<unsigned>(in.chunks.size())), in.chunks, 0);
  if (!in.digests.empty()) FillDigests(out.initDigests(static_cast<unsigned>(in.digests.size())), in.digests);
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

}  // namespace

void FillManifest(schema::Manifest::Builder out, const Manifest& in, Chunks chunks) {
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
    if (!in.files[i].checkpoint.empty()) files[static_cast<unsigned>(i)].setCheckpoint(AsText(in.files[i].checkpoint));
  }
  auto tensors = out.initTensors(static_cast<unsigned>(in.tensors.size()));
  for (size_t i = 0; i < in.tensors.size(); ++i) FillTensor(tensors[static_cast<unsigned>(i)], in.tensors[i], chunks);
  auto objects = out.initObjects(static_cast<unsigned>(in.objects.size()));
  for (size_t i = 0; i < in.objects.size(); ++i) FillObject(objects[static_cast<unsigned>(i)], in.objects[i]);
  auto common = out.initCommon(static_cast<unsigned>(in.common.size()));
  for (size_t i = 0; i < in.common.size(); ++i) FillCommon(common[static_cast<unsigned>(i)], in.common[i]);
}

void FillChunkList(schema::ChunkList::Builder out, const TensorRecord& tensor, size_t first, size_t count) {
  FillChunks(out.initChunks(static_cast<unsigned>(count)), tensor.chunks, first);
  if (first == 0 && !tensor.digests.empty()) {
    FillDigests(out.initDigests(static_cast<unsigned>(tensor.digests.size())), tensor.digests);
  }
}

namespace {

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
  out.codec = in.getCodec();
  out.byte_groups = in.getByteGroups();
  std::vector<uint32_t> sizes;
  sizes.reserve(in.getStoredSizes().size());
  for (uint32_t size : in.getStoredSizes()) sizes.push_back(size);
  out.stored_sizes = StoredSizes(sizes);
  return out;
}

}  // namespace

std::vector<ChunkRecord> ToChunks(capnp::List<schema::Chunk>::Reader in) {
  std::vector<ChunkRecord> out;
  out.reserve(in.size());
  for (auto chunk : in) {
    out.push_back(
        ChunkRecord{Box{ToShape(chunk.getOffset()), ToShape(chunk.getShape())}, ToStoredBytes(chunk.getBytes())});
  }
  return out;
}

std::vector<BoxDigests> ToDigests(capnp::List<schema::BoxDigests>::Reader in) {
  std::vector<BoxDigests> out;
  out.reserve(in.size());
  for (auto d : in) {
    auto sha = d.getSha256();
    out.push_back(BoxDigests{Box{ToShape(d.getOffset()), ToShape(d.getShape())}, d.getBlockSize(),
                             std::string(reinterpret_cast<const char*>(sha.begin()), sha.size())});
  }
  return out;
}

namespace {

TensorRecord ToTensor(schema::Tensor::Reader in, Chunks chunks) {
  TensorRecord out;
  out.key = ToString(in.getKey());
  out.dtype = in.getDtype();
  out.shape = ToShape(in.getShape());
  if (chunks == Chunks::kInMessage) {
    out.chunks = ToChunks(in.getChunks());
    out.digests = ToDigests(in.getDigests());
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

}  // namespace

Result<Manifest> ToManifest(schema::Manifest::Reader in, Chunks chunks, const std::string& origin) {
  Manifest out;
  out.format_major = in.getFormatMajor();
  out.format_minor = in.getFormatMinor();
  out.library_version = ToString(in.getLibraryVersion());
  out.checkpoint_id = ToString(in.getCheckpointId());
  out.world_size = in.getWorldSize();
  out.node_count = in.getNodeCount();
  for (auto kv : in.getMetadata()) out.metadata.emplace_back(ToString(kv.getKey()), ToString(kv.getValue()));
  for (auto file : in.getFiles()) {
    out.files.push_back(DataFileRecord{ToString(file.getName()), file.getSize(), ToString(file.getCheckpoint())});
  }
  for (auto tensor : in.getTensors()) out.tensors.push_back(ToTensor(tensor, chunks));
  for (auto object : in.getObjects()) out.objects.push_back(ToObject(object));
  for (auto common : in.getCommon()) {
    ASSIGN_OR_RETURN(CommonRecord record, ToCommon(common, origin));
    out.common.push_back(std::move(record));
  }
  return out;
}

AlignedWords::AlignedWords(std::string bytes, size_t offset, uint64_t length) : bytes_(std::move(bytes)) {
  const char* data = bytes_.data() + offset;
  const size_t count = length / sizeof(capnp::word);
  if (reinterpret_cast<uintptr_t>(data) % alignof(capnp::word) == 0) {
    words_ = kj::arrayPtr(reinterpret_cast<const capnp::word*>(data), count);
    return;
  }
  copy_ = kj::heapArray<capnp::word>(count);
  std::memcpy(copy_.begin(), data, length);
  words_ = copy_.asPtr();
}

}  // namespace ckpt::runtime::manifest_capnp

#include "runtime/format/manifest.h"

#include <algorithm>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>
#include <sys/stat.h>

#include <cstring>

#include "io/checksum.h"
#include "io/file_io.h"
#include "manifest.capnp.h"  // generated into the build's runtime/ directory
#include "runtime/format/manifest_validation.h"

namespace ckpt::runtime {
namespace {

constexpr char kMagic[8] = {'C', 'K', 'P', 'T', 'M', 'N', 'F', 'S'};
constexpr size_t kHeaderBytes = 32;
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
    if (!in.files[i].checkpoint.empty()) files[static_cast<unsigned>(i)].setCheckpoint(AsText(in.files[i].checkpoint));
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
  out.codec = in.getCodec();
  out.byte_groups = in.getByteGroups();
  std::vector<uint32_t> sizes;
  sizes.reserve(in.getStoredSizes().size());
  for (uint32_t size : in.getStoredSizes()) sizes.push_back(size);
  out.stored_sizes = StoredSizes(sizes);
  return out;
}

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

enum class Chunks { kDecode, kLeaveEncoded };

TensorRecord ToTensor(schema::Tensor::Reader in, Chunks chunks) {
  TensorRecord out;
  out.key = ToString(in.getKey());
  out.dtype = in.getDtype();
  out.shape = ToShape(in.getShape());
  if (chunks == Chunks::kDecode) {
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

// A message's words: in place when the file's bytes are word-aligned, as a heap buffer is (FlatArrayMessageReader
// needs alignment, which std::string does not promise), else an aligned copy. Keeps the bytes it reads, and so
// cannot move: the words may point into them.
class MessageWords {
 public:
  MessageWords(std::string file, uint64_t length) : file_(std::move(file)) {
    const char* data = file_.data() + kHeaderBytes;
    const size_t count = length / sizeof(capnp::word);
    if (reinterpret_cast<uintptr_t>(data) % alignof(capnp::word) == 0) {
      words_ = kj::arrayPtr(reinterpret_cast<const capnp::word*>(data), count);
      return;
    }
    copy_ = kj::heapArray<capnp::word>(count);
    std::memcpy(copy_.begin(), data, length);
    words_ = copy_.asPtr();
  }
  MessageWords(const MessageWords&) = delete;
  MessageWords& operator=(const MessageWords&) = delete;

  // Calls `read` with the message's root, bounding the work a hostile message can cause; a malformed message (which
  // Cap'n Proto reports by throwing) is kCorrupt naming `origin`.
  template <typename Read>
  auto WithRoot(const std::string& origin, Read&& read) const -> decltype(read(schema::Manifest::Reader())) {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = words_.size() * kTraversalWordsPerWord + kTraversalSlackWords;
    options.nestingLimit = kNestingLimit;
    try {
      capnp::FlatArrayMessageReader reader(words_, options);
      if (reader.getEnd() != words_.end()) return Corrupt(origin + ": data after the end of the Cap'n Proto message");
      return read(reader.getRoot<schema::Manifest>());
    } catch (const kj::Exception& e) {
      return Corrupt(origin + ": malformed message: " + e.getDescription().cStr());
    }
  }

 private:
  std::string file_;
  kj::Array<capnp::word> copy_;
  kj::ArrayPtr<const capnp::word> words_;
};

// The header, the message and every check but (with Chunks::kLeaveEncoded) those of the tensors' chunks.
Result<Manifest> DecodeMessage(const MessageWords& words, const Header& header, Chunks chunks,
                               const std::string& origin) {
  ASSIGN_OR_RETURN(Manifest manifest, words.WithRoot(origin, [&](schema::Manifest::Reader root) {
    return ToManifest(root, chunks, origin);
  }));
  if (manifest.format_major != header.major || manifest.format_minor != header.minor) {
    return Corrupt(origin + ": the header says format " + FormatVersion(header.major, header.minor) +
                   ", the message says " + FormatVersion(manifest.format_major, manifest.format_minor));
  }
  const Status valid = chunks == Chunks::kDecode ? ValidateManifest(manifest) : ValidateManifestWithoutChunks(manifest);
  RETURN_IF_ERROR(valid.WithContext(origin));
  return manifest;
}

Result<std::string> ReadManifestFile(const std::string& dir) {
  Result<std::string> bytes = io::ReadWholeFile(dir, kManifestName, kMaxManifestBytes);
  if (!bytes.ok() && bytes.status().code() == Code::kNotFound) {
    return NotFound("no checkpoint at " + dir + " (MANIFEST missing)");
  }
  return bytes;
}

}  // namespace

std::string DataFileRoot(const std::string& dir, const DataFileRecord& file) {
  return file.checkpoint.empty() ? dir : io::ParentDirectory(dir);
}

std::string DataFileBeneathRoot(const DataFileRecord& file) {
  return file.checkpoint.empty() ? file.name : io::JoinPath(file.checkpoint, file.name);
}

std::string DataFilePath(const std::string& dir, const DataFileRecord& file) {
  return io::JoinPath(DataFileRoot(dir, file), DataFileBeneathRoot(file));
}

std::string DescribeDataFile(const DataFileRecord& file) {
  if (file.checkpoint.empty()) return Quoted(file.name);
  return Quoted(file.name) + " of checkpoint " + Quoted(file.checkpoint) + " (which this incremental checkpoint refers to)";
}

uint64_t StoredLength(const StoredBytes& stored) {
  return IsCompressed(stored) ? stored.stored_sizes.Before(stored.stored_sizes.size()) : stored.byte_length;
}

uint64_t StoredBlockOffset(const StoredBytes& stored, uint64_t block) {
  return stored.file_offset + stored.stored_sizes.Before(std::min<uint64_t>(block, stored.stored_sizes.size()));
}

namespace {

bool AnyCompressed(const Manifest& m) {
  for (const TensorRecord& t : m.tensors) {
    for (const ChunkRecord& c : t.chunks) {
      if (IsCompressed(c.bytes)) return true;
    }
  }
  for (const ObjectRecord& o : m.objects) {
    for (const ObjectPieceRecord& p : o.pieces) {
      if (IsCompressed(p.bytes)) return true;
    }
  }
  for (const CommonRecord& c : m.common) {
    if (!c.is_inline && IsCompressed(c.stored)) return true;
  }
  return false;
}

}  // namespace

uint32_t FormatMajorFor(const Manifest& manifest) {
  if (AnyCompressed(manifest)) return kFormatMajor;
  for (const DataFileRecord& file : manifest.files) {
    if (!file.checkpoint.empty()) return kFormatMajorWithReferences;
  }
  return kFormatMajorWithoutReferences;
}

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

namespace {

// The whole decode of a file's bytes, which it takes so that a file read for it is not copied again.
Result<Manifest> DecodeWhole(std::string file, const std::string& origin) {
  ASSIGN_OR_RETURN(const Header header, ParseHeader(file, origin));
  return DecodeMessage(MessageWords(std::move(file), header.message_length), header, Chunks::kDecode, origin);
}

}  // namespace

Result<Manifest> DecodeManifest(const std::string& bytes, const std::string& origin) {
  return DecodeWhole(bytes, origin);
}

class EncodedChunks::Impl {
 public:
  Impl(std::string file, const Header& header, std::string origin)
      : words_(std::move(file), header.message_length), header_(header), origin_(std::move(origin)) {}

  // The manifest without its tensors' chunks, which this then decodes on demand.
  Result<Manifest> DecodeWithoutChunks() {
    ASSIGN_OR_RETURN(Manifest manifest, DecodeMessage(words_, header_, Chunks::kLeaveEncoded, origin_));
    decoded_.assign(manifest.tensors.size(), false);
    return manifest;
  }

  Status DecodeInto(Manifest& manifest, const std::vector<uint32_t>& tensors) {
    std::vector<uint32_t> missing;
    for (uint32_t t : tensors) {
      if (t >= decoded_.size() || t >= manifest.tensors.size()) {
        return InvalidArgument("tensor " + std::to_string(t) + " of " + origin_ + ", which holds " +
                               std::to_string(decoded_.size()));
      }
      if (!decoded_[t]) missing.push_back(t);
    }
    if (missing.empty()) return Status::Ok();
    return words_.WithRoot(origin_, [&](schema::Manifest::Reader root) -> Status {
      const auto stored = root.getTensors();
      for (uint32_t t : missing) {
        if (decoded_[t]) continue;  // asked twice in one call
        TensorRecord& tensor = manifest.tensors[t];
        tensor.chunks = ToChunks(stored[t].getChunks());
        tensor.digests = ToDigests(stored[t].getDigests());
        const Status valid = ValidateTensorChunks(tensor, manifest.files);
        if (!valid.ok()) {
          tensor.chunks.clear();
          tensor.digests.clear();  // nothing may plan with records that failed their checks
          return valid.WithContext("tensor " + Quoted(tensor.key)).WithContext(origin_);
        }
        decoded_[t] = true;
        ++decoded_count_;
      }
      return Status::Ok();
    });
  }

  size_t decoded_count() const { return decoded_count_; }

 private:
  const MessageWords words_;
  const Header header_;
  const std::string origin_;
  std::vector<bool> decoded_;
  size_t decoded_count_ = 0;
};

EncodedChunks::EncodedChunks(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EncodedChunks::~EncodedChunks() = default;

Status EncodedChunks::DecodeInto(Manifest& manifest, const std::vector<uint32_t>& tensors) {
  return impl_->DecodeInto(manifest, tensors);
}

size_t EncodedChunks::decoded_count() const { return impl_->decoded_count(); }

Result<ManifestWithoutChunks> DecodeManifestWithoutChunks(std::string bytes, const std::string& origin) {
  ASSIGN_OR_RETURN(const Header header, ParseHeader(bytes, origin));
  auto chunks = std::make_unique<EncodedChunks::Impl>(std::move(bytes), header, origin);
  ASSIGN_OR_RETURN(Manifest manifest, chunks->DecodeWithoutChunks());
  return ManifestWithoutChunks{std::move(manifest), std::make_unique<EncodedChunks>(std::move(chunks))};
}

Status WriteManifest(const std::string& dir, const Manifest& manifest) {
  ASSIGN_OR_RETURN(std::string bytes, EncodeManifest(manifest));
  return io::WriteFileDurably(io::JoinPath(dir, kManifestName), bytes.data(), bytes.size());
}

Result<Manifest> ReadManifest(const std::string& dir) {
  ASSIGN_OR_RETURN(std::string bytes, ReadManifestFile(dir));
  return DecodeWhole(std::move(bytes), io::JoinPath(dir, kManifestName));
}

Result<ManifestWithoutChunks> ReadManifestWithoutChunks(const std::string& dir) {
  ASSIGN_OR_RETURN(std::string bytes, ReadManifestFile(dir));
  return DecodeManifestWithoutChunks(std::move(bytes), io::JoinPath(dir, kManifestName));
}

std::vector<bool> HeldDataFiles(const Manifest& manifest, const std::string& dir) {
  std::vector<bool> held;
  for (const DataFileRecord& file : manifest.files) {
    struct stat st;
    // A link is no data file of the copy: lstat, so that it counts as missing.
    held.push_back(lstat(DataFilePath(dir, file).c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
                   static_cast<uint64_t>(st.st_size) == file.size);
  }
  return held;
}

Result<std::vector<std::string>> MissingDataFiles(const std::string& dir, const std::string& files_dir) {
  ASSIGN_OR_RETURN(const ManifestWithoutChunks read, ReadManifestWithoutChunks(dir));
  const std::vector<bool> held = HeldDataFiles(read.manifest, files_dir);
  std::vector<std::string> missing;
  for (size_t i = 0; i < held.size(); ++i) {
    if (!held[i]) missing.push_back(read.manifest.files[i].name);
  }
  return missing;
}

}  // namespace ckpt::runtime

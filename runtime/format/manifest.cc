#include "runtime/format/manifest.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>

#include "io/checksum.h"
#include "io/file_io.h"
#include "runtime/format/manifest_capnp.h"
#include "runtime/format/manifest_validation.h"

namespace ckpt::runtime {
namespace {

using manifest_capnp::AlignedWords;
using manifest_capnp::Chunks;
using manifest_capnp::ReadMessage;

constexpr char kMagic[8] = {'C', 'K', 'P', 'T', 'M', 'N', 'F', 'S'};
constexpr size_t kHeaderBytes = 32;
// The most bytes of back-to-back sections read at once; a section larger than this is read alone.
constexpr uint64_t kMostSectionBytesPerRead = 64ull << 20;

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
  uint64_t message_end() const { return kHeaderBytes + message_length; }
};

std::string FormatVersion(uint32_t major, uint32_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

// The header checks against a file of `file_size` bytes whose first bytes are `bytes` (kHeaderBytes of them, when
// the file has that many), in the order that gives the most useful error for each kind of bad file.
Result<Header> ParseHeader(const char* bytes, uint64_t file_size, const std::string& origin) {
  if (file_size < kHeaderBytes) {
    return Corrupt(origin + ": truncated: " + std::to_string(file_size) + " bytes, shorter than the " +
                   std::to_string(kHeaderBytes) + "-byte MANIFEST header");
  }
  if (std::memcmp(bytes, kMagic, sizeof kMagic) != 0) return Corrupt(origin + ": not a ckpt MANIFEST (foreign file)");
  Header h;
  h.major = GetLittleEndian<uint32_t>(bytes + 8);
  h.minor = GetLittleEndian<uint32_t>(bytes + 12);
  h.message_length = GetLittleEndian<uint64_t>(bytes + 16);
  h.message_checksum = GetLittleEndian<uint64_t>(bytes + 24);
  if (h.major > kFormatMajor) {
    return VersionError(origin + ": written by format " + FormatVersion(h.major, h.minor) +
                        ", this library reads up to " + std::to_string(kFormatMajor) + ".x");
  }
  if (h.major == 0) return Corrupt(origin + ": format " + FormatVersion(h.major, h.minor) + " does not exist");
  const uint64_t present = file_size - kHeaderBytes;
  if (h.message_length > present) {
    return Corrupt(origin + ": truncated: the header announces a " + std::to_string(h.message_length) +
                   "-byte message, only " + std::to_string(present) + " bytes follow");
  }
  // In format 4 the sections follow, which their index accounts for.
  if (h.message_length < present && h.major < kFormatMajorWithSections) {
    return Corrupt(origin + ": " + std::to_string(present - h.message_length) + " trailing bytes after the " +
                   std::to_string(h.message_length) + "-byte message");
  }
  if (h.message_length % sizeof(capnp::word) != 0) {
    return Corrupt(origin + ": message length " + std::to_string(h.message_length) + " is not a whole number of words");
  }
  return h;
}

Status CheckMessage(const char* message, const Header& h, const std::string& origin) {
  const uint64_t actual = io::Checksum(message, h.message_length);
  if (actual != h.message_checksum) {
    return Corrupt(origin + ": checksum mismatch: the message hashes to " + std::to_string(actual) +
                   ", the header records " + std::to_string(h.message_checksum) + " (damaged file)");
  }
  return Status::Ok();
}

// ---- Sections (format 4) ------------------------------------------------------------------------------------------

struct Section {
  uint32_t tensor = 0;
  uint32_t first_chunk = 0;
  uint32_t chunk_count = 0;
  uint64_t offset = 0;  // in the file: where the section before it ends
  uint64_t length = 0;
  uint64_t checksum = 0;
};

// Appends the sections of tensor `index` to `out` and `sections`; a tensor without chunks or digests has none.
void AppendSections(const TensorRecord& tensor, uint32_t index, std::string* out, std::vector<Section>* sections) {
  if (tensor.chunks.empty() && tensor.digests.empty()) return;
  size_t first = 0;
  do {
    const size_t count = std::min<size_t>(kChunksPerSection, tensor.chunks.size() - first);
    capnp::MallocMessageBuilder builder;
    manifest_capnp::FillChunkList(builder.initRoot<schema::ChunkList>(), tensor, first, count);
    const kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
    const kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
    sections->push_back(Section{index, static_cast<uint32_t>(first), static_cast<uint32_t>(count), 0, bytes.size(),
                                io::Checksum(bytes.begin(), bytes.size())});
    out->append(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
    first += count;
  } while (first < tensor.chunks.size());
}

std::vector<Section> ToSections(capnp::List<schema::ChunkSection>::Reader in) {
  std::vector<Section> out;
  out.reserve(in.size());
  for (auto s : in) {
    out.push_back(Section{s.getTensor(), s.getFirstChunk(), s.getChunkCount(), 0, s.getLength(), s.getChecksum()});
  }
  return out;
}

std::string DescribeSection(const std::vector<Section>& sections, size_t i) {
  return "chunk section " + std::to_string(i) + " (tensor " + std::to_string(sections[i].tensor) + ", chunks from " +
         std::to_string(sections[i].first_chunk) + ")";
}

// Checks the index of a file of `file_size` bytes whose sections start at `start`, and sets their offsets: sorted by
// tensor, each tensor's chunks from 0 on without gaps (a section without chunks only alone), lengths of whole words,
// and the sections filling the rest of the file exactly.
Status PlaceSections(std::vector<Section>& sections, size_t tensors, uint64_t start, uint64_t file_size,
                     const std::string& origin) {
  uint64_t offset = start;
  for (size_t i = 0; i < sections.size(); ++i) {
    Section& s = sections[i];
    if (s.tensor >= tensors) {
      return Corrupt(origin + ": " + DescribeSection(sections, i) + " names tensor " + std::to_string(s.tensor) +
                     " of " + std::to_string(tensors));
    }
    const bool continues = i > 0 && sections[i - 1].tensor == s.tensor;
    const bool follows = continues
                             ? sections[i - 1].chunk_count > 0 &&
                                   s.first_chunk == uint64_t{sections[i - 1].first_chunk} + sections[i - 1].chunk_count
                             : s.first_chunk == 0 && (i == 0 || sections[i - 1].tensor < s.tensor);
    if (!follows || (continues && s.chunk_count == 0)) {
      return Corrupt(origin + ": " + DescribeSection(sections, i) + " does not follow " +
                     (i == 0 ? std::string("the start of the index") : DescribeSection(sections, i - 1)) +
                     ": a tensor's sections hold its chunks in order from chunk 0");
    }
    if (s.length == 0 || s.length % sizeof(capnp::word) != 0) {
      return Corrupt(origin + ": " + DescribeSection(sections, i) + " is " + std::to_string(s.length) +
                     " bytes, not a whole number of words");
    }
    // Each Chunk of a list takes its three pointers' words at least; a reader sizes a tensor's records by the index.
    if (s.chunk_count > s.length / (3 * sizeof(capnp::word))) {
      return Corrupt(origin + ": " + DescribeSection(sections, i) + " names " + std::to_string(s.chunk_count) +
                     " chunks, more than its " + std::to_string(s.length) + " bytes can hold");
    }
    if (s.length > file_size - offset) {
      return Corrupt(origin + ": truncated: " + DescribeSection(sections, i) + " ends past the file's " +
                     std::to_string(file_size) + " bytes");
    }
    s.offset = offset;
    offset += s.length;
  }
  if (offset < file_size) {
    return Corrupt(origin + ": " + std::to_string(file_size - offset) + " trailing bytes after the chunk sections");
  }
  return Status::Ok();
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
  return Quoted(file.name) + " of checkpoint " + Quoted(file.checkpoint) +
         " (which this incremental checkpoint refers to)";
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
  uint64_t chunks = 0;
  for (const TensorRecord& t : manifest.tensors) chunks += t.chunks.size();
  if (chunks >= kSectionedFromChunks) return kFormatMajorWithSections;
  if (AnyCompressed(manifest)) return kFormatMajorCompressed;
  for (const DataFileRecord& file : manifest.files) {
    if (!file.checkpoint.empty()) return kFormatMajorWithReferences;
  }
  return kFormatMajorWithoutReferences;
}

Result<std::string> EncodeManifest(const Manifest& manifest) {
  Status valid = ValidateManifest(manifest);
  if (!valid.ok()) return Internal("refusing to write an inconsistent manifest: " + valid.message());
  const bool sectioned = manifest.format_major >= kFormatMajorWithSections;
  std::string out(kHeaderBytes, '\0');
  std::string sections;
  try {
    std::vector<Section> index;
    if (sectioned) {
      for (size_t t = 0; t < manifest.tensors.size(); ++t) {
        AppendSections(manifest.tensors[t], static_cast<uint32_t>(t), &sections, &index);
      }
    }
    capnp::MallocMessageBuilder builder;
    auto root = builder.initRoot<schema::Manifest>();
    manifest_capnp::FillManifest(root, manifest, sectioned ? Chunks::kElsewhere : Chunks::kInMessage);
    if (sectioned) {
      auto list = root.initChunkSections(static_cast<unsigned>(index.size()));
      for (size_t i = 0; i < index.size(); ++i) {
        auto s = list[static_cast<unsigned>(i)];
        s.setTensor(index[i].tensor);
        s.setFirstChunk(index[i].first_chunk);
        s.setChunkCount(index[i].chunk_count);
        s.setLength(index[i].length);
        s.setChecksum(index[i].checksum);
      }
    }
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
  out += sections;
  return out;
}

// ---- Decoding -----------------------------------------------------------------------------------------------------

// What decodes the tensors' chunks of a manifest decoded without them.
class EncodedChunks::Impl {
 public:
  Impl(std::string origin, size_t tensors, uint64_t file_bytes_read)
      : origin_(std::move(origin)), decoded_(tensors, false), file_bytes_read_(file_bytes_read) {}
  virtual ~Impl() = default;

  Status DecodeInto(Manifest& manifest, const std::vector<uint32_t>& tensors) {
    std::vector<uint32_t> missing;
    for (uint32_t t : tensors) {
      RETURN_IF_ERROR(CheckIndex(manifest, t));
      if (!decoded_[t]) missing.push_back(t);
    }
    std::sort(missing.begin(), missing.end());
    missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
    Status status = Decode(manifest, missing);
    size_t checked = 0;
    for (; status.ok() && checked < missing.size(); ++checked) {
      const TensorRecord& tensor = manifest.tensors[missing[checked]];
      status = ValidateTensorChunks(tensor, manifest.files).WithContext("tensor " + Quoted(tensor.key));
      if (!status.ok()) break;
      decoded_[missing[checked]] = true;
      ++decoded_count_;
    }
    if (status.ok()) return status;
    for (size_t i = checked; i < missing.size(); ++i) Forget(manifest, missing[i]);
    return status.WithContext(origin_);
  }

  // Formats 1 to 3: whole tensors.
  virtual Status DecodeRecordsInto(Manifest& manifest, const std::vector<ChunkIndex>& chunks) {
    std::vector<uint32_t> tensors;
    tensors.reserve(chunks.size());
    for (const ChunkIndex& c : chunks) tensors.push_back(c.tensor);
    return DecodeInto(manifest, tensors);
  }

  size_t decoded_count() const { return decoded_count_; }
  uint64_t file_bytes_read() const { return file_bytes_read_; }

 protected:
  Status CheckIndex(const Manifest& manifest, uint32_t tensor) const {
    if (tensor < decoded_.size() && tensor < manifest.tensors.size()) return Status::Ok();
    return InvalidArgument("tensor " + std::to_string(tensor) + " of " + origin_ + ", which holds " +
                           std::to_string(decoded_.size()));
  }

  // Puts the chunks and digests of `tensors` (sorted, none decoded whole yet) into `manifest`, unchecked; errors are
  // given the file's name by the caller.
  virtual Status Decode(Manifest& manifest, const std::vector<uint32_t>& tensors) = 0;

  // Drops what was decoded of `tensor`: nothing may plan with records that failed their checks, or beside them.
  virtual void Forget(Manifest& manifest, uint32_t tensor) {
    manifest.tensors[tensor].chunks.clear();
    manifest.tensors[tensor].digests.clear();
  }

  const std::string origin_;
  std::vector<bool> decoded_;  // by tensor: decoded whole and checked
  size_t decoded_count_ = 0;
  uint64_t file_bytes_read_ = 0;
};

namespace {

// Formats 1 to 3: the chunks lie in the one message, which this keeps.
class ChunksInMessage : public EncodedChunks::Impl {
 public:
  ChunksInMessage(std::unique_ptr<AlignedWords> message, std::string origin, size_t tensors, uint64_t file_size)
      : Impl(std::move(origin), tensors, file_size), message_(std::move(message)) {}

 protected:
  Status Decode(Manifest& manifest, const std::vector<uint32_t>& tensors) override {
    if (tensors.empty()) return Status::Ok();
    return ReadMessage<schema::Manifest>(
        message_->words(), "the tensors' chunks", [&](schema::Manifest::Reader root) -> Status {
          const auto stored = root.getTensors();
          for (uint32_t t : tensors) {
            manifest.tensors[t].chunks = manifest_capnp::ToChunks(stored[t].getChunks());
            manifest.tensors[t].digests = manifest_capnp::ToDigests(stored[t].getDigests());
          }
          return Status::Ok();
        });
  }

 private:
  std::unique_ptr<AlignedWords> message_;
};

// Reads `size` bytes at `offset` of the MANIFEST file.
using ReadAt = std::function<Status(void* data, size_t size, uint64_t offset)>;

// Format 4: the chunks lie in sections, which this reads when they are asked for, whole tensors or single records.
class ChunksInSections : public EncodedChunks::Impl {
 public:
  ChunksInSections(ReadAt read_at, std::vector<Section> sections, std::string origin, size_t tensors,
                   uint64_t file_bytes_read)
      : Impl(std::move(origin), tensors, file_bytes_read),
        read_at_(std::move(read_at)),
        sections_(std::move(sections)),
        section_decoded_(sections_.size(), false),
        first_section_(tensors + 1, 0),
        chunk_count_(tensors, 0) {
    // first_section_[t]: the first section of tensor t or of a later one (sections are sorted by tensor).
    size_t s = 0;
    for (size_t t = 0; t <= tensors; ++t) {
      while (s < sections_.size() && sections_[s].tensor < t) ++s;
      first_section_[t] = s;
    }
    for (const Section& section : sections_) chunk_count_[section.tensor] += section.chunk_count;
  }

  Status DecodeRecordsInto(Manifest& manifest, const std::vector<ChunkIndex>& chunks) override {
    std::vector<size_t> wanted;
    for (const ChunkIndex& c : chunks) {
      RETURN_IF_ERROR(CheckIndex(manifest, c.tensor));
      if (decoded_[c.tensor]) continue;
      manifest.tensors[c.tensor].chunks.resize(chunk_count_[c.tensor]);
      // The tensor's section holding the chunk: the last that starts at or before it.
      const auto first = sections_.begin() + static_cast<std::ptrdiff_t>(first_section_[c.tensor]);
      const auto last = sections_.begin() + static_cast<std::ptrdiff_t>(first_section_[c.tensor + 1]);
      const auto after = std::upper_bound(first, last, c.chunk,
                                          [](uint32_t chunk, const Section& s) { return chunk < s.first_chunk; });
      if (after == first || c.chunk >= chunk_count_[c.tensor]) continue;
      const size_t s = static_cast<size_t>(after - sections_.begin()) - 1;
      if (!section_decoded_[s]) wanted.push_back(s);
    }
    std::sort(wanted.begin(), wanted.end());
    wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
    Status status = DecodeSections(manifest, wanted);
    for (size_t i = 0; status.ok() && i < wanted.size(); ++i) {
      const Section& s = sections_[wanted[i]];
      const TensorRecord& tensor = manifest.tensors[s.tensor];
      for (uint64_t c = s.first_chunk; status.ok() && c < uint64_t{s.first_chunk} + s.chunk_count; ++c) {
        status = ValidateChunkRecord(tensor, c, manifest.files).WithContext("tensor " + Quoted(tensor.key));
      }
    }
    if (status.ok()) return status;
    for (size_t s : wanted) Forget(manifest, sections_[s].tensor);
    return status.WithContext(origin_);
  }

 protected:
  Status Decode(Manifest& manifest, const std::vector<uint32_t>& tensors) override {
    std::vector<size_t> wanted;  // in file order, as `tensors` is sorted
    for (uint32_t t : tensors) {
      manifest.tensors[t].chunks.resize(chunk_count_[t]);
      for (size_t s = first_section_[t]; s < first_section_[t + 1]; ++s) {
        if (!section_decoded_[s]) wanted.push_back(s);
      }
    }
    return DecodeSections(manifest, wanted);
  }

  void Forget(Manifest& manifest, uint32_t tensor) override {
    Impl::Forget(manifest, tensor);
    for (size_t s = first_section_[tensor]; s < first_section_[tensor + 1]; ++s) section_decoded_[s] = false;
  }

 private:
  // Reads and decodes the sections `wanted` (sorted) into their tensors' records, which hold their tensors' counts.
  Status DecodeSections(Manifest& manifest, const std::vector<size_t>& wanted) {
    for (size_t i = 0; i < wanted.size();) {
      // Sections back to back are read at once.
      const uint64_t begin = sections_[wanted[i]].offset;
      uint64_t end = begin + sections_[wanted[i]].length;
      size_t j = i + 1;
      for (; j < wanted.size() && sections_[wanted[j]].offset == end &&
             end + sections_[wanted[j]].length - begin <= kMostSectionBytesPerRead;
           ++j) {
        end += sections_[wanted[j]].length;
      }
      kj::Array<capnp::word> words = kj::heapArray<capnp::word>((end - begin) / sizeof(capnp::word));
      RETURN_IF_ERROR(read_at_(words.begin(), end - begin, begin));
      file_bytes_read_ += end - begin;
      for (; i < j; ++i) {
        const Section& s = sections_[wanted[i]];
        const size_t from = (s.offset - begin) / sizeof(capnp::word);
        RETURN_IF_ERROR(DecodeSection(manifest, wanted[i], words.slice(from, from + s.length / sizeof(capnp::word))));
        section_decoded_[wanted[i]] = true;
      }
    }
    return Status::Ok();
  }

  Status DecodeSection(Manifest& manifest, size_t index, kj::ArrayPtr<const capnp::word> words) const {
    const Section& s = sections_[index];
    TensorRecord& tensor = manifest.tensors[s.tensor];
    const std::string where = DescribeSection(sections_, index) + " of tensor " + Quoted(tensor.key);
    const uint64_t actual = io::Checksum(words.begin(), s.length);
    if (actual != s.checksum) {
      return Corrupt(where + ": checksum mismatch: it hashes to " + std::to_string(actual) + ", the index records " +
                     std::to_string(s.checksum) + " (damaged file)");
    }
    return ReadMessage<schema::ChunkList>(words, where, [&](schema::ChunkList::Reader list) -> Status {
      if (list.getChunks().size() != s.chunk_count) {
        return Corrupt(where + ": holds " + std::to_string(list.getChunks().size()) + " chunks, the index says " +
                       std::to_string(s.chunk_count));
      }
      if (s.first_chunk != 0 && list.getDigests().size() != 0) {
        return Corrupt(where + ": holds digests, which only a tensor's first section may");
      }
      std::vector<ChunkRecord> chunks = manifest_capnp::ToChunks(list.getChunks());
      std::move(chunks.begin(), chunks.end(), tensor.chunks.begin() + s.first_chunk);
      if (s.first_chunk == 0) tensor.digests = manifest_capnp::ToDigests(list.getDigests());
      return Status::Ok();
    });
  }

  const ReadAt read_at_;
  const std::vector<Section> sections_;
  std::vector<bool> section_decoded_;
  std::vector<size_t> first_section_;
  std::vector<uint64_t> chunk_count_;  // by tensor, from the index
};

// Decodes the first message (`message`, its checksum checked) of a file of `file_size` bytes with `header`, every
// check made but those of the tensors' chunks. Formats 1 to 3 keep the message for the chunks; format 4 checks the
// index of sections and reads them with `read_at` when asked.
Result<ManifestWithoutChunks> DecodeFirstMessage(std::unique_ptr<AlignedWords> message, const Header& header,
                                                 uint64_t file_size, ReadAt read_at, const std::string& origin) {
  std::vector<Section> sections;
  ASSIGN_OR_RETURN(
      Manifest manifest,
      ReadMessage<schema::Manifest>(message->words(), origin, [&](schema::Manifest::Reader root) -> Result<Manifest> {
        sections = ToSections(root.getChunkSections());
        return manifest_capnp::ToManifest(root, Chunks::kElsewhere, origin);
      }));
  if (manifest.format_major != header.major || manifest.format_minor != header.minor) {
    return Corrupt(origin + ": the header says format " + FormatVersion(header.major, header.minor) +
                   ", the message says " + FormatVersion(manifest.format_major, manifest.format_minor));
  }
  RETURN_IF_ERROR(ValidateManifestWithoutChunks(manifest).WithContext(origin));
  const size_t tensors = manifest.tensors.size();
  std::unique_ptr<EncodedChunks::Impl> chunks;
  if (header.major >= kFormatMajorWithSections) {
    RETURN_IF_ERROR(PlaceSections(sections, tensors, header.message_end(), file_size, origin));
    chunks = std::make_unique<ChunksInSections>(std::move(read_at), std::move(sections), origin, tensors,
                                                header.message_end());
  } else {
    if (!sections.empty()) {
      return Corrupt(origin + ": format " + FormatVersion(header.major, header.minor) + " has no chunk sections, " +
                     "but the message indexes " + std::to_string(sections.size()));
    }
    chunks = std::make_unique<ChunksInMessage>(std::move(message), origin, tensors, file_size);
  }
  return ManifestWithoutChunks{std::move(manifest), std::make_unique<EncodedChunks>(std::move(chunks))};
}

// A whole file's bytes, held for the reads of its sections.
Result<ManifestWithoutChunks> DecodeFile(std::string file, const std::string& origin) {
  ASSIGN_OR_RETURN(const Header header, ParseHeader(file.data(), file.size(), origin));
  RETURN_IF_ERROR(CheckMessage(file.data() + kHeaderBytes, header, origin));
  const uint64_t size = file.size();
  if (header.major < kFormatMajorWithSections) {
    return DecodeFirstMessage(std::make_unique<AlignedWords>(std::move(file), kHeaderBytes, header.message_length),
                              header, size, nullptr, origin);
  }
  auto message =
      std::make_unique<AlignedWords>(file.substr(kHeaderBytes, header.message_length), 0, header.message_length);
  auto bytes = std::make_shared<const std::string>(std::move(file));
  ReadAt read_at = [bytes](void* data, size_t length, uint64_t offset) {
    std::memcpy(data, bytes->data() + offset, length);  // the index was checked to lie inside the file
    return Status::Ok();
  };
  return DecodeFirstMessage(std::move(message), header, size, std::move(read_at), origin);
}

// The whole decode, which takes the bytes so that a file read for it is not copied again.
Result<Manifest> DecodeWhole(std::string file, const std::string& origin) {
  ASSIGN_OR_RETURN(ManifestWithoutChunks read, DecodeFile(std::move(file), origin));
  std::vector<uint32_t> every(read.manifest.tensors.size());
  for (size_t t = 0; t < every.size(); ++t) every[t] = static_cast<uint32_t>(t);
  RETURN_IF_ERROR(read.chunks->DecodeInto(read.manifest, every));
  return std::move(read.manifest);
}

struct ManifestFile {
  io::File file;
  uint64_t size = 0;
  std::string origin;  // its path, for errors
};

// The MANIFEST of `dir`, opened: kNotFound naming the directory if it has none, kCorrupt if it is larger than
// kMaxManifestBytes (a hostile file must not exhaust memory).
Result<ManifestFile> OpenManifestFile(const std::string& dir) {
  Result<io::File> file = io::File::OpenBeneath(dir, kManifestName);
  if (!file.ok() && file.status().code() == Code::kNotFound) {
    return NotFound("no checkpoint at " + dir + " (MANIFEST missing)");
  }
  RETURN_IF_ERROR(file.status());
  ManifestFile opened{std::move(file).value(), 0, io::JoinPath(dir, kManifestName)};
  ASSIGN_OR_RETURN(opened.size, opened.file.Size());
  if (opened.size > kMaxManifestBytes) {
    return Corrupt(Quoted(opened.origin) + " is " + std::to_string(opened.size) + " bytes, more than the limit of " +
                   std::to_string(kMaxManifestBytes));
  }
  return opened;
}

Result<std::string> ReadAll(const ManifestFile& opened) {
  std::string bytes(opened.size, '\0');
  RETURN_IF_ERROR(opened.file.ReadAt(bytes.data(), bytes.size(), 0));
  return bytes;
}

}  // namespace

Result<Manifest> DecodeManifest(const std::string& bytes, const std::string& origin) {
  return DecodeWhole(bytes, origin);
}

Status ChunkDecoder::Records(const std::vector<ChunkIndex>& chunks) const {
  if (records_) return records_(chunks);
  if (!tensors_) return Status::Ok();
  std::vector<uint32_t> tensors;
  tensors.reserve(chunks.size());
  for (const ChunkIndex& c : chunks) tensors.push_back(c.tensor);
  return tensors_(tensors);
}

EncodedChunks::EncodedChunks(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EncodedChunks::~EncodedChunks() = default;

Status EncodedChunks::DecodeInto(Manifest& manifest, const std::vector<uint32_t>& tensors) {
  return impl_->DecodeInto(manifest, tensors);
}

Status EncodedChunks::DecodeRecordsInto(Manifest& manifest, const std::vector<ChunkIndex>& chunks) {
  return impl_->DecodeRecordsInto(manifest, chunks);
}

size_t EncodedChunks::decoded_count() const { return impl_->decoded_count(); }
uint64_t EncodedChunks::file_bytes_read() const { return impl_->file_bytes_read(); }

Result<ManifestWithoutChunks> DecodeManifestWithoutChunks(std::string bytes, const std::string& origin) {
  return DecodeFile(std::move(bytes), origin);
}

Status WriteManifest(const std::string& dir, const Manifest& manifest) {
  ASSIGN_OR_RETURN(std::string bytes, EncodeManifest(manifest));
  return io::WriteFileDurably(io::JoinPath(dir, kManifestName), bytes.data(), bytes.size());
}

Result<Manifest> ReadManifest(const std::string& dir) {
  ASSIGN_OR_RETURN(const ManifestFile opened, OpenManifestFile(dir));
  ASSIGN_OR_RETURN(std::string bytes, ReadAll(opened));
  return DecodeWhole(std::move(bytes), opened.origin);
}

Result<ManifestWithoutChunks> ReadManifestWithoutChunks(const std::string& dir) {
  ASSIGN_OR_RETURN(ManifestFile opened, OpenManifestFile(dir));
  const std::string& origin = opened.origin;
  char head[kHeaderBytes] = {};
  if (opened.size >= kHeaderBytes) RETURN_IF_ERROR(opened.file.ReadAt(head, kHeaderBytes, 0));
  ASSIGN_OR_RETURN(const Header header, ParseHeader(head, opened.size, origin));
  if (header.major < kFormatMajorWithSections) {
    ASSIGN_OR_RETURN(std::string bytes, ReadAll(opened));
    return DecodeFile(std::move(bytes), origin);
  }
  std::string message(header.message_length, '\0');
  RETURN_IF_ERROR(opened.file.ReadAt(message.data(), message.size(), kHeaderBytes));
  RETURN_IF_ERROR(CheckMessage(message.data(), header, origin));
  auto file = std::make_shared<const io::File>(std::move(opened.file));
  ReadAt read_at = [file](void* data, size_t length, uint64_t offset) { return file->ReadAt(data, length, offset); };
  return DecodeFirstMessage(std::make_unique<AlignedWords>(std::move(message), 0, header.message_length), header,
                            opened.size, std::move(read_at), origin);
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

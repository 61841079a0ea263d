// The checkpoint's index: an in-memory model, and its encoding as the MANIFEST file.
//
// MANIFEST layout: a 32-byte header, then one unpacked Cap'n Proto message (manifest.capnp), then in format 4 the
// tensors' chunk records in sections.
//   bytes 0-7   magic "CKPTMNFS"
//   bytes 8-11  format major (u32 LE)      bytes 12-15 format minor (u32 LE)
//   bytes 16-23 message length in bytes    bytes 24-31 XXH3-64 of the message
// The header is checked before the message is parsed, so a foreign, truncated, corrupt or newer-major file is
// refused with a precise error and never reaches the Cap'n Proto decoder. In format 4 the message leaves out every
// tensor's chunks and digests and indexes the sections that hold them: each section is a message of its own with its
// own XXH3-64 in the index, and they follow the first message back to back to the end of the file. A rank of a large
// load reads the header, the first message and the sections of the tensors it plans or reads, and checks each.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/status.h"
#include "runtime/core/box.h"

namespace ckpt::runtime {

// The format a manifest is written in: 1.0; 2.0 where it refers to another checkpoint's data files, so that a
// library that cannot follow such references refuses the checkpoint instead of reading its own files there; 3.0
// where some of its bytes are compressed, so that a library without the codec refuses the checkpoint instead of
// failing its checksums; 4.0 where it holds kSectionedFromChunks chunk records or more, which it keeps in sections
// (a library that reads every manifest whole refuses it instead of finding no chunks). kFormatMajor is the newest
// major this library reads.
inline constexpr uint32_t kFormatMajor = 4;
inline constexpr uint32_t kFormatMajorWithSections = 4;
inline constexpr uint32_t kFormatMajorCompressed = 3;
inline constexpr uint32_t kFormatMajorWithReferences = 2;
inline constexpr uint32_t kFormatMajorWithoutReferences = 1;
inline constexpr uint32_t kFormatMinor = 0;
inline constexpr char kManifestName[] = "MANIFEST";
inline constexpr char kDataDirName[] = "data";
// Upper bound on a MANIFEST's size; a larger file is refused as hostile.
inline constexpr uint64_t kMaxManifestBytes = 1ull << 31;
// A manifest of this many chunk records or more is written in sections (format 4): a job of a few ranks keeps the
// older formats, which older libraries read, and one of thousands of ranks, whose manifest is hundreds of MiB, lets
// each rank read its part. Each section holds up to kChunksPerSection records of one tensor.
inline constexpr uint64_t kSectionedFromChunks = 4096;
inline constexpr uint32_t kChunksPerSection = 256;

// The stored size of each block of compressed bytes, with where each block starts past the first, so that a read of
// any blocks finds them at once (reads in pieces of a large chunk would otherwise sum the sizes before each piece
// again). Most bytes are not compressed, and a manifest holds a record per chunk (140,000 for a safetensors file of
// many small tensors): uncompressed, it is one null pointer.
class StoredSizes {
 public:
  StoredSizes() = default;
  StoredSizes(std::initializer_list<uint32_t> sizes) : StoredSizes(std::vector<uint32_t>(sizes)) {}
  explicit StoredSizes(const std::vector<uint32_t>& sizes) { Append(sizes.begin(), sizes.end()); }
  StoredSizes(const StoredSizes& other) : sizes_(other.sizes_ ? std::make_unique<Sizes>(*other.sizes_) : nullptr) {}
  StoredSizes& operator=(const StoredSizes& other) { return *this = StoredSizes(other); }
  StoredSizes(StoredSizes&&) = default;
  StoredSizes& operator=(StoredSizes&&) = default;

  const std::vector<uint32_t>& values() const { return sizes_ ? sizes_->sizes : kNone; }
  size_t size() const { return values().size(); }
  bool empty() const { return values().empty(); }
  uint32_t operator[](size_t i) const { return values()[i]; }
  std::vector<uint32_t>::const_iterator begin() const { return values().begin(); }
  std::vector<uint32_t>::const_iterator end() const { return values().end(); }
  // The sum of the sizes of the blocks before `block` (at most size()).
  uint64_t Before(size_t block) const { return block == 0 || !sizes_ ? 0 : sizes_->ends[block - 1]; }
  void Append(std::vector<uint32_t>::const_iterator first, std::vector<uint32_t>::const_iterator last) {
    if (first == last) return;
    if (!sizes_) sizes_ = std::make_unique<Sizes>();
    for (; first != last; ++first) {
      sizes_->sizes.push_back(*first);
      sizes_->ends.push_back(Before(sizes_->sizes.size() - 1) + *first);
    }
  }

 private:
  struct Sizes {
    std::vector<uint32_t> sizes;
    std::vector<uint64_t> ends;  // ends[b]: the sum of sizes[0..b]
  };
  static inline const std::vector<uint32_t> kNone;
  std::unique_ptr<Sizes> sizes_;
};

// Where some bytes live in the data files, with their block checksums.
struct StoredBytes {
  uint32_t file_index = 0;  // into Manifest::files
  // io::Codec: kNone, or kZstd, each block compressed on its own (io/block_codec.h) with its elements' bytes grouped
  // by `byte_groups` (1: not grouped). The blocks' stored forms follow each other from file_offset. Beside
  // file_index, where they take no room of their own.
  uint8_t codec = 0;
  uint8_t byte_groups = 0;
  uint64_t file_offset = 0;
  uint64_t byte_length = 0;
  uint64_t block_size = 0;
  std::vector<uint64_t> block_checksums;  // BlockCount(byte_length, block_size) values, of the bytes uncompressed
  StoredSizes stored_sizes;               // with a codec: one per block, its stored size (the block's length: raw)
};

// Whether the bytes are compressed (stored_sizes says where their blocks lie).
inline bool IsCompressed(const StoredBytes& stored) { return stored.codec != 0; }
// How many bytes of their file the bytes take.
uint64_t StoredLength(const StoredBytes& stored);
// Where block `block` of compressed bytes starts in their file.
uint64_t StoredBlockOffset(const StoredBytes& stored, uint64_t block);

// One stored box of a tensor, row-major.
struct ChunkRecord {
  Box box;
  StoredBytes bytes;
};

// SHA-256 of each block of a box's row-major bytes (the last block may be short).
struct BoxDigests {
  Box box;
  uint64_t block_size = 0;
  std::string sha256;  // 32 bytes per block
};

inline constexpr size_t kDigestBytes = 32;

struct TensorRecord {
  std::string key;
  int32_t dtype = 0;
  Shape shape;
  std::vector<ChunkRecord> chunks;  // tile `shape` exactly
  // CKPT_SAVE_INCREMENTAL: the digests of the boxes the save wrote (or referred to), decoded with the chunks.
  std::vector<BoxDigests> digests;
};

struct ObjectPieceRecord {
  Shape index;  // within the grid
  StoredBytes bytes;
};

struct ObjectRecord {
  std::string key;
  Shape grid_shape;
  std::vector<ObjectPieceRecord> pieces;  // one per grid cell
};

// Common bytes: inline when small, else stored in a data file.
struct CommonRecord {
  std::string key;
  bool is_inline = true;
  std::string inline_bytes;
  StoredBytes stored;
};

struct DataFileRecord {
  std::string name;  // relative to the checkpoint directory that holds it, e.g. "data/0-0.bin"
  uint64_t size = 0;
  // Empty: the checkpoint's own file. Otherwise the sibling checkpoint directory (one plain name, in the same
  // parent directory) whose file this is: an incremental save's reference to bytes it did not write again.
  std::string checkpoint;
};

// The directory a data file of the checkpoint at `dir` lies beneath, which reads of it are confined to: `dir`
// itself, or for a file of a sibling checkpoint, their common parent.
std::string DataFileRoot(const std::string& dir, const DataFileRecord& file);
// Its path relative to that directory, and its whole path.
std::string DataFileBeneathRoot(const DataFileRecord& file);
std::string DataFilePath(const std::string& dir, const DataFileRecord& file);
// How errors name it: its name, with the sibling checkpoint that holds it.
std::string DescribeDataFile(const DataFileRecord& file);
struct Manifest;
// The format major a manifest is written in: the oldest that holds what it holds.
uint32_t FormatMajorFor(const Manifest& manifest);

struct Manifest {
  uint32_t format_major = kFormatMajorWithoutReferences;  // FormatMajorFor(*this)
  uint32_t format_minor = kFormatMinor;
  std::string library_version;
  std::string checkpoint_id;
  uint32_t world_size = 0;
  uint32_t node_count = 0;
  std::vector<std::pair<std::string, std::string>> metadata;
  std::vector<DataFileRecord> files;
  std::vector<TensorRecord> tensors;  // sorted by key, keys unique
  std::vector<ObjectRecord> objects;  // sorted by key, keys unique
  std::vector<CommonRecord> common;   // sorted by key, keys unique
};

// The whole MANIFEST file: header and message.
Result<std::string> EncodeManifest(const Manifest& manifest);

// Parses and validates a MANIFEST file's bytes. `origin` (the path) is named in errors. Refuses with kCorrupt:
// a bad magic (foreign file), a length or checksum mismatch (truncated, damaged), a message beyond traversal or
// nesting limits, and any content that is not self-consistent: file names that are absolute, contain "..", empty
// components or leave data/; dtypes out of range; ndim above 8; chunks out of the tensor's bounds or not tiling it
// exactly; byte lengths that differ from volume * dtype size; byte ranges beyond their file's size; checksum counts
// that do not match; unsorted or duplicate keys. Refuses a newer major format with kVersion.
Result<Manifest> DecodeManifest(const std::string& bytes, const std::string& origin);

// Chunk `chunk` of tensor `tensor`: indices into Manifest::tensors and its chunks.
struct ChunkIndex {
  uint32_t tensor = 0;
  uint32_t chunk = 0;
};

// The chunks of a MANIFEST's tensors, kept encoded until asked for (DecodeManifestWithoutChunks). A load on many
// ranks plans and reads only some tensors on each rank, and the chunk records are most of a large manifest: at
// 16,384 ranks of a distributed-optimizer job, 202 MiB encoded and several times that decoded.
class EncodedChunks {
 public:
  class Impl;
  explicit EncodedChunks(std::unique_ptr<Impl> impl);
  ~EncodedChunks();

  // Decodes into `manifest` (the one decoded with these chunks) the chunks of those `tensors` (indices into its
  // tensors, in any order, repeats allowed) not decoded yet, and checks them as DecodeManifest does: kCorrupt naming
  // the file and the tensor, whose chunks then stay empty. kInvalidArgument for an index out of range.
  Status DecodeInto(Manifest& manifest, const std::vector<uint32_t>& tensors);
  // Decodes into `manifest` the records `chunks` names, with the sections that hold them (format 4; formats 1 to 3
  // decode their whole tensors), and checks each record as DecodeInto does but for the tiling of its tensor, which
  // only the whole tensor shows (its owner's plan has checked it). A tensor decoded so in part holds as many records
  // as it has, those not decoded with an empty box, until DecodeInto completes it. A chunk index past its tensor's
  // records decodes nothing (the caller's checks name it); kInvalidArgument for a tensor index out of range.
  Status DecodeRecordsInto(Manifest& manifest, const std::vector<ChunkIndex>& chunks);
  // How many tensors have their chunks decoded whole so far.
  size_t decoded_count() const;
  // How many bytes of the MANIFEST file have been read so far (from memory: would have been): the whole file for
  // formats 1 to 3; the header, the first message and the sections decoded so far for format 4.
  uint64_t file_bytes_read() const;

 private:
  std::unique_ptr<Impl> impl_;
};

struct ManifestWithoutChunks {
  Manifest manifest;  // every tensor's chunks empty until `chunks` decodes them
  std::unique_ptr<EncodedChunks> chunks;
};

// DecodeManifest but for the tensors' chunks: the same header, checksum (of the first message) and checks, except
// those of each tensor's chunks (and in format 4 their sections' checksums), which EncodedChunks::DecodeInto makes
// when it decodes them. Keeps `bytes`.
Result<ManifestWithoutChunks> DecodeManifestWithoutChunks(std::string bytes, const std::string& origin);

// What a load calls to have chunk records in its manifest before it plans with them or reads them: the whole chunks of
// some tensors (indices into Manifest::tensors), or single records. A manifest decoded whole needs nothing done (a
// default ChunkDecoder); one made from a function of tensors alone has records by decoding their whole tensors.
class ChunkDecoder {
 public:
  using TensorsFunction = std::function<Status(const std::vector<uint32_t>& tensors)>;
  using RecordsFunction = std::function<Status(const std::vector<ChunkIndex>& chunks)>;

  ChunkDecoder() = default;
  template <typename DecodeTensors,
            typename = std::enable_if_t<std::is_invocable_r_v<Status, DecodeTensors, const std::vector<uint32_t>&>>>
  ChunkDecoder(DecodeTensors tensors) : tensors_(std::move(tensors)) {}  // NOLINT: a function of tensors converts
  ChunkDecoder(TensorsFunction tensors, RecordsFunction records)
      : tensors_(std::move(tensors)), records_(std::move(records)) {}

  // Every chunk of `tensors`, checked as DecodeManifest checks them.
  Status operator()(const std::vector<uint32_t>& tensors) const { return tensors_ ? tensors_(tensors) : Status::Ok(); }
  // The records `chunks` names, checked each (EncodedChunks::DecodeRecordsInto).
  Status Records(const std::vector<ChunkIndex>& chunks) const;

 private:
  TensorsFunction tensors_;
  RecordsFunction records_;
};

// Writes <dir>/MANIFEST durably.
Status WriteManifest(const std::string& dir, const Manifest& manifest);
// Reads and decodes <dir>/MANIFEST; kNotFound naming the directory if it has none.
Result<Manifest> ReadManifest(const std::string& dir);
// The same without the tensors' chunks (DecodeManifestWithoutChunks). Reads the whole file of formats 1 to 3; of
// format 4 the header and first message now and each section when DecodeInto needs it, from the file opened now.
Result<ManifestWithoutChunks> ReadManifestWithoutChunks(const std::string& dir);
// The data files the manifest of `dir` lists that `files_dir` lacks or holds at another size (`files_dir` is `dir`
// but for a copy being assembled elsewhere). Memory copies are assembled from several nodes: none is used, or
// committed to storage, with one missing.
Result<std::vector<std::string>> MissingDataFiles(const std::string& dir, const std::string& files_dir);
// Which data files of `manifest` (by index) the checkpoint directory `dir` holds at their size, as regular files.
std::vector<bool> HeldDataFiles(const Manifest& manifest, const std::string& dir);

}  // namespace ckpt::runtime

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <tuple>

#include "io/block_codec.h"
#include "io/checksum.h"
#include "io/file_io.h"
#include "manifest.capnp.h"
#include "runtime/core/dtype.h"
#include "runtime/format/manifest.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::runtime {
namespace {

constexpr size_t kHeaderBytes = 32;
const char kOrigin[] = "/ckpt/step-7/MANIFEST";
const int32_t kF32 = static_cast<int32_t>(DType::kF32);

StoredBytes Stored(uint32_t file_index, uint64_t offset, uint64_t length, uint64_t block_size = 32) {
  StoredBytes s;
  s.file_index = file_index;
  s.file_offset = offset;
  s.byte_length = length;
  s.block_size = block_size;
  for (uint64_t b = 0; b < io::BlockCount(length, block_size); ++b) s.block_checksums.push_back(0x1000 + b);
  return s;
}

// Two data files; a scalar and a 4x6 matrix in two row blocks; an object on a 2-cell grid; inline and stored common.
Manifest SampleManifest() {
  Manifest m;
  m.library_version = "0.1.0";
  m.checkpoint_id = "save-42";
  m.world_size = 2;
  m.node_count = 1;
  m.metadata = {{"step", "7"}, {"model", "tiny"}};
  m.files = {{"data/0-0.bin", 8192}, {"data/1-0.bin", 4096}};
  m.tensors.push_back(TensorRecord{"a.scalar", kF32, {}, {ChunkRecord{Box{{}, {}}, Stored(0, 0, 4)}}});
  m.tensors.push_back(TensorRecord{
      "w",
      kF32,
      {4, 6},
      {ChunkRecord{Box{{0, 0}, {2, 6}}, Stored(0, 4096, 48)}, ChunkRecord{Box{{2, 0}, {2, 6}}, Stored(1, 0, 48)}}});
  m.objects.push_back(ObjectRecord{"opt", {2}, {{{0}, Stored(0, 512, 10)}, {{1}, Stored(1, 512, 20)}}});
  m.common.push_back(CommonRecord{"config", true, std::string("lr=0.1\0x", 8), {}});
  m.common.push_back(CommonRecord{"rng", false, "", Stored(0, 1024, 100)});
  return m;
}

void PutLittleEndian(std::string* out, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out->push_back(static_cast<char>(value >> (8 * i)));
}

// A MANIFEST file around `message`, with a header that is correct unless the caller says otherwise.
std::string WithHeader(const std::string& message, uint32_t major = kFormatMajorWithoutReferences, uint32_t minor = kFormatMinor) {
  std::string file = "CKPTMNFS";
  PutLittleEndian(&file, major, 4);
  PutLittleEndian(&file, minor, 4);
  PutLittleEndian(&file, message.size(), 8);
  PutLittleEndian(&file, io::Checksum(message.data(), message.size()), 8);
  return file + message;
}

// The sample manifest as a Cap'n Proto builder, to be damaged by a test and wrapped in a correct header, so that
// what is exercised is the decoder's semantic validation rather than its header checks.
class HostileManifest {
 public:
  explicit HostileManifest(const Manifest& sample = SampleManifest()) {
    const std::string file = EncodeManifest(sample).value();
    kj::Array<capnp::word> words = kj::heapArray<capnp::word>((file.size() - kHeaderBytes) / sizeof(capnp::word));
    std::memcpy(words.begin(), file.data() + kHeaderBytes, file.size() - kHeaderBytes);
    capnp::FlatArrayMessageReader reader(words.asPtr());
    builder_.setRoot(reader.getRoot<schema::Manifest>());
  }

  schema::Manifest::Builder root() { return builder_.getRoot<schema::Manifest>(); }
  schema::Tensor::Builder matrix() { return root().getTensors()[1]; }
  schema::Chunk::Builder chunk(unsigned i) { return matrix().getChunks()[i]; }

  std::string File(uint32_t major = kFormatMajorWithoutReferences, uint32_t minor = kFormatMinor) {
    const kj::Array<capnp::word> words = capnp::messageToFlatArray(builder_);
    const auto bytes = words.asBytes();
    return WithHeader(std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size()), major, minor);
  }

 private:
  capnp::MallocMessageBuilder builder_;
};

kj::ArrayPtr<const uint64_t> Words(const Shape& values) { return kj::arrayPtr(values.data(), values.size()); }

// Decoding `file` fails with kCorrupt, and the message names the origin and contains `fragment`.
void ExpectCorrupt(const std::string& file, const std::string& fragment) {
  Result<Manifest> decoded = DecodeManifest(file, kOrigin);
  ASSERT_FALSE(decoded.ok()) << "accepted; expected an error containing: " << fragment;
  EXPECT_EQ(decoded.status().code(), Code::kCorrupt) << decoded.status().message();
  EXPECT_EQ(decoded.status().message().rfind(kOrigin, 0), 0u) << decoded.status().message();
  EXPECT_NE(decoded.status().message().find(fragment), std::string::npos) << decoded.status().message();
}

void ExpectBadFileName(const std::string& name, const std::string& fragment) {
  HostileManifest m;
  m.root().getFiles()[1].setName(kj::StringPtr(name.c_str(), name.size()));
  ExpectCorrupt(m.File(), fragment);
}

// ---- Round trip ---------------------------------------------------------------------------------------------------

TEST(Manifest, RoundTripReencodesToTheSameBytes) {
  const std::string file = EncodeManifest(SampleManifest()).value();
  Result<Manifest> decoded = DecodeManifest(file, kOrigin);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(EncodeManifest(decoded.value()).value(), file);
}

TEST(Manifest, RoundTripKeepsEveryField) {
  const Manifest m = DecodeManifest(EncodeManifest(SampleManifest()).value(), kOrigin).value();
  EXPECT_EQ(m.format_major, kFormatMajorWithoutReferences);
  EXPECT_EQ(m.library_version, "0.1.0");
  EXPECT_EQ(m.checkpoint_id, "save-42");
  EXPECT_EQ(m.world_size, 2u);
  EXPECT_EQ(m.node_count, 1u);
  EXPECT_EQ(m.metadata, SampleManifest().metadata);
  ASSERT_EQ(m.files.size(), 2u);
  EXPECT_EQ(m.files[1].name, "data/1-0.bin");
  EXPECT_EQ(m.files[1].size, 4096u);

  ASSERT_EQ(m.tensors.size(), 2u);
  EXPECT_TRUE(m.tensors[0].shape.empty());
  ASSERT_EQ(m.tensors[0].chunks.size(), 1u);
  EXPECT_TRUE(m.tensors[0].chunks[0].box.offset.empty());
  const ChunkRecord& chunk = m.tensors[1].chunks[1];
  EXPECT_EQ(chunk.box, (Box{{2, 0}, {2, 6}}));
  EXPECT_EQ(chunk.bytes.file_index, 1u);
  EXPECT_EQ(chunk.bytes.byte_length, 48u);
  EXPECT_EQ(chunk.bytes.block_size, 32u);
  EXPECT_EQ(chunk.bytes.block_checksums, (std::vector<uint64_t>{0x1000, 0x1001}));

  ASSERT_EQ(m.objects.size(), 1u);
  EXPECT_EQ(m.objects[0].pieces[1].index, Shape{1});
  EXPECT_EQ(m.objects[0].pieces[1].bytes.file_offset, 512u);

  ASSERT_EQ(m.common.size(), 2u);
  EXPECT_TRUE(m.common[0].is_inline);
  EXPECT_EQ(m.common[0].inline_bytes, std::string("lr=0.1\0x", 8));
  EXPECT_FALSE(m.common[1].is_inline);
  EXPECT_EQ(m.common[1].stored.byte_length, 100u);
}

TEST(Manifest, EncodeRefusesAnInconsistentManifest) {
  Manifest m = SampleManifest();
  m.tensors[1].chunks.pop_back();
  Result<std::string> file = EncodeManifest(m);
  EXPECT_EQ(file.status().code(), Code::kInternal);
  EXPECT_NE(file.status().message().find("tensor 'w'"), std::string::npos) << file.status().message();
}

using ManifestDirTest = testing::TempDirTest;

TEST_F(ManifestDirTest, WriteThenReadRoundTrips) {
  ASSERT_TRUE(WriteManifest(dir(), SampleManifest()).ok());
  Result<Manifest> read = ReadManifest(dir());
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->checkpoint_id, "save-42");
}

TEST_F(ManifestDirTest, MissingManifestIsNotFoundNamingTheDirectory) {
  Result<Manifest> read = ReadManifest(dir());
  EXPECT_EQ(read.status().code(), Code::kNotFound);
  EXPECT_EQ(read.status().message(), "no checkpoint at " + dir() + " (MANIFEST missing)");
}

TEST_F(ManifestDirTest, ReadNamesTheManifestPathInErrors) {
  const std::string path = io::JoinPath(dir(), kManifestName);
  ASSERT_TRUE(io::WriteFileDurably(path, "not a manifest at all, just some words", 38).ok());
  Result<Manifest> read = ReadManifest(dir());
  EXPECT_EQ(read.status().code(), Code::kCorrupt);
  EXPECT_EQ(read.status().message().rfind(path, 0), 0u) << read.status().message();
}

// ---- Header -------------------------------------------------------------------------------------------------------

TEST(ManifestHeader, TruncatedFilesAreCorrupt) {
  const std::string file = EncodeManifest(SampleManifest()).value();
  for (size_t length : {size_t{0}, size_t{7}, size_t{31}}) {
    ExpectCorrupt(file.substr(0, length), "shorter than the 32-byte MANIFEST header");
  }
  for (size_t length : {kHeaderBytes, kHeaderBytes + 8, file.size() / 2, file.size() - 1}) {
    ExpectCorrupt(file.substr(0, length), "truncated");
  }
}

TEST(ManifestHeader, FlippedMessageByteIsAChecksumMismatch) {
  std::string file = EncodeManifest(SampleManifest()).value();
  file[kHeaderBytes + (file.size() - kHeaderBytes) / 2] ^= 0x10;
  ExpectCorrupt(file, "checksum mismatch");
}

TEST(ManifestHeader, RandomBytesAreAForeignFile) {
  std::mt19937_64 rng(7);
  std::string file(4096, '\0');
  for (char& c : file) c = static_cast<char>(rng());
  ExpectCorrupt(file, "not a ckpt MANIFEST (foreign file)");
}

TEST(ManifestHeader, TextFileIsAForeignFile) {
  ExpectCorrupt("{\"step\": 7, \"note\": \"this is a JSON file, not a manifest\"}\n", "foreign file");
}

// The sample's MANIFEST with its length field replaced.
std::string WithLengthField(uint64_t length) {
  const std::string file = EncodeManifest(SampleManifest()).value();
  std::string field;
  PutLittleEndian(&field, length, 8);
  return file.substr(0, 16) + field + file.substr(24);
}

TEST(ManifestHeader, LengthFieldLongerThanTheFileIsTruncated) {
  const size_t message_bytes = EncodeManifest(SampleManifest()).value().size() - kHeaderBytes;
  ExpectCorrupt(WithLengthField(message_bytes + 8), "truncated");
  ExpectCorrupt(WithLengthField(UINT64_MAX), "truncated");
}

TEST(ManifestHeader, LengthFieldShorterThanTheFileLeavesTrailingBytes) {
  const size_t message_bytes = EncodeManifest(SampleManifest()).value().size() - kHeaderBytes;
  ExpectCorrupt(WithLengthField(message_bytes - 8), "8 trailing bytes");
}

TEST(ManifestHeader, NewerMajorIsAVersionError) {
  HostileManifest m;
  m.root().setFormatMajor(kFormatMajor + 1);
  Result<Manifest> decoded = DecodeManifest(m.File(kFormatMajor + 1, 3), kOrigin);
  EXPECT_EQ(decoded.status().code(), Code::kVersion);
  EXPECT_EQ(decoded.status().message(), std::string(kOrigin) + ": written by format " +
                                            std::to_string(kFormatMajor + 1) + ".3, this library reads up to " +
                                            std::to_string(kFormatMajor) + ".x");
}

TEST(ManifestHeader, NewerMinorIsRead) {
  HostileManifest m;
  m.root().setFormatMinor(9);
  Result<Manifest> decoded = DecodeManifest(m.File(kFormatMajorWithoutReferences, 9), kOrigin);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(decoded->format_minor, 9u);
}

TEST(ManifestHeader, VersionDisagreeingWithTheMessageIsCorrupt) {
  HostileManifest m;
  ExpectCorrupt(m.File(kFormatMajorWithoutReferences, 4), "the message says 1.0");
}

TEST(ManifestHeader, ValidChecksumOverGarbageIsMalformed) {
  ExpectCorrupt(WithHeader(std::string(64, '\xff')), "malformed message");
}

TEST(ManifestHeader, EmptyMessageIsMalformed) { ExpectCorrupt(WithHeader(""), "malformed message"); }

TEST(ManifestHeader, MessageOfPartialWordsIsCorrupt) {
  ExpectCorrupt(WithHeader("abc"), "not a whole number of words");
}

// ---- Data files ---------------------------------------------------------------------------------------------------

TEST(ManifestFiles, AbsoluteNameIsRefused) { ExpectBadFileName("/etc/passwd", "is absolute"); }
TEST(ManifestFiles, ParentComponentIsRefused) { ExpectBadFileName("../x", "component '..'"); }
TEST(ManifestFiles, EscapeThroughDataIsRefused) { ExpectBadFileName("data/../../etc/passwd", "component '..'"); }
TEST(ManifestFiles, EmptyComponentIsRefused) { ExpectBadFileName("data//x.bin", "component ''"); }
TEST(ManifestFiles, DotComponentIsRefused) { ExpectBadFileName("data/./x.bin", "component '.'"); }
TEST(ManifestFiles, NameOutsideDataIsRefused) { ExpectBadFileName("x.bin", "not under data/"); }
TEST(ManifestFiles, DataDirectoryItselfIsRefused) { ExpectBadFileName("data", "not under data/"); }
TEST(ManifestFiles, NulInNameIsRefused) { ExpectBadFileName(std::string("data/x\0y", 8), "NUL"); }
TEST(ManifestFiles, OverlongNameIsRefused) { ExpectBadFileName("data/" + std::string(5000, 'x'), "5005 bytes"); }
TEST(ManifestFiles, DuplicateNameIsRefused) { ExpectBadFileName("data/0-0.bin", "listed twice"); }

// ---- Incremental checkpoints: files of sibling checkpoints, block digests ---------------------------------------

// The sample with its second file moved to the sibling checkpoint "step-1" and digests for the matrix's two rows.
Manifest IncrementalSample() {
  Manifest m = SampleManifest();
  m.files[1].checkpoint = "step-1";
  m.format_major = FormatMajorFor(m);
  m.tensors[1].digests = {BoxDigests{Box{{0, 0}, {4, 6}}, 64, std::string(kDigestBytes * 2, 'd')}};
  return m;
}

TEST(ManifestReferences, AFileOfAnotherCheckpointMakesFormat2AndRoundTrips) {
  const Manifest sample = IncrementalSample();
  EXPECT_EQ(sample.format_major, 2u);
  const Manifest m = DecodeManifest(EncodeManifest(sample).value(), kOrigin).value();
  EXPECT_EQ(m.format_major, 2u);
  EXPECT_EQ(m.files[0].checkpoint, "");
  EXPECT_EQ(m.files[1].checkpoint, "step-1");
  ASSERT_EQ(m.tensors[1].digests.size(), 1u);
  EXPECT_EQ(m.tensors[1].digests[0].box, (Box{{0, 0}, {4, 6}}));
  EXPECT_EQ(m.tensors[1].digests[0].block_size, 64u);
  EXPECT_EQ(m.tensors[1].digests[0].sha256, std::string(kDigestBytes * 2, 'd'));
  EXPECT_EQ(DataFilePath("/r/step-2", m.files[1]), "/r/step-1/data/1-0.bin");
  EXPECT_EQ(DataFileRoot("/r/step-2", m.files[1]), "/r");
  EXPECT_EQ(DataFilePath("/r/step-2", m.files[0]), "/r/step-2/data/0-0.bin");
}

TEST(ManifestReferences, TheSameNameInTwoCheckpointsIsTwoFiles) {
  Manifest m = IncrementalSample();
  m.files[1].name = m.files[0].name;
  EXPECT_TRUE(DecodeManifest(EncodeManifest(m).value(), kOrigin).ok());
}

TEST(ManifestReferences, Format1MayNotReferToAnotherCheckpoint) {
  HostileManifest hostile;
  hostile.root().getFiles()[1].setCheckpoint("step-1");
  ExpectCorrupt(hostile.File(), "format 1 cannot refer to another checkpoint's files");
}

void ExpectBadCheckpointName(const std::string& name) {
  HostileManifest m;
  m.root().setFormatMajor(2);
  m.root().getFiles()[1].setCheckpoint(kj::StringPtr(name.c_str(), name.size()));
  ExpectCorrupt(m.File(2, 0), "is not one plain name of a sibling directory");
}

TEST(ManifestReferences, ACheckpointNameMustBeOnePlainName) {
  ExpectBadCheckpointName("..");
  ExpectBadCheckpointName(".");
  ExpectBadCheckpointName("a/b");
  ExpectBadCheckpointName("/etc");
  ExpectBadCheckpointName("step-1/");
}

TEST(ManifestReferences, DigestsOfAnotherCountOrBoxAreCorrupt) {
  Manifest short_digests = IncrementalSample();
  short_digests.tensors[1].digests[0].sha256.resize(kDigestBytes);
  Result<std::string> encoded = EncodeManifest(short_digests);
  ASSERT_FALSE(encoded.ok());
  EXPECT_NE(encoded.status().message().find("32 digest bytes for 2 blocks"), std::string::npos)
      << encoded.status().message();
  Manifest outside = IncrementalSample();
  outside.tensors[1].digests[0].box = Box{{2, 0}, {4, 6}};
  encoded = EncodeManifest(outside);
  ASSERT_FALSE(encoded.ok());
  EXPECT_NE(encoded.status().message().find("outside the tensor's shape"), std::string::npos)
      << encoded.status().message();
}

// ---- Compressed bytes (format 3) ----------------------------------------------------------------------------------

// The sample with chunk 0 of the matrix compressed (F32: its 32- and 16-byte blocks stored in 20 and 16 bytes) and
// the first object piece compressed ungrouped, its one block stored raw.
Manifest CompressedSample() {
  Manifest m = SampleManifest();
  StoredBytes& chunk = m.tensors[1].chunks[0].bytes;
  chunk.codec = static_cast<uint8_t>(io::Codec::kZstd);
  chunk.byte_groups = 4;
  chunk.stored_sizes = {20, 16};
  StoredBytes& piece = m.objects[0].pieces[0].bytes;
  piece.codec = static_cast<uint8_t>(io::Codec::kZstd);
  piece.byte_groups = 1;
  piece.stored_sizes = {10};
  m.format_major = FormatMajorFor(m);
  return m;
}

schema::StoredBytes::Builder CompressedChunk(HostileManifest& m) { return m.chunk(0).getBytes(); }

TEST(ManifestCompressed, CompressedBytesRoundTripWithTheirCodecGroupingAndStoredSizes) {
  const std::string file = EncodeManifest(CompressedSample()).value();
  const Manifest m = DecodeManifest(file, kOrigin).value();
  EXPECT_EQ(m.format_major, 3u);
  const StoredBytes& chunk = m.tensors[1].chunks[0].bytes;
  EXPECT_EQ(chunk.codec, 1u);
  EXPECT_EQ(chunk.byte_groups, 4u);
  EXPECT_EQ(chunk.stored_sizes.values(), (std::vector<uint32_t>{20, 16}));
  EXPECT_EQ(chunk.byte_length, 48u);
  EXPECT_EQ(chunk.block_checksums, (std::vector<uint64_t>{0x1000, 0x1001}));
  const StoredBytes& piece = m.objects[0].pieces[0].bytes;
  EXPECT_EQ(piece.codec, 1u);
  EXPECT_EQ(piece.byte_groups, 1u);
  EXPECT_EQ(piece.stored_sizes.values(), (std::vector<uint32_t>{10}));
  EXPECT_FALSE(IsCompressed(m.tensors[1].chunks[1].bytes));
  EXPECT_TRUE(m.tensors[1].chunks[1].bytes.stored_sizes.empty());
  EXPECT_EQ(EncodeManifest(m).value(), file);
}

TEST(ManifestCompressed, ChunksDecodedOnDemandKeepTheirStoredSizes) {
  Result<ManifestWithoutChunks> read = DecodeManifestWithoutChunks(EncodeManifest(CompressedSample()).value(), kOrigin);
  ASSERT_TRUE(read.ok()) << read.status().message();
  ASSERT_TRUE(read->chunks->DecodeInto(read->manifest, {1}).ok());
  const StoredBytes& chunk = read->manifest.tensors[1].chunks[0].bytes;
  EXPECT_EQ(chunk.codec, 1u);
  EXPECT_EQ(chunk.byte_groups, 4u);
  EXPECT_EQ(chunk.stored_sizes.values(), (std::vector<uint32_t>{20, 16}));
}

TEST(ManifestCompressed, FormatMajorIsThreeWithCompressedBytesTwoWithReferencesOnlyOneOtherwise) {
  EXPECT_EQ(FormatMajorFor(SampleManifest()), 1u);
  EXPECT_EQ(FormatMajorFor(IncrementalSample()), 2u);
  EXPECT_EQ(FormatMajorFor(CompressedSample()), 3u);
  Manifest both = CompressedSample();
  both.files[1].checkpoint = "step-1";
  EXPECT_EQ(FormatMajorFor(both), 3u);
  Manifest common = SampleManifest();
  common.common[1].stored.codec = 1;
  common.common[1].stored.byte_groups = 1;
  common.common[1].stored.stored_sizes = {32, 32, 32, 4};
  EXPECT_EQ(FormatMajorFor(common), 3u);
  EXPECT_EQ(kFormatMajorCompressed, 3u);
}

// As format 1 may not refer to another checkpoint's files: a library that reads format 2 but has no codec must be
// told by the major, not by failing checksums.
TEST(ManifestCompressed, AnUnknownCodecIsRefused) {
  HostileManifest m(CompressedSample());
  CompressedChunk(m).setCodec(2);
  ExpectCorrupt(m.File(3), "tensor 'w': chunk 0: unknown codec 2");
}

TEST(ManifestCompressed, AnInvalidByteGroupingIsRefused) {
  HostileManifest m(CompressedSample());
  CompressedChunk(m).setByteGroups(3);
  ExpectCorrupt(m.File(3), "tensor 'w': chunk 0: byte grouping 3 is none of 1, 2, 4 and 8");
}

TEST(ManifestCompressed, AByteGroupingOfZeroIsRefused) {
  HostileManifest m(CompressedSample());
  CompressedChunk(m).setByteGroups(0);
  ExpectCorrupt(m.File(3), "byte grouping 0 is none of 1, 2, 4 and 8");
}

TEST(ManifestCompressed, AStoredSizeCountOtherThanTheBlockCountIsRefused) {
  HostileManifest m(CompressedSample());
  auto sizes = CompressedChunk(m).initStoredSizes(3);
  for (unsigned i = 0; i < 3; ++i) sizes.set(i, 10);
  ExpectCorrupt(m.File(3), "tensor 'w': chunk 0: 3 stored sizes for 2 blocks");
}

TEST(ManifestCompressed, AStoredSizeLargerThanItsBlockIsRefused) {
  HostileManifest m(CompressedSample());
  CompressedChunk(m).getStoredSizes().set(1, 17);  // block 1 holds the last 16 of 48 bytes
  ExpectCorrupt(m.File(3), "tensor 'w': chunk 0: block 1 of 16 bytes is stored in 17");
}

TEST(ManifestCompressed, AStoredSizeOfZeroForANonEmptyBlockIsRefused) {
  HostileManifest m(CompressedSample());
  CompressedChunk(m).getStoredSizes().set(0, 0);
  ExpectCorrupt(m.File(3), "tensor 'w': chunk 0: block 0 of 32 bytes is stored in 0");
}

TEST(ManifestCompressed, StoredSizesOnUncompressedBytesAreRefused) {
  HostileManifest m;
  auto sizes = m.chunk(1).getBytes().initStoredSizes(2);
  sizes.set(0, 32);
  sizes.set(1, 16);
  ExpectCorrupt(m.File(), "tensor 'w': chunk 1: stored sizes for bytes that are not compressed");
}

// Chunk 0 takes 36 bytes of 'data/0-0.bin' (8192 bytes), though it holds 48.
TEST(ManifestCompressed, ACompressedRangeEndingAtItsFilesEndIsAccepted) {
  HostileManifest m(CompressedSample());
  CompressedChunk(m).setFileOffset(8192 - 36);
  const Result<Manifest> decoded = DecodeManifest(m.File(3), kOrigin);
  EXPECT_TRUE(decoded.ok()) << decoded.status().message();
}

TEST(ManifestCompressed, ACompressedRangePastItsFilesEndIsRefusedWithItsStoredLength) {
  HostileManifest m(CompressedSample());
  CompressedChunk(m).setFileOffset(8192 - 35);
  ExpectCorrupt(m.File(3),
                "tensor 'w': chunk 0: byte range [8157, +36) is past the end of 'data/0-0.bin' (8192 bytes)");
}

TEST(ManifestCompressed, StoredLengthIsTheSumOfTheStoredSizesOrTheByteLength) {
  const Manifest m = CompressedSample();
  EXPECT_EQ(StoredLength(m.tensors[1].chunks[0].bytes), 36u);
  EXPECT_EQ(StoredLength(m.tensors[1].chunks[1].bytes), 48u);
  EXPECT_EQ(StoredLength(m.objects[0].pieces[0].bytes), 10u);
}

TEST(ManifestCompressed, StoredBlockOffsetIsWhereEachBlocksStoredFormStarts) {
  const Manifest m = CompressedSample();
  const StoredBytes& chunk = m.tensors[1].chunks[0].bytes;
  EXPECT_EQ(StoredBlockOffset(chunk, 0), 4096u);
  EXPECT_EQ(StoredBlockOffset(chunk, 1), 4096u + 20);
  EXPECT_EQ(StoredBlockOffset(chunk, 2), 4096u + 36);
}

// ---- Tensors ------------------------------------------------------------------------------------------------------

// Rows 0-1 split at column 2, rows 2-3 at column 4: no chunk boundary lines up across the whole tensor.
TEST(ManifestTensors, StaggeredChunksThatTileAreAccepted) {
  Manifest m = SampleManifest();
  m.tensors[1].chunks = {
      ChunkRecord{Box{{0, 0}, {2, 2}}, Stored(0, 4096, 16)}, ChunkRecord{Box{{0, 2}, {2, 4}}, Stored(0, 4112, 32)},
      ChunkRecord{Box{{2, 0}, {2, 4}}, Stored(1, 0, 32)}, ChunkRecord{Box{{2, 4}, {2, 2}}, Stored(1, 32, 16)}};
  Result<std::string> file = EncodeManifest(m);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_TRUE(DecodeManifest(file.value(), kOrigin).ok());
}

TEST(ManifestTensors, EmptyTensorWithoutChunksIsAccepted) {
  Manifest m = SampleManifest();
  m.tensors[1].shape = {0, 6};
  m.tensors[1].chunks.clear();
  Result<std::string> file = EncodeManifest(m);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_TRUE(DecodeManifest(file.value(), kOrigin).ok());
}

TEST(ManifestTensors, ChunkOutsideTheTensorIsRefused) {
  HostileManifest m;
  m.chunk(1).setOffset(Words({3, 0}));
  ExpectCorrupt(m.File(), "tensor 'w': chunk 1: box [3:5, 0:6] is outside the tensor's shape [4, 6]");
}

TEST(ManifestTensors, OverlappingChunksAreRefused) {
  HostileManifest m;
  m.chunk(1).setOffset(Words({1, 0}));
  ExpectCorrupt(m.File(), "tensor 'w': chunks 0 and 1 overlap");
}

TEST(ManifestTensors, OverlapAcrossStaggeredChunksIsRefused) {
  HostileManifest m;
  m.chunk(0).setShape(Words({2, 3}));
  m.chunk(0).getBytes().setByteLength(24);
  m.chunk(0).getBytes().initBlockChecksums(1);
  m.chunk(1).setOffset(Words({1, 2}));
  m.chunk(1).setShape(Words({3, 4}));
  ExpectCorrupt(m.File(), "tensor 'w': chunks 0 and 1 overlap in [1:2, 2:3]");
}

TEST(ManifestTensors, GapBetweenChunksIsRefused) {
  HostileManifest m;
  m.chunk(1).setShape(Words({1, 6}));
  m.chunk(1).getBytes().setByteLength(24);
  m.chunk(1).getBytes().initBlockChecksums(1);
  ExpectCorrupt(m.File(), "tensor 'w': chunks cover 18 of 24 elements");
}

TEST(ManifestTensors, ByteLengthDifferentFromVolumeIsRefused) {
  HostileManifest m;
  m.chunk(0).getBytes().setByteLength(40);
  ExpectCorrupt(m.File(), "tensor 'w': chunk 0: byte length 40 differs from 48");
}

TEST(ManifestTensors, ByteRangePastTheFileIsRefused) {
  HostileManifest m;
  m.chunk(0).getBytes().setFileOffset(8192 - 47);
  ExpectCorrupt(m.File(), "past the end of 'data/0-0.bin' (8192 bytes)");
}

TEST(ManifestTensors, ByteRangeThatOverflowsIsRefused) {
  HostileManifest m;
  m.chunk(0).getBytes().setFileOffset(UINT64_MAX - 10);
  ExpectCorrupt(m.File(), "past the end of 'data/0-0.bin'");
}

TEST(ManifestTensors, FileIndexOutOfRangeIsRefused) {
  HostileManifest m;
  m.chunk(0).getBytes().setFileIndex(2);
  ExpectCorrupt(m.File(), "file index 2 out of range");
}

TEST(ManifestTensors, ChecksumCountMismatchIsRefused) {
  HostileManifest m;
  m.chunk(0).getBytes().initBlockChecksums(3);
  ExpectCorrupt(m.File(), "chunk 0: 3 block checksums for 2 blocks");
}

TEST(ManifestTensors, ZeroBlockSizeIsRefused) {
  HostileManifest m;
  m.chunk(0).getBytes().setBlockSize(0);
  ExpectCorrupt(m.File(), "block size is 0");
}

TEST(ManifestTensors, UnknownDtypeIsRefused) {
  HostileManifest m;
  m.matrix().setDtype(99);
  ExpectCorrupt(m.File(), "tensor 'w': dtype 99 is not a known dtype");
}

TEST(ManifestTensors, NineDimensionsAreRefused) {
  HostileManifest m;
  m.matrix().setShape(Words(Shape(9, 1)));
  ExpectCorrupt(m.File(), "tensor 'w': ndim 9 exceeds the maximum of 8");
}

TEST(ManifestTensors, ChunkRankDifferentFromTensorIsRefused) {
  HostileManifest m;
  m.chunk(0).setOffset(Words({0}));
  ExpectCorrupt(m.File(), "chunk 0: offset has 1 and shape 2 dimensions, the tensor has 2");
}

TEST(ManifestTensors, OverflowingShapeIsRefused) {
  HostileManifest m;
  m.matrix().setShape(Words({1ull << 40, 1ull << 30}));
  ExpectCorrupt(m.File(), "overflows 64 bits");
}

TEST(ManifestTensors, ScalarWithTwoChunksIsRefused) {
  HostileManifest m;
  auto scalar = m.root().getTensors()[0];
  auto chunks = scalar.initChunks(2);
  for (unsigned i = 0; i < 2; ++i) {
    chunks[i].getBytes().setByteLength(4);
    chunks[i].getBytes().setBlockSize(32);
    chunks[i].getBytes().initBlockChecksums(1);
  }
  ExpectCorrupt(m.File(), "tensor 'a.scalar': chunks 0 and 1 both hold the scalar");
}

TEST(ManifestTensors, UnsortedKeysAreRefused) {
  HostileManifest m;
  m.root().getTensors()[0].setKey("z");
  ExpectCorrupt(m.File(), "tensor keys are not sorted and unique: 'z' comes before 'w'");
}

TEST(ManifestTensors, DuplicateKeysAreRefused) {
  HostileManifest m;
  m.root().getTensors()[0].setKey("w");
  ExpectCorrupt(m.File(), "not sorted and unique");
}

// ---- Objects, common, world ---------------------------------------------------------------------------------------

TEST(ManifestObjects, PieceOutsideTheGridIsRefused) {
  HostileManifest m;
  m.root().getObjects()[0].getPieces()[1].setIndex(Words({2}));
  ExpectCorrupt(m.File(), "object 'opt': piece 1: index [2] is outside the grid [2]");
}

TEST(ManifestObjects, TwoPiecesForOneCellAreRefused) {
  HostileManifest m;
  m.root().getObjects()[0].getPieces()[1].setIndex(Words({0}));
  ExpectCorrupt(m.File(), "object 'opt': piece 1: index [0] appears twice");
}

TEST(ManifestObjects, PieceCountDifferentFromGridIsRefused) {
  HostileManifest m;
  m.root().getObjects()[0].setGridShape(Words({3}));
  ExpectCorrupt(m.File(), "object 'opt': 2 pieces for a grid of shape [3]");
}

TEST(ManifestCommon, StoredCommonPastTheFileIsRefused) {
  HostileManifest m;
  m.root().getCommon()[1].getStored().setByteLength(10000);
  m.root().getCommon()[1].getStored().initBlockChecksums(313);
  ExpectCorrupt(m.File(), "common 'rng': byte range");
}

TEST(ManifestWorld, ZeroWorldSizeIsRefused) {
  HostileManifest m;
  m.root().setWorldSize(0);
  ExpectCorrupt(m.File(), "world size is 0");
}

// ---- Chunks decoded on demand (DecodeManifestWithoutChunks) --------------------------------------------------------

void ExpectSameChunks(const std::vector<ChunkRecord>& a, const std::vector<ChunkRecord>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].box, b[i].box) << "chunk " << i;
    EXPECT_EQ(std::make_tuple(a[i].bytes.file_index, a[i].bytes.file_offset, a[i].bytes.byte_length,
                              a[i].bytes.block_size, a[i].bytes.block_checksums),
              std::make_tuple(b[i].bytes.file_index, b[i].bytes.file_offset, b[i].bytes.byte_length,
                              b[i].bytes.block_size, b[i].bytes.block_checksums))
        << "chunk " << i;
  }
}

TEST(ManifestWithoutChunks, HoldsAllButTheChunksAndDecodesThoseAskedForAsTheWholeDecodeDoes) {
  const std::string file = EncodeManifest(SampleManifest()).value();
  const Manifest whole = DecodeManifest(file, kOrigin).value();
  Result<ManifestWithoutChunks> read = DecodeManifestWithoutChunks(file, kOrigin);
  ASSERT_TRUE(read.ok()) << read.status().message();
  Manifest& m = read->manifest;
  EXPECT_EQ(m.checkpoint_id, whole.checkpoint_id);
  EXPECT_EQ(m.metadata, whole.metadata);
  ASSERT_EQ(m.files.size(), whole.files.size());
  ASSERT_EQ(m.objects.size(), 1u);
  EXPECT_EQ(m.objects[0].pieces.size(), 2u);
  ASSERT_EQ(m.common.size(), 2u);
  ASSERT_EQ(m.tensors.size(), 2u);
  for (size_t t = 0; t < m.tensors.size(); ++t) {
    EXPECT_EQ(m.tensors[t].key, whole.tensors[t].key);
    EXPECT_EQ(m.tensors[t].dtype, whole.tensors[t].dtype);
    EXPECT_EQ(m.tensors[t].shape, whole.tensors[t].shape);
    EXPECT_TRUE(m.tensors[t].chunks.empty()) << "tensor " << t << " decoded before it was asked for";
  }
  ASSERT_TRUE(read->chunks->DecodeInto(m, {1}).ok());
  EXPECT_EQ(read->chunks->decoded_count(), 1u);
  EXPECT_TRUE(m.tensors[0].chunks.empty());
  ExpectSameChunks(m.tensors[1].chunks, whole.tensors[1].chunks);
  ASSERT_TRUE(read->chunks->DecodeInto(m, {1, 0, 0}).ok());
  EXPECT_EQ(read->chunks->decoded_count(), 2u) << "a tensor asked for again is decoded once";
  ExpectSameChunks(m.tensors[0].chunks, whole.tensors[0].chunks);
  ExpectSameChunks(m.tensors[1].chunks, whole.tensors[1].chunks);
}

TEST(ManifestWithoutChunks, BadChunksAreRefusedWhenTheirTensorIsDecodedNamingFileAndTensor) {
  HostileManifest hostile;
  hostile.chunk(1).setOffset(Words({1, 0}));
  Result<ManifestWithoutChunks> read = DecodeManifestWithoutChunks(hostile.File(), kOrigin);
  ASSERT_TRUE(read.ok()) << "only the tensors' chunks are bad, and they are not decoded yet";
  Manifest& m = read->manifest;
  EXPECT_TRUE(read->chunks->DecodeInto(m, {0}).ok()) << "another tensor's chunks are sound";
  for (int attempt = 0; attempt < 2; ++attempt) {
    const Status refused = read->chunks->DecodeInto(m, {1});
    EXPECT_EQ(refused.code(), Code::kCorrupt) << "attempt " << attempt;
    EXPECT_EQ(refused.message().rfind(kOrigin, 0), 0u) << refused.message();
    EXPECT_NE(refused.message().find("tensor 'w': chunks 0 and 1 overlap"), std::string::npos) << refused.message();
    EXPECT_TRUE(m.tensors[1].chunks.empty()) << "records that failed their checks are not kept";
  }
  EXPECT_EQ(read->chunks->decoded_count(), 1u);
}

TEST(ManifestWithoutChunks, EverythingButTheChunksIsCheckedAtOnce) {
  HostileManifest dtype;
  dtype.matrix().setDtype(99);
  Result<ManifestWithoutChunks> read = DecodeManifestWithoutChunks(dtype.File(), kOrigin);
  EXPECT_EQ(read.status().code(), Code::kCorrupt);
  EXPECT_NE(read.status().message().find("tensor 'w': dtype 99 is not a known dtype"), std::string::npos)
      << read.status().message();
  HostileManifest file_name;
  file_name.root().getFiles()[1].setName("../x");
  EXPECT_EQ(DecodeManifestWithoutChunks(file_name.File(), kOrigin).status().code(), Code::kCorrupt);
  std::string flipped = EncodeManifest(SampleManifest()).value();
  flipped[flipped.size() - 3] ^= 1;
  read = DecodeManifestWithoutChunks(flipped, kOrigin);
  EXPECT_EQ(read.status().code(), Code::kCorrupt);
  EXPECT_NE(read.status().message().find("checksum mismatch"), std::string::npos) << read.status().message();
}

TEST(ManifestWithoutChunks, ATensorOutOfRangeIsAnInvalidArgument) {
  Result<ManifestWithoutChunks> read = DecodeManifestWithoutChunks(EncodeManifest(SampleManifest()).value(), kOrigin);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->chunks->DecodeInto(read->manifest, {2}).code(), Code::kInvalidArgument);
}

TEST_F(ManifestDirTest, ReadWithoutChunksNamesTheDirectoryWhenTheManifestIsMissing) {
  Result<ManifestWithoutChunks> read = ReadManifestWithoutChunks(dir());
  EXPECT_EQ(read.status().code(), Code::kNotFound);
  EXPECT_EQ(read.status().message(), "no checkpoint at " + dir() + " (MANIFEST missing)");
  ASSERT_TRUE(WriteManifest(dir(), SampleManifest()).ok());
  read = ReadManifestWithoutChunks(dir());
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->manifest.checkpoint_id, "save-42");
}

}  // namespace
}  // namespace ckpt::runtime

// Format 4: a manifest whose tensors' chunk records lie in sections after its first message, each read and checked
// only when a rank asks for its tensor (runtime/format/manifest.h).
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>

#include "io/checksum.h"
#include "io/file_io.h"
#include "manifest.capnp.h"
#include "runtime/core/dtype.h"
#include "runtime/format/manifest.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::runtime {
namespace {

constexpr size_t kHeaderBytes = 32;
const char kOrigin[] = "/ckpt/step-9/MANIFEST";
const int32_t kF32 = static_cast<int32_t>(DType::kF32);
constexpr uint64_t kBigChunks = 600;  // three sections of up to kChunksPerSection

StoredBytes Stored(uint64_t offset, uint64_t length) {
  StoredBytes s;
  s.file_offset = offset;
  s.byte_length = length;
  s.block_size = 1 << 20;
  s.block_checksums = {0x5000 + offset};
  return s;
}

// "a": one chunk; "big": kBigChunks chunks of one element; "c": two chunks and the digests of the box saved whole.
Manifest SectionedSample() {
  Manifest m;
  m.format_major = kFormatMajorWithSections;
  m.library_version = "0.1.0";
  m.checkpoint_id = "save-9";
  m.world_size = 4;
  m.node_count = 1;
  m.files = {{"data/0-0.bin", 1 << 20}};
  m.tensors.push_back(TensorRecord{"a", kF32, {3}, {ChunkRecord{Box{{0}, {3}}, Stored(0, 12)}}});
  TensorRecord big{"big", kF32, {kBigChunks}, {}};
  for (uint64_t i = 0; i < kBigChunks; ++i) big.chunks.push_back(ChunkRecord{Box{{i}, {1}}, Stored(4096 + 4 * i, 4)});
  m.tensors.push_back(std::move(big));
  m.tensors.push_back(TensorRecord{
      "c",
      kF32,
      {2, 2},
      {ChunkRecord{Box{{0, 0}, {1, 2}}, Stored(8192, 8)}, ChunkRecord{Box{{1, 0}, {1, 2}}, Stored(8200, 8)}},
      {BoxDigests{Box{{0, 0}, {2, 2}}, 4096, std::string(kDigestBytes, 'd')}}});
  return m;
}

std::string Encoded(const Manifest& m = SectionedSample()) { return EncodeManifest(m).value(); }

uint64_t MessageEnd(const std::string& file) {
  uint64_t length = 0;
  std::memcpy(&length, file.data() + 16, sizeof length);
  return kHeaderBytes + length;
}

void PutLittleEndian(std::string* out, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out->push_back(static_cast<char>(value >> (8 * i)));
}

// `file` with its first message changed by `change` and its header resealed; the sections after it are kept.
std::string WithFirstMessage(const std::string& file, const std::function<void(schema::Manifest::Builder)>& change,
                             uint32_t major = kFormatMajorWithSections) {
  const uint64_t end = MessageEnd(file);
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>((end - kHeaderBytes) / sizeof(capnp::word));
  std::memcpy(words.begin(), file.data() + kHeaderBytes, end - kHeaderBytes);
  capnp::FlatArrayMessageReader reader(words.asPtr());
  capnp::MallocMessageBuilder builder;
  builder.setRoot(reader.getRoot<schema::Manifest>());
  builder.getRoot<schema::Manifest>().setFormatMajor(major);
  change(builder.getRoot<schema::Manifest>());
  const kj::Array<capnp::word> out = capnp::messageToFlatArray(builder);
  const std::string message(reinterpret_cast<const char*>(out.asBytes().begin()), out.asBytes().size());
  std::string resealed = "CKPTMNFS";
  PutLittleEndian(&resealed, major, 4);
  PutLittleEndian(&resealed, kFormatMinor, 4);
  PutLittleEndian(&resealed, message.size(), 8);
  PutLittleEndian(&resealed, io::Checksum(message.data(), message.size()), 8);
  return resealed + message + file.substr(end);
}

Status DecodeEvery(const std::string& file) { return DecodeManifest(file, kOrigin).status(); }

void ExpectCorrupt(const Status& status, const std::string& fragment) {
  ASSERT_FALSE(status.ok()) << "accepted; expected an error containing: " << fragment;
  EXPECT_EQ(status.code(), Code::kCorrupt) << status.message();
  EXPECT_EQ(status.message().rfind(kOrigin, 0), 0u) << status.message();
  EXPECT_NE(status.message().find(fragment), std::string::npos) << status.message();
}

TEST(ManifestSections, AManifestOfManyChunksIsWrittenInSections) {
  Manifest m = SectionedSample();
  m.tensors.resize(2);
  m.tensors[1].chunks.resize(kSectionedFromChunks - 1);  // with "a"'s: kSectionedFromChunks
  m.tensors[1].shape = {kSectionedFromChunks - 1};
  EXPECT_EQ(FormatMajorFor(m), kFormatMajorWithSections);
  m.tensors[1].chunks.pop_back();
  EXPECT_EQ(FormatMajorFor(m), kFormatMajorWithoutReferences);
}

TEST(ManifestSections, ASectionedManifestRoundTripsAndReencodesToTheSameBytes) {
  const std::string file = Encoded();
  Result<Manifest> decoded = DecodeManifest(file, kOrigin);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  ASSERT_EQ(decoded->tensors.size(), 3u);
  EXPECT_EQ(decoded->format_major, kFormatMajorWithSections);
  ASSERT_EQ(decoded->tensors[1].chunks.size(), kBigChunks);
  for (uint64_t i = 0; i < kBigChunks; ++i) {
    EXPECT_EQ(decoded->tensors[1].chunks[i].box.offset, Shape{i});
    EXPECT_EQ(decoded->tensors[1].chunks[i].bytes.file_offset, 4096 + 4 * i);
  }
  ASSERT_EQ(decoded->tensors[2].digests.size(), 1u);
  EXPECT_EQ(decoded->tensors[2].digests[0].sha256, std::string(kDigestBytes, 'd'));
  EXPECT_EQ(Encoded(*decoded), file);
}

TEST(ManifestSections, TheFirstMessageHoldsNoChunksAndATensorReadsOnlyItsOwnSections) {
  const std::string file = Encoded();
  Result<ManifestWithoutChunks> read = DecodeManifestWithoutChunks(file, kOrigin);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->chunks->file_bytes_read(), MessageEnd(file));
  ASSERT_TRUE(read->chunks->DecodeInto(read->manifest, {2}).ok());
  const uint64_t after_c = read->chunks->file_bytes_read();
  EXPECT_GT(after_c, MessageEnd(file));
  EXPECT_TRUE(read->manifest.tensors[1].chunks.empty());
  ASSERT_EQ(read->manifest.tensors[2].chunks.size(), 2u);
  EXPECT_EQ(read->manifest.tensors[2].digests.size(), 1u);
  // "big"'s three sections are most of the file, and "c" read none of them.
  ASSERT_TRUE(read->chunks->DecodeInto(read->manifest, {1, 1}).ok());
  EXPECT_EQ(read->manifest.tensors[1].chunks.size(), kBigChunks);
  EXPECT_GT(read->chunks->file_bytes_read() - after_c, (file.size() - MessageEnd(file)) / 2);
  ASSERT_TRUE(read->chunks->DecodeInto(read->manifest, {0}).ok());
  EXPECT_EQ(read->chunks->file_bytes_read(), file.size());
  EXPECT_EQ(read->chunks->decoded_count(), 3u);
}

using ManifestSectionsDirTest = testing::TempDirTest;

TEST_F(ManifestSectionsDirTest, ReadingFromADirectoryReadsOnlyTheSectionsAskedFor) {
  const std::string file = Encoded();
  ASSERT_TRUE(WriteManifest(dir(), SectionedSample()).ok());
  Result<ManifestWithoutChunks> read = ReadManifestWithoutChunks(dir());
  ASSERT_TRUE(read.ok()) << read.status().message();
  ASSERT_TRUE(read->chunks->DecodeInto(read->manifest, {0}).ok());
  EXPECT_EQ(read->manifest.tensors[0].chunks.size(), 1u);
  EXPECT_LT(read->chunks->file_bytes_read(), file.size() / 4);
  Result<Manifest> whole = ReadManifest(dir());
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ(whole->tensors[1].chunks.size(), kBigChunks);
}

TEST_F(ManifestSectionsDirTest, AManifestLargerThanTheLimitIsRefusedBeforeAnythingIsRead) {
  const std::string path = io::JoinPath(dir(), kManifestName);
  std::FILE* file = std::fopen(path.c_str(), "w");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(ftruncate(fileno(file), static_cast<off_t>(kMaxManifestBytes + 1)), 0);  // sparse: nothing to read
  std::fclose(file);
  for (const Status& status : {ReadManifest(dir()).status(), ReadManifestWithoutChunks(dir()).status()}) {
    EXPECT_EQ(status.code(), Code::kCorrupt) << status.message();
    EXPECT_NE(status.message().find("more than the limit of " + std::to_string(kMaxManifestBytes)), std::string::npos)
        << status.message();
  }
}

TEST_F(ManifestSectionsDirTest, AnOlderFormatIsReadWholeFromADirectory) {
  Manifest m = SectionedSample();
  m.format_major = FormatMajorFor(m);
  ASSERT_EQ(m.format_major, kFormatMajorWithoutReferences);
  ASSERT_TRUE(WriteManifest(dir(), m).ok());
  Result<ManifestWithoutChunks> read = ReadManifestWithoutChunks(dir());
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->chunks->file_bytes_read(), Encoded(m).size());
  ASSERT_TRUE(read->chunks->DecodeInto(read->manifest, {1, 2}).ok());
  EXPECT_EQ(read->manifest.tensors[1].chunks.size(), kBigChunks);
  EXPECT_EQ(read->manifest.tensors[2].digests.size(), 1u);
}

TEST(ManifestSections, ADamagedSectionIsRefusedNamingItsTensorWhenThatTensorIsRead) {
  std::string file = Encoded();
  file[file.size() - 9] ^= 0x40;  // inside "c"'s section, the last
  Result<ManifestWithoutChunks> read = DecodeManifestWithoutChunks(file, kOrigin);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_TRUE(read->chunks->DecodeInto(read->manifest, {0, 1}).ok());
  const Status c = read->chunks->DecodeInto(read->manifest, {2});
  ExpectCorrupt(c, "chunk section 4 (tensor 2, chunks from 0) of tensor 'c': checksum mismatch");
  EXPECT_TRUE(read->manifest.tensors[2].chunks.empty());
  EXPECT_TRUE(read->manifest.tensors[2].digests.empty());
  ExpectCorrupt(DecodeEvery(file), "checksum mismatch");
}

TEST(ManifestSections, CutSectionsAreTruncatedAtOpen) {
  const std::string file = Encoded();
  ExpectCorrupt(DecodeManifestWithoutChunks(file.substr(0, file.size() - 8), kOrigin).status(),
                "truncated: chunk section 4");
  ExpectCorrupt(DecodeManifestWithoutChunks(file.substr(0, MessageEnd(file)), kOrigin).status(),
                "truncated: chunk section 0");
}

TEST(ManifestSections, BytesAfterTheLastSectionAreRefused) {
  ExpectCorrupt(DecodeManifestWithoutChunks(Encoded() + std::string(8, '\0'), kOrigin).status(),
                "8 trailing bytes after the chunk sections");
}

TEST(ManifestSections, AnIndexNamingATensorThatIsNotThereIsRefused) {
  const std::string file =
      WithFirstMessage(Encoded(), [](schema::Manifest::Builder m) { m.getChunkSections()[4].setTensor(7); });
  ExpectCorrupt(DecodeEvery(file), "names tensor 7 of 3");
}

TEST(ManifestSections, SectionsOutOfOrderOrWithAGapAreRefused) {
  ExpectCorrupt(DecodeEvery(WithFirstMessage(
                    Encoded(), [](schema::Manifest::Builder m) { m.getChunkSections()[2].setFirstChunk(300); })),
                "chunk section 2 (tensor 1, chunks from 300) does not follow chunk section 1");
  ExpectCorrupt(DecodeEvery(WithFirstMessage(
                    Encoded(), [](schema::Manifest::Builder m) { m.getChunkSections()[0].setTensor(1); })),
                "chunk section 1 (tensor 1, chunks from 0) does not follow chunk section 0");
}

TEST(ManifestSections, ASectionOfPartialWordsIsRefused) {
  ExpectCorrupt(DecodeEvery(WithFirstMessage(Encoded(),
                                             [](schema::Manifest::Builder m) {
                                               auto s = m.getChunkSections()[0];
                                               s.setLength(s.getLength() - 4);
                                             })),
                "not a whole number of words");
}

TEST(ManifestSections, AChunkCountOtherThanTheIndexsIsRefused) {
  const std::string file = WithFirstMessage(Encoded(), [](schema::Manifest::Builder m) {
    m.getChunkSections()[3].setChunkCount(87);  // "big"'s last section holds 88
  });
  Result<ManifestWithoutChunks> read = DecodeManifestWithoutChunks(file, kOrigin);
  ASSERT_TRUE(read.ok()) << read.status().message();
  ExpectCorrupt(read->chunks->DecodeInto(read->manifest, {1}), "holds 88 chunks, the index says 87");
  EXPECT_TRUE(read->manifest.tensors[1].chunks.empty());
}

TEST(ManifestSections, AnOlderFormatIndexingSectionsIsRefused) {
  const std::string file = Encoded();
  const std::string old = WithFirstMessage(
      file.substr(0, MessageEnd(file)), [](schema::Manifest::Builder) {}, kFormatMajorCompressed);
  ExpectCorrupt(DecodeEvery(old), "format 3.0 has no chunk sections, but the message indexes 5");
}

TEST(ManifestSections, ChunksThatDoNotTileTheirTensorAreRefusedAsBefore) {
  // The last element of "big" has no chunk.
  const std::string file = WithFirstMessage(
      Encoded(), [](schema::Manifest::Builder root) { root.getTensors()[1].getShape().set(0, kBigChunks + 1); });
  ExpectCorrupt(DecodeEvery(file), "tensor 'big'");
}

// The length of section `section` as the file's index records it.
uint64_t SectionLength(const std::string& file, unsigned section) {
  const uint64_t end = MessageEnd(file);
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>((end - kHeaderBytes) / sizeof(capnp::word));
  std::memcpy(words.begin(), file.data() + kHeaderBytes, end - kHeaderBytes);
  capnp::FlatArrayMessageReader reader(words.asPtr());
  return reader.getRoot<schema::Manifest>().getChunkSections()[section].getLength();
}

TEST(ManifestSectionRecords, ARecordIsDecodedWithTheOneSectionHoldingIt) {
  const std::string file = Encoded();
  Result<ManifestWithoutChunks> read = DecodeManifestWithoutChunks(file, kOrigin);
  ASSERT_TRUE(read.ok()) << read.status().message();
  const Status decoded = read->chunks->DecodeRecordsInto(read->manifest, {{1, 300}, {1, 301}});
  ASSERT_TRUE(decoded.ok()) << decoded.message();
  const TensorRecord& big = read->manifest.tensors[1];
  ASSERT_EQ(big.chunks.size(), kBigChunks);
  EXPECT_EQ(big.chunks[300].box.offset, Shape{300});
  EXPECT_EQ(big.chunks[511].bytes.file_offset, 4096 + 4 * 511);  // the rest of section 2 comes with it
  EXPECT_TRUE(big.chunks[0].box.shape.empty());                  // section 1's records are not decoded
  EXPECT_TRUE(big.chunks[512].box.shape.empty());
  EXPECT_EQ(read->chunks->file_bytes_read(), MessageEnd(file) + SectionLength(file, 2));
  EXPECT_EQ(read->chunks->decoded_count(), 0u);
}

TEST(ManifestSectionRecords, DecodingTheWholeTensorCompletesItWithoutReadingItsDecodedSectionsAgain) {
  const std::string file = Encoded();
  Result<ManifestWithoutChunks> read = DecodeManifestWithoutChunks(file, kOrigin);
  ASSERT_TRUE(read.ok()) << read.status().message();
  ASSERT_TRUE(read->chunks->DecodeRecordsInto(read->manifest, {{1, 5}}).ok());
  ASSERT_TRUE(read->chunks->DecodeInto(read->manifest, {1}).ok());
  for (uint64_t i = 0; i < kBigChunks; ++i) ASSERT_EQ(read->manifest.tensors[1].chunks[i].box.offset, Shape{i});
  EXPECT_EQ(read->chunks->file_bytes_read(),
            MessageEnd(file) + SectionLength(file, 1) + SectionLength(file, 2) + SectionLength(file, 3));
  EXPECT_EQ(read->chunks->decoded_count(), 1u);
}

TEST(ManifestSectionRecords, AFormerFormatDecodesTheWholeTensorOfARecord) {
  Manifest m = SectionedSample();
  m.format_major = kFormatMajorWithoutReferences;
  Result<ManifestWithoutChunks> read = DecodeManifestWithoutChunks(Encoded(m), kOrigin);
  ASSERT_TRUE(read.ok()) << read.status().message();
  ASSERT_TRUE(read->chunks->DecodeRecordsInto(read->manifest, {{1, 300}}).ok());
  EXPECT_EQ(read->manifest.tensors[1].chunks[0].box.offset, Shape{0});
  EXPECT_EQ(read->chunks->decoded_count(), 1u);
}

TEST(ManifestSectionRecords, AChunkIndexPastTheTensorDecodesNothingButSizesTheTensor) {
  Result<ManifestWithoutChunks> read = DecodeManifestWithoutChunks(Encoded(), kOrigin);
  ASSERT_TRUE(read.ok()) << read.status().message();
  ASSERT_TRUE(read->chunks->DecodeRecordsInto(read->manifest, {{1, kBigChunks}}).ok());
  EXPECT_EQ(read->manifest.tensors[1].chunks.size(), kBigChunks);  // so that the caller's check says "which has 600"
  EXPECT_EQ(read->chunks->file_bytes_read(), MessageEnd(Encoded()));
  EXPECT_EQ(read->chunks->DecodeRecordsInto(read->manifest, {{3, 0}}).code(), Code::kInvalidArgument);
}

TEST(ManifestSectionRecords, ARecordFailingItsChecksIsRefusedNamingItAndLeavesItsTensorEmpty) {
  // A data file said to hold 5200 bytes: "big"'s first section (to byte 5120) fits, and the section holding chunk 300
  // holds chunk 276 too, the first past its end.
  const std::string file =
      WithFirstMessage(Encoded(), [](schema::Manifest::Builder root) { root.getFiles()[0].setSize(5200); });
  Result<ManifestWithoutChunks> read = DecodeManifestWithoutChunks(file, kOrigin);
  ASSERT_TRUE(read.ok()) << read.status().message();
  ASSERT_TRUE(read->chunks->DecodeRecordsInto(read->manifest, {{1, 5}}).ok());
  ExpectCorrupt(read->chunks->DecodeRecordsInto(read->manifest, {{1, 300}}),
                "tensor 'big': chunk 276: byte range [5200, +4) is past the end");
  EXPECT_TRUE(read->manifest.tensors[1].chunks.empty());
}

TEST(ManifestSectionRecords, ADamagedSectionFoundByARecordLeavesItsTensorEmpty) {
  std::string file = Encoded();
  const uint64_t section2 = MessageEnd(file) + SectionLength(file, 0) + SectionLength(file, 1);
  file[section2 + 40] ^= 0x01;
  Result<ManifestWithoutChunks> read = DecodeManifestWithoutChunks(file, kOrigin);
  ASSERT_TRUE(read.ok()) << read.status().message();
  ASSERT_TRUE(read->chunks->DecodeRecordsInto(read->manifest, {{1, 0}}).ok());
  ExpectCorrupt(read->chunks->DecodeRecordsInto(read->manifest, {{1, 0}, {1, 256}}),
                "chunk section 2 (tensor 1, chunks from 256) of tensor 'big': checksum mismatch");
  EXPECT_TRUE(read->manifest.tensors[1].chunks.empty());
  // Section 1, decoded before, is decoded again: nothing of the tensor is kept beside a damaged section.
  ASSERT_TRUE(read->chunks->DecodeRecordsInto(read->manifest, {{1, 0}}).ok());
  EXPECT_EQ(read->manifest.tensors[1].chunks[0].box.offset, Shape{0});
}

}  // namespace
}  // namespace ckpt::runtime

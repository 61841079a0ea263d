// The write report each rank sends the committer (runtime/save/write_report.h): what it wrote and the replicas it
// checked come back whole, and a report cut short anywhere is refused naming the rank, never misread.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/save/write_report.h"

namespace ckpt::runtime {
namespace {

StoredBytes Stored(uint64_t file_offset, uint64_t byte_length, uint64_t block_size, std::vector<uint64_t> checksums) {
  StoredBytes stored;
  stored.file_offset = file_offset;
  stored.byte_length = byte_length;
  stored.block_size = block_size;
  stored.block_checksums = std::move(checksums);
  return stored;
}

WriterReport Sample() {
  WriterReport report;
  report.files.push_back(DataFileRecord{"data/2-0.bin", 8192});
  WrittenItem written;
  written.key = "w";
  written.box = Box{{0, 0}, {4, 8}};
  written.bytes = Stored(4096, 128, 64, {11, 12});
  written.bytes.codec = 1;  // compressed: its two blocks stored in 40 and 64 bytes, bytes grouped in pairs
  written.bytes.byte_groups = 2;
  written.bytes.stored_sizes = {40, 64};
  report.items.push_back(written);
  WrittenItem replica;
  replica.is_object = true;
  replica.key = "rng";
  replica.index = {3};
  replica.bytes = Stored(0, 5000, 1 << 20, {21});
  report.replicas.push_back(replica);
  report.digests.push_back(TensorDigests{"w", BoxDigests{Box{{0, 0}, {4, 8}}, 64, std::string(64, 'd')}});
  report.referenced_files.push_back(DataFileRecord{"data/0-0.bin", 4096, "step-000000000001"});
  WrittenItem reference;
  reference.key = "w";
  reference.box = Box{{4, 0}, {4, 8}};
  reference.bytes = Stored(0, 128, 64, {31, 32});
  report.references.push_back(reference);
  WrittenItem whole;
  whole.key = "w";
  whole.box = Box{{0, 0}, {8, 8}};
  whole.bytes = Stored(0, 256, 64, {41, 42, 43, 44});
  report.split_items.push_back(whole);
  return report;
}

TEST(WriteReportTest, ItemsAndCheckedReplicasRoundTrip) {
  Result<WriterReport> decoded = DecodeWriterReport(EncodeWriterReport(Sample()), 2);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  ASSERT_EQ(decoded->items.size(), 1u);
  EXPECT_EQ(decoded->items[0].box, (Box{{0, 0}, {4, 8}}));
  EXPECT_EQ(decoded->items[0].bytes.block_checksums, (std::vector<uint64_t>{11, 12}));
  ASSERT_EQ(decoded->replicas.size(), 1u);
  const WrittenItem& replica = decoded->replicas[0];
  EXPECT_TRUE(replica.is_object);
  EXPECT_EQ(replica.key, "rng");
  EXPECT_EQ(replica.index, (Shape{3}));
  EXPECT_EQ(replica.bytes.byte_length, 5000u);
  EXPECT_EQ(replica.bytes.block_checksums, (std::vector<uint64_t>{21}));
}

TEST(WriteReportTest, DigestsReferencesToOtherCheckpointsAndSplitItemsRoundTrip) {
  Result<WriterReport> decoded = DecodeWriterReport(EncodeWriterReport(Sample()), 2);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  ASSERT_EQ(decoded->digests.size(), 1u);
  EXPECT_EQ(decoded->digests[0].key, "w");
  EXPECT_EQ(decoded->digests[0].digests.box, (Box{{0, 0}, {4, 8}}));
  EXPECT_EQ(decoded->digests[0].digests.sha256, std::string(64, 'd'));
  ASSERT_EQ(decoded->referenced_files.size(), 1u);
  EXPECT_EQ(decoded->referenced_files[0].checkpoint, "step-000000000001");
  ASSERT_EQ(decoded->references.size(), 1u);
  EXPECT_EQ(decoded->references[0].box, (Box{{4, 0}, {4, 8}}));
  EXPECT_EQ(decoded->references[0].bytes.block_checksums, (std::vector<uint64_t>{31, 32}));
  ASSERT_EQ(decoded->split_items.size(), 1u);
  EXPECT_EQ(decoded->split_items[0].box, (Box{{0, 0}, {8, 8}}));
  EXPECT_EQ(decoded->split_items[0].bytes.block_checksums, (std::vector<uint64_t>{41, 42, 43, 44}));
}

// A compressed save's items: each block's stored size, with the codec and the grouping its bytes were coded with.
TEST(WriteReportTest, CompressedItemsRoundTripWithTheirCodecGroupingAndStoredSizes) {
  Result<WriterReport> decoded = DecodeWriterReport(EncodeWriterReport(Sample()), 2);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  ASSERT_EQ(decoded->items.size(), 1u);
  EXPECT_EQ(decoded->items[0].bytes.codec, 1u);
  EXPECT_EQ(decoded->items[0].bytes.byte_groups, 2u);
  EXPECT_EQ(decoded->items[0].bytes.stored_sizes.values(), (std::vector<uint32_t>{40, 64}));
  EXPECT_EQ(decoded->items[0].bytes.block_checksums, (std::vector<uint64_t>{11, 12}));
  EXPECT_EQ(decoded->replicas[0].bytes.codec, 0u);
  EXPECT_TRUE(decoded->replicas[0].bytes.stored_sizes.empty());
}

TEST(WriteReportTest, AReferenceToAFileTheReportDoesNotListIsRefused) {
  WriterReport report = Sample();
  report.references[0].bytes.file_index = 1;
  const Result<WriterReport> decoded = DecodeWriterReport(EncodeWriterReport(report), 2);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("a reference to file 1 of 1"), std::string::npos)
      << decoded.status().message();
}

TEST(WriteReportTest, EveryTruncationIsRefusedNamingTheRank) {
  const std::string encoded = EncodeWriterReport(Sample());
  for (size_t length = 0; length < encoded.size(); ++length) {
    const Result<WriterReport> decoded = DecodeWriterReport(encoded.substr(0, length), 2);
    ASSERT_FALSE(decoded.ok()) << "a report cut to " << length << " bytes was accepted";
    EXPECT_NE(decoded.status().message().find("write report from rank 2"), std::string::npos)
        << decoded.status().message();
  }
}

TEST(WriteReportTest, TrailingBytesAreRefused) {
  EXPECT_FALSE(DecodeWriterReport(EncodeWriterReport(Sample()) + "x", 2).ok());
}

}  // namespace
}  // namespace ckpt::runtime

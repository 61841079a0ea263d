#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "ckpt.h"
#include "io/file_io.h"
#include "runtime/core/dtype.h"
#include "runtime/format/safetensors.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::runtime {

// Here, not in the anonymous namespace, for std::vector's == to find it by argument-dependent lookup.
bool operator==(const SafetensorsTensor& a, const SafetensorsTensor& b) {
  return a.key == b.key && a.dtype == b.dtype && a.shape == b.shape && a.begin == b.begin && a.end == b.end;
}

namespace {

const char kOrigin[] = "/models/tiny/model.safetensors";
const char kIndexOrigin[] = "/models/tiny/model.safetensors.index.json";
const int32_t kF32 = CKPT_DTYPE_F32;

SafetensorsTensor Tensor(std::string key, int32_t dtype, Shape shape, uint64_t begin) {
  const uint64_t end = begin + Volume(shape) * DTypeSize(dtype);
  return SafetensorsTensor{std::move(key), dtype, std::move(shape), begin, end};
}

// A file's first bytes as a writer puts them: the 8-byte little-endian length, then `json`.
std::string WithLength(const std::string& json) {
  std::string out;
  for (size_t i = 0; i < 8; ++i) out.push_back(static_cast<char>(uint64_t{json.size()} >> (8 * i)));
  return out + json;
}

// Parses `json` as the header of a file whose data is `data_length` bytes.
Result<SafetensorsHeader> ParseJson(const std::string& json, uint64_t data_length) {
  const std::string prefix = WithLength(json);
  return ParseSafetensorsHeader(prefix, prefix.size() + data_length, kOrigin);
}

// One entry's JSON.
std::string Entry(const std::string& key, const std::string& dtype, const std::string& shape, uint64_t begin,
                  uint64_t end) {
  return "\"" + key + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

// A refusal with `code`, whose message names `origin` first and then holds `text`.
template <typename T>
::testing::AssertionResult Refused(const Result<T>& result, const std::string& text, Code code = Code::kCorrupt,
                                   const std::string& origin = kOrigin) {
  if (result.ok()) return ::testing::AssertionFailure() << "accepted; expected a refusal naming: " << text;
  const std::string& message = result.status().message();
  if (result.status().code() != code) {
    return ::testing::AssertionFailure() << "code " << static_cast<int>(result.status().code()) << ": " << message;
  }
  if (message.rfind(origin + ": ", 0) != 0) return ::testing::AssertionFailure() << "no origin: " << message;
  if (message.find(text) == std::string::npos) {
    return ::testing::AssertionFailure() << "\"" << message << "\" does not say \"" << text << "\"";
  }
  return ::testing::AssertionSuccess();
}

// Three dtypes, a scalar, a tensor of no elements and metadata: sorted by key, tiling 40 bytes of data.
struct Sample {
  std::vector<SafetensorsTensor> tensors{Tensor("a.bias", CKPT_DTYPE_BF16, {4}, 24),
                                         Tensor("a.weight", kF32, {2, 3}, 0), Tensor("empty", kF32, {0, 4}, 32),
                                         Tensor("step", CKPT_DTYPE_I64, {}, 32)};
  std::vector<std::pair<std::string, std::string>> metadata{{"format", "pt"}, {"step", "7"}};
  uint64_t data_length = 40;
};

// ---- Round trip and encoding ------------------------------------------------------------------------------------

TEST(SafetensorsHeader, RoundTripGivesBackTensorsAndMetadata) {
  const Sample s;
  const std::string prefix = EncodeSafetensorsHeader(s.tensors, s.metadata, 8).value();
  auto header = ParseSafetensorsHeader(prefix, prefix.size() + s.data_length, kOrigin);
  ASSERT_TRUE(header.ok()) << header.status().message();
  EXPECT_EQ(header->data_start, prefix.size());
  EXPECT_EQ(header->tensors, s.tensors);
  EXPECT_EQ(header->metadata, s.metadata);
}

TEST(SafetensorsHeader, EncodePadsWithSpacesSoTheDataStartsAligned) {
  const Sample s;
  for (uint64_t alignment : {8, 64, 4096}) {
    const std::string prefix = EncodeSafetensorsHeader(s.tensors, s.metadata, alignment).value();
    EXPECT_EQ(prefix.size() % alignment, 0u) << alignment;
    uint64_t length = 0;
    std::memcpy(&length, prefix.data(), 8);  // little-endian on the machines ckpt runs on
    EXPECT_EQ(length, prefix.size() - 8);
    const size_t json_end = prefix.rfind('}') + 1;
    EXPECT_GT(json_end, prefix.size() - alignment);
    EXPECT_EQ(prefix.substr(json_end), std::string(prefix.size() - json_end, ' '));
    EXPECT_TRUE(ParseSafetensorsHeader(prefix, prefix.size() + s.data_length, kOrigin).ok()) << alignment;
  }
}

TEST(SafetensorsHeader, EncodeWritesMetadataFirstThenTensorsInTheOrderGiven) {
  const std::string prefix =
      EncodeSafetensorsHeader({Tensor("b", kF32, {2}, 0), Tensor("A", CKPT_DTYPE_U8, {}, 8)}, {{"k", "v"}}, 8).value();
  EXPECT_EQ(
      prefix.substr(8, prefix.rfind('}') - 7),
      "{\"__metadata__\":{\"k\":\"v\"}," + Entry("b", "F32", "[2]", 0, 8) + "," + Entry("A", "U8", "[]", 8, 9) + "}");
}

TEST(SafetensorsHeader, EncodeLeavesOutEmptyMetadata) {
  const std::string prefix = EncodeSafetensorsHeader({Tensor("w", kF32, {1}, 0)}, {}, 8).value();
  EXPECT_EQ(prefix.find("__metadata__"), std::string::npos);
}

TEST(SafetensorsHeader, ParseSortsTensorsAndMetadataByKey) {
  auto header = ParseJson("{\"__metadata__\":{\"z\":\"1\",\"a\":\"2\"}," + Entry("b", "F32", "[1]", 0, 4) + "," +
                              Entry("a", "F32", "[1]", 4, 8) + "}",
                          8);
  ASSERT_TRUE(header.ok()) << header.status().message();
  ASSERT_EQ(header->tensors.size(), 2u);
  EXPECT_EQ(header->tensors[0].key, "a");
  EXPECT_EQ(header->tensors[1].key, "b");
  EXPECT_EQ(header->metadata, (std::vector<std::pair<std::string, std::string>>{{"a", "2"}, {"z", "1"}}));
}

TEST(SafetensorsHeader, AcceptsAnEmptyHeaderWithNoData) {
  auto header = ParseJson("{}", 0);
  ASSERT_TRUE(header.ok()) << header.status().message();
  EXPECT_TRUE(header->tensors.empty());
  EXPECT_EQ(header->data_start, 10u);
}

TEST(SafetensorsHeader, AcceptsTensorsOfNoElementsAtAnyOffset) {
  auto header = ParseJson("{" + Entry("first", "F32", "[0]", 0, 0) + "," + Entry("w", "F32", "[2]", 0, 8) + "," +
                              Entry("middle", "I8", "[3,0]", 8, 8) + "," + Entry("v", "U8", "[1]", 8, 9) + "," +
                              Entry("last", "F64", "[0,5]", 9, 9) + "}",
                          9);
  ASSERT_TRUE(header.ok()) << header.status().message();
  EXPECT_EQ(header->tensors.size(), 5u);
}

TEST(SafetensorsHeader, AcceptsWhitespaceInsideTheJson) {
  EXPECT_TRUE(ParseJson("{ \"w\" : {\n\"dtype\": \"U8\", \"shape\": [ 2 ], \"data_offsets\": [0, 2] } }  ", 2).ok());
}

// ---- Refusals: the length and the framing ----------------------------------------------------------------------

TEST(SafetensorsHeader, RefusesAFileShorterThanTheLength) {
  EXPECT_TRUE(Refused(ParseSafetensorsHeader("{}", 2, kOrigin), "2 bytes, too short for the 8-byte header length"));
}

TEST(SafetensorsHeader, RefusesAHeaderLengthOverTheCap) {
  std::string prefix = WithLength("{}");
  const uint64_t length = kMaxSafetensorsHeaderBytes + 1;
  std::memcpy(prefix.data(), &length, 8);
  EXPECT_TRUE(Refused(ParseSafetensorsHeader(prefix, uint64_t{1} << 40, kOrigin),
                      "header length 100000001 is over the limit of 100000000 bytes"));
}

TEST(SafetensorsHeader, RefusesAHeaderLengthPastTheEndOfTheFile) {
  const std::string prefix = WithLength("{}");
  EXPECT_TRUE(
      Refused(ParseSafetensorsHeader(prefix, 9, kOrigin), "header length 2 reaches past the end of the 9-byte file"));
}

TEST(SafetensorsHeader, RefusesAPrefixShorterThanItsHeaderAsTheCallersMistake) {
  const std::string prefix = WithLength("{}");
  EXPECT_TRUE(
      Refused(ParseSafetensorsHeader(prefix.substr(0, 9), 100, kOrigin), "short of the 10", Code::kInvalidArgument));
}

TEST(SafetensorsHeader, RefusesAHeaderThatDoesNotBeginWithABrace) {
  EXPECT_TRUE(Refused(ParseJson(" {}", 0), "does not begin with '{'"));
  EXPECT_TRUE(Refused(ParseJson("", 0), "does not begin with '{'"));
}

TEST(SafetensorsHeader, RefusesInvalidJson) { EXPECT_TRUE(Refused(ParseJson("{\"w\":", 0), "invalid JSON at byte")); }

TEST(SafetensorsHeader, RefusesBytesOtherThanWhitespaceAfterTheJson) {
  EXPECT_TRUE(Refused(ParseJson(std::string("{}\0\0", 4), 0), "invalid JSON at byte"));
}

TEST(SafetensorsHeader, RefusesInvalidUtf8) {
  EXPECT_TRUE(Refused(ParseJson("{\"__metadata__\":{\"k\":\"\xff\"}}", 0), "invalid JSON"));
}

TEST(SafetensorsHeader, RefusesADuplicateTensorName) {
  EXPECT_TRUE(Refused(ParseJson("{" + Entry("w", "U8", "[1]", 0, 1) + "," + Entry("w", "U8", "[1]", 1, 2) + "}", 2),
                      "duplicate key \"w\""));
}

TEST(SafetensorsHeader, RefusesADuplicateMemberInAnEntry) {
  EXPECT_TRUE(Refused(ParseJson("{\"w\":{\"dtype\":\"U8\",\"dtype\":\"I8\",\"shape\":[],\"data_offsets\":[0,1]}}", 1),
                      "duplicate key \"dtype\" in \"w\""));
}

// ---- Refusals: entries -----------------------------------------------------------------------------------------

TEST(SafetensorsHeader, RefusesAnEntryThatIsNotAnObject) {
  EXPECT_TRUE(Refused(ParseJson("{\"w\":[1]}", 0), "tensor \"w\" is an array, not an object"));
  EXPECT_TRUE(Refused(ParseJson("{\"w\":7}", 0), "tensor \"w\" is a number, not an object"));
}

TEST(SafetensorsHeader, RefusesAnEntryWithAnUnknownMember) {
  EXPECT_TRUE(Refused(ParseJson("{\"w\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1],\"x\":1}}", 1),
                      "tensor \"w\": unknown member \"x\""));
}

TEST(SafetensorsHeader, RefusesAnEntryWithoutAMember) {
  EXPECT_TRUE(Refused(ParseJson("{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1), "tensor \"w\": no shape"));
}

TEST(SafetensorsHeader, RefusesADTypeThatIsNotAString) {
  EXPECT_TRUE(Refused(ParseJson("{\"w\":{\"dtype\":12,\"shape\":[],\"data_offsets\":[0,4]}}", 4),
                      "tensor \"w\": dtype is a number, not a string"));
}

TEST(SafetensorsHeader, RefusesADTypeWithoutACkptEquivalent) {
  EXPECT_TRUE(Refused(ParseJson("{" + Entry("w", "F4", "[2]", 0, 1) + "}", 1),
                      "tensor \"w\": dtype \"F4\" is unknown or has no ckpt equivalent"));
  EXPECT_TRUE(Refused(ParseJson("{" + Entry("w", "f32", "[2]", 0, 8) + "}", 8), "dtype \"f32\" is unknown"));
}

TEST(SafetensorsHeader, RefusesAShapeThatIsNotAnArray) {
  EXPECT_TRUE(Refused(ParseJson("{" + Entry("w", "U8", "{}", 0, 1) + "}", 1),
                      "tensor \"w\": shape is an object, not an array"));
}

TEST(SafetensorsHeader, RefusesANegativeShapeEntry) {
  EXPECT_TRUE(Refused(ParseJson("{" + Entry("w", "U8", "[1,-2]", 0, 1) + "}", 1),
                      "tensor \"w\": shape[1] is a negative number, not an integer in [0, 2^64)"));
}

TEST(SafetensorsHeader, RefusesAFractionalShapeEntry) {
  EXPECT_TRUE(Refused(ParseJson("{" + Entry("w", "U8", "[1.5]", 0, 1) + "}", 1), "shape[0] is a fraction"));
  EXPECT_TRUE(Refused(ParseJson("{" + Entry("w", "U8", "[1e0]", 0, 1) + "}", 1), "shape[0] is a fraction"));
}

TEST(SafetensorsHeader, RefusesAShapeEntryOf2To64OrMore) {
  EXPECT_TRUE(Refused(ParseJson("{" + Entry("w", "U8", "[18446744073709551616]", 0, 1) + "}", 1),
                      "shape[0] is a fraction or a number of 2^64 or more"));
}

TEST(SafetensorsHeader, RefusesMoreDimensionsThanCkptHolds) {
  EXPECT_TRUE(Refused(ParseJson("{" + Entry("w", "U8", "[1,1,1,1,1,1,1,1,1]", 0, 1) + "}", 1),
                      "tensor \"w\": shape has more than 8 dimensions"));
}

TEST(SafetensorsHeader, RefusesDataOffsetsThatAreNotTwoIntegers) {
  EXPECT_TRUE(Refused(ParseJson("{\"w\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0]}}", 1),
                      "tensor \"w\": data_offsets has 1 entries, not 2"));
  EXPECT_TRUE(Refused(ParseJson("{\"w\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1,1]}}", 1),
                      "data_offsets has 3 entries, not 2"));
  EXPECT_TRUE(Refused(ParseJson("{\"w\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,\"1\"]}}", 1),
                      "tensor \"w\": data_offsets[1] is a string, not an integer in [0, 2^64)"));
}

TEST(SafetensorsHeader, RefusesAnElementCountOf2To64OrMore) {
  EXPECT_TRUE(Refused(ParseJson("{" + Entry("w", "U8", "[4294967296,4294967296]", 0, 1) + "}", 1),
                      "tensor \"w\": shape [4294967296, 4294967296] of U8 holds 2^64 bytes or more"));
}

TEST(SafetensorsHeader, RefusesAByteSizeOf2To64OrMore) {
  EXPECT_TRUE(Refused(ParseJson("{" + Entry("w", "F32", "[4611686018427387904]", 0, 1) + "}", 1),
                      "shape [4611686018427387904] of F32 holds 2^64 bytes or more"));
}

TEST(SafetensorsHeader, RefusesDataOffsetsThatEndBeforeTheyBegin) {
  EXPECT_TRUE(Refused(ParseJson("{" + Entry("w", "U8", "[0]", 4, 2) + "}", 4),
                      "tensor \"w\": data_offsets [4, 2] end before they begin"));
}

TEST(SafetensorsHeader, RefusesDataOffsetsWhoseLengthDisagreesWithTheShape) {
  EXPECT_TRUE(Refused(ParseJson("{" + Entry("w", "F32", "[2,3]", 0, 12) + "}", 12),
                      "tensor \"w\": data_offsets [0, 12] hold 12 bytes but shape [2, 3] of F32 needs 24"));
}

TEST(SafetensorsHeader, RefusesDataOffsetsPastTheEndOfTheData) {
  EXPECT_TRUE(Refused(ParseJson("{" + Entry("w", "F32", "[2]", 0, 8) + "}", 4),
                      "tensor \"w\": data_offsets [0, 8] reach past the end of the data (4 bytes)"));
}

// ---- Refusals: tiling ------------------------------------------------------------------------------------------

TEST(SafetensorsHeader, RefusesOverlappingTensors) {
  EXPECT_TRUE(Refused(ParseJson("{" + Entry("a", "F32", "[2]", 0, 8) + "," + Entry("b", "F32", "[2]", 4, 12) + "}", 12),
                      "tensor \"b\": data_offsets [4, 12] overlap tensor \"a\"'s data_offsets [0, 8]"));
}

TEST(SafetensorsHeader, RefusesATensorOfNoElementsInsideAnother) {
  EXPECT_TRUE(Refused(ParseJson("{" + Entry("a", "F32", "[2]", 0, 8) + "," + Entry("e", "F32", "[0]", 4, 4) + "}", 8),
                      "tensor \"e\": data_offsets [4, 4] overlap tensor \"a\"'s"));
}

TEST(SafetensorsHeader, RefusesAHoleBetweenTensors) {
  EXPECT_TRUE(Refused(ParseJson("{" + Entry("a", "F32", "[1]", 0, 4) + "," + Entry("b", "F32", "[1]", 8, 12) + "}", 12),
                      "bytes [4, 8) of the data belong to no tensor"));
}

TEST(SafetensorsHeader, RefusesAHoleBeforeTheFirstTensor) {
  EXPECT_TRUE(Refused(ParseJson("{" + Entry("a", "F32", "[1]", 4, 8) + "}", 8), "bytes [0, 4) of the data"));
}

TEST(SafetensorsHeader, RefusesDataAfterTheLastTensor) {
  EXPECT_TRUE(Refused(ParseJson("{" + Entry("a", "F32", "[1]", 0, 4) + "}", 6),
                      "bytes [4, 6) of the data belong to no tensor"));
  EXPECT_TRUE(Refused(ParseJson("{}", 1), "bytes [0, 1) of the data belong to no tensor"));
}

// ---- Refusals: metadata ----------------------------------------------------------------------------------------

TEST(SafetensorsHeader, RefusesMetadataThatIsNotAnObject) {
  EXPECT_TRUE(Refused(ParseJson("{\"__metadata__\":null}", 0), "__metadata__ is null, not an object"));
  EXPECT_TRUE(Refused(ParseJson("{\"__metadata__\":[]}", 0), "__metadata__ is an array, not an object"));
}

TEST(SafetensorsHeader, RefusesAMetadataValueThatIsNotAString) {
  EXPECT_TRUE(
      Refused(ParseJson("{\"__metadata__\":{\"step\":7}}", 0), "__metadata__ \"step\" is a number, not a string"));
  EXPECT_TRUE(Refused(ParseJson("{\"__metadata__\":{\"x\":{}}}", 0), "__metadata__ \"x\" is an object, not a string"));
}

TEST(SafetensorsHeader, RefusesADuplicateMetadataKey) {
  EXPECT_TRUE(
      Refused(ParseJson("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0), "duplicate key \"k\" in \"__metadata__\""));
}

TEST(SafetensorsHeader, MessagesEscapeHostileNames) {
  EXPECT_TRUE(Refused(ParseJson("{\"a\\nb\":7}", 0), "tensor \"a\\nb\" is a number"));
}

// ---- dtype names -----------------------------------------------------------------------------------------------

TEST(SafetensorsDType, NamesMapBothWaysWithEqualElementSizes) {
  const std::pair<const char*, int32_t> expected[] = {{"BOOL", CKPT_DTYPE_BOOL},
                                                      {"U8", CKPT_DTYPE_U8},
                                                      {"I8", CKPT_DTYPE_I8},
                                                      {"I16", CKPT_DTYPE_I16},
                                                      {"U16", CKPT_DTYPE_U16},
                                                      {"I32", CKPT_DTYPE_I32},
                                                      {"U32", CKPT_DTYPE_U32},
                                                      {"I64", CKPT_DTYPE_I64},
                                                      {"U64", CKPT_DTYPE_U64},
                                                      {"F16", CKPT_DTYPE_F16},
                                                      {"BF16", CKPT_DTYPE_BF16},
                                                      {"F32", CKPT_DTYPE_F32},
                                                      {"F64", CKPT_DTYPE_F64},
                                                      {"C64", CKPT_DTYPE_C64},
                                                      {"F8_E5M2", CKPT_DTYPE_F8_E5M2},
                                                      {"F8_E4M3", CKPT_DTYPE_F8_E4M3},
                                                      {"F8_E8M0", CKPT_DTYPE_F8_E8M0},
                                                      {"F8_E4M3FNUZ", CKPT_DTYPE_F8_E4M3FNUZ},
                                                      {"F8_E5M2FNUZ", CKPT_DTYPE_F8_E5M2FNUZ}};
  for (const auto& [name, dtype] : expected) {
    EXPECT_EQ(DTypeOfSafetensorsName(name), dtype) << name;
    EXPECT_EQ(SafetensorsDTypeName(dtype), name) << name;
  }
}

TEST(SafetensorsDType, PackedSubByteTypesDoNotMap) {
  for (const char* name : {"F4", "F6_E2M3", "F6_E3M2"}) EXPECT_EQ(DTypeOfSafetensorsName(name), 0) << name;
  for (int32_t dtype : {CKPT_DTYPE_F4_E2M1, CKPT_DTYPE_I4, CKPT_DTYPE_U4, CKPT_DTYPE_I2, CKPT_DTYPE_U2}) {
    EXPECT_EQ(SafetensorsDTypeName(dtype), "") << dtype;
  }
}

TEST(SafetensorsDType, CkptTypesSafetensorsLacksHaveNoName) {
  for (int32_t dtype : {CKPT_DTYPE_C128, CKPT_DTYPE_F8_E4M3B11FNUZ, CKPT_DTYPE_F8_E3M4, CKPT_DTYPE_F8_E4M3_IEEE, 0}) {
    EXPECT_EQ(SafetensorsDTypeName(dtype), "") << dtype;
  }
  EXPECT_EQ(DTypeOfSafetensorsName(""), 0);
  EXPECT_EQ(DTypeOfSafetensorsName("f32"), 0);
}

// ---- Reading a file --------------------------------------------------------------------------------------------

class SafetensorsFile : public testing::TempDirTest {
 protected:
  void Write(const std::string& name, const std::string& bytes) {
    ASSERT_TRUE(io::WriteFileDurably(io::JoinPath(dir(), name), bytes.data(), bytes.size()).ok());
  }
};

TEST_F(SafetensorsFile, ReadsTheHeaderOfAFile) {
  const Sample s;
  const std::string prefix = EncodeSafetensorsHeader(s.tensors, s.metadata, 64).value();
  Write("model.safetensors", prefix + std::string(s.data_length, '\7'));
  auto header = ReadSafetensorsHeader(dir(), "model.safetensors");
  ASSERT_TRUE(header.ok()) << header.status().message();
  EXPECT_EQ(header->data_start, prefix.size());
  EXPECT_EQ(header->tensors, s.tensors);
  EXPECT_EQ(header->metadata, s.metadata);
}

TEST_F(SafetensorsFile, ReadRefusesAFileShorterThanTheLengthNamingItsPath) {
  Write("short.safetensors", "abc");
  EXPECT_TRUE(Refused(ReadSafetensorsHeader(dir(), "short.safetensors"), "3 bytes, too short", Code::kCorrupt,
                      io::JoinPath(dir(), "short.safetensors")));
}

TEST_F(SafetensorsFile, ReadRefusesALengthPastTheEndOfTheFile) {
  std::string bytes = WithLength("{}");
  const uint64_t length = 1 << 20;
  std::memcpy(bytes.data(), &length, 8);
  Write("cut.safetensors", bytes);
  EXPECT_TRUE(Refused(ReadSafetensorsHeader(dir(), "cut.safetensors"),
                      "header length 1048576 reaches past the end of the 10-byte file", Code::kCorrupt,
                      io::JoinPath(dir(), "cut.safetensors")));
}

TEST_F(SafetensorsFile, ReadRefusesAFileWhoseTensorsDoNotTileTheData) {
  Write("model.safetensors",
        EncodeSafetensorsHeader({Tensor("w", kF32, {2}, 0)}, {}, 8).value() + std::string(4, '\0'));
  EXPECT_TRUE(Refused(ReadSafetensorsHeader(dir(), "model.safetensors"), "reach past the end of the data (4 bytes)",
                      Code::kCorrupt, io::JoinPath(dir(), "model.safetensors")));
}

TEST_F(SafetensorsFile, ReadOfAMissingFileIsNotFound) {
  EXPECT_EQ(ReadSafetensorsHeader(dir(), "absent.safetensors").status().code(), Code::kNotFound);
}

// ---- The Hugging Face index ------------------------------------------------------------------------------------

HfIndex SampleIndex() {
  HfIndex index;
  index.total_size = 123456789012;
  index.weight_map = {{"lm_head.weight", "model-00002-of-00002.safetensors"},
                      {"model.embed.weight", "model-00001-of-00002.safetensors"}};
  return index;
}

TEST(HfIndex, RoundTripGivesBackTheIndex) {
  const HfIndex index = SampleIndex();
  auto parsed = ParseHfIndex(EncodeHfIndex(index), kIndexOrigin);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->total_size, index.total_size);
  EXPECT_EQ(parsed->weight_map, index.weight_map);
}

TEST(HfIndex, EncodeWritesTheHuggingFaceLayout) {
  EXPECT_EQ(EncodeHfIndex(SampleIndex()),
            "{\n"
            "  \"metadata\": {\n"
            "    \"total_size\": 123456789012\n"
            "  },\n"
            "  \"weight_map\": {\n"
            "    \"lm_head.weight\": \"model-00002-of-00002.safetensors\",\n"
            "    \"model.embed.weight\": \"model-00001-of-00002.safetensors\"\n"
            "  }\n"
            "}\n");
}

TEST(HfIndex, ParseSortsTheWeightMapByName) {
  auto parsed = ParseHfIndex(R"({"weight_map": {"b": "x.safetensors", "a": "y.safetensors"}})", kIndexOrigin);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->weight_map,
            (std::vector<std::pair<std::string, std::string>>{{"a", "y.safetensors"}, {"b", "x.safetensors"}}));
  EXPECT_EQ(parsed->total_size, 0u);
}

TEST(HfIndex, ParseIgnoresOtherMembers) {
  auto parsed = ParseHfIndex(
      R"({"metadata": {"total_parameters": 7, "format": {"a": [1, null]}, "total_size": 16},
          "producer": "someone", "weight_map": {"w": "model.safetensors"}})",
      kIndexOrigin);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->total_size, 16u);
  EXPECT_EQ(parsed->weight_map.size(), 1u);
}

TEST(HfIndex, RefusesInvalidJson) {
  EXPECT_TRUE(
      Refused(ParseHfIndex(R"({"weight_map": {)", kIndexOrigin), "invalid JSON at byte", Code::kCorrupt, kIndexOrigin));
}

TEST(HfIndex, RefusesJsonThatIsNotAnObject) {
  EXPECT_TRUE(Refused(ParseHfIndex("[]", kIndexOrigin), "not a JSON object", Code::kCorrupt, kIndexOrigin));
  EXPECT_TRUE(Refused(ParseHfIndex("\"x\"", kIndexOrigin), "not a JSON object", Code::kCorrupt, kIndexOrigin));
}

TEST(HfIndex, RefusesATensorListedTwice) {
  EXPECT_TRUE(Refused(ParseHfIndex(R"({"weight_map": {"w": "a.safetensors", "w": "b.safetensors"}})", kIndexOrigin),
                      "duplicate key \"w\" in \"weight_map\"", Code::kCorrupt, kIndexOrigin));
}

TEST(HfIndex, RefusesADuplicateKeyInAnIgnoredMember) {
  EXPECT_TRUE(Refused(ParseHfIndex(R"({"extra": {"k": 1, "k": 2}, "weight_map": {}})", kIndexOrigin),
                      "duplicate key \"k\" in \"extra\"", Code::kCorrupt, kIndexOrigin));
}

TEST(HfIndex, RefusesNestingDeeperThan64Levels) {
  const std::string deep = std::string(64, '[') + std::string(64, ']');
  EXPECT_TRUE(Refused(ParseHfIndex("{\"extra\":" + deep + ",\"weight_map\":{}}", kIndexOrigin),
                      "nested deeper than 64 levels", Code::kCorrupt, kIndexOrigin));
  const std::string allowed = std::string(63, '[') + std::string(63, ']');
  EXPECT_TRUE(ParseHfIndex("{\"extra\":" + allowed + ",\"weight_map\":{}}", kIndexOrigin).ok());
}

TEST(HfIndex, RefusesAMissingWeightMap) {
  EXPECT_TRUE(Refused(ParseHfIndex(R"({"metadata": {"total_size": 0}})", kIndexOrigin), "no weight_map", Code::kCorrupt,
                      kIndexOrigin));
}

TEST(HfIndex, RefusesAWeightMapThatIsNotAnObject) {
  EXPECT_TRUE(Refused(ParseHfIndex(R"({"weight_map": ["a.safetensors"]})", kIndexOrigin),
                      "weight_map is an array, not an object", Code::kCorrupt, kIndexOrigin));
}

TEST(HfIndex, RefusesAFileNameThatIsNotAString) {
  EXPECT_TRUE(Refused(ParseHfIndex(R"({"weight_map": {"w": 1}})", kIndexOrigin),
                      "weight_map \"w\" is a number, not a file name", Code::kCorrupt, kIndexOrigin));
}

TEST(HfIndex, RefusesAFileNameThatLeadsOutOfTheDirectory) {
  for (const char* file : {"", "/abs/model.safetensors", "sub/model.safetensors", "../model.safetensors",
                           "model..safetensors", "a\\u0000.safetensors"}) {
    const std::string json = std::string(R"({"weight_map": {"w": ")") + file + "\"}}";
    EXPECT_TRUE(Refused(ParseHfIndex(json, kIndexOrigin), "not a plain file name in the index's directory",
                        Code::kCorrupt, kIndexOrigin))
        << file;
  }
}

TEST(HfIndex, RefusesAFileThatIsNotSafetensors) {
  EXPECT_TRUE(Refused(ParseHfIndex(R"({"weight_map": {"w": "model.bin"}})", kIndexOrigin),
                      "weight_map \"w\" names \"model.bin\", which does not end in .safetensors", Code::kCorrupt,
                      kIndexOrigin));
}

TEST(HfIndex, RefusesMetadataThatIsNotAnObject) {
  EXPECT_TRUE(Refused(ParseHfIndex(R"({"metadata": 5, "weight_map": {}})", kIndexOrigin),
                      "metadata is a number, not an object", Code::kCorrupt, kIndexOrigin));
}

TEST(HfIndex, RefusesATotalSizeThatIsNotANonNegativeInteger) {
  for (const char* value : {"-1", "1.5", "\"16\"", "null", "18446744073709551616"}) {
    const std::string json = std::string(R"({"metadata": {"total_size": )") + value + R"(}, "weight_map": {}})";
    EXPECT_TRUE(Refused(ParseHfIndex(json, kIndexOrigin), "metadata.total_size is", Code::kCorrupt, kIndexOrigin))
        << value;
  }
}

}  // namespace
}  // namespace ckpt::runtime

// Names in safetensors headers and Hugging Face indexes are keys, so text (common/key_text.h): valid UTF-8 without
// NUL. The parser refuses others, shown escaped; the encoder never writes a header that the parser would refuse,
// and gives back awkward but valid names exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "ckpt.h"
#include "runtime/format/safetensors.h"

namespace ckpt::runtime {
namespace {

const char kOrigin[] = "/models/tiny/model.safetensors";

// Parses `json` as the header of a file whose data is `data_length` bytes.
Result<SafetensorsHeader> ParseJson(const std::string& json, uint64_t data_length) {
  std::string prefix;
  for (size_t i = 0; i < 8; ++i) prefix.push_back(static_cast<char>(uint64_t{json.size()} >> (8 * i)));
  prefix += json;
  return ParseSafetensorsHeader(prefix, prefix.size() + data_length, kOrigin);
}

// One U8 entry of one byte at `begin`, its name given as JSON writes it (escapes and all).
std::string Entry(const std::string& json_name, uint64_t begin) {
  return "\"" + json_name + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" + std::to_string(begin) + "," +
         std::to_string(begin + 1) + "]}";
}

// A refusal with `code` whose message holds `text`.
template <typename T>
::testing::AssertionResult Refused(const Result<T>& result, Code code, const std::string& text) {
  if (result.ok()) return ::testing::AssertionFailure() << "accepted; expected a refusal saying: " << text;
  const std::string& message = result.status().message();
  if (result.status().code() != code) {
    return ::testing::AssertionFailure() << "code " << static_cast<int>(result.status().code()) << ": " << message;
  }
  if (message.find(text) == std::string::npos) {
    return ::testing::AssertionFailure() << "\"" << message << "\" does not say \"" << text << "\"";
  }
  return ::testing::AssertionSuccess();
}

SafetensorsTensor U8(std::string key, uint64_t begin) {
  return SafetensorsTensor{std::move(key), CKPT_DTYPE_U8, {1}, begin, begin + 1};
}

// ---- Parsing ---------------------------------------------------------------------------------------------------

TEST(SafetensorsKeys, ParseRefusesATensorNameWithANulShowingItEscaped) {
  // Two tensors that a C string would both call "a".
  const auto parsed = ParseJson("{" + Entry("a\\u0000x", 0) + "," + Entry("a\\u0000y", 1) + "}", 2);
  EXPECT_TRUE(Refused(parsed, Code::kCorrupt, "tensor name 'a\\x00x' contains a NUL byte at offset 1"));
  EXPECT_EQ(parsed.status().message().rfind(std::string(kOrigin) + ": ", 0), 0u) << parsed.status().message();
}

TEST(SafetensorsKeys, ParseRefusesLoneSurrogateEscapesInAName) {
  for (const char* name : {"a\\ud800", "\\udc00b", "\\ud800\\u0041"}) {
    EXPECT_TRUE(Refused(ParseJson("{" + Entry(name, 0) + "}", 1), Code::kCorrupt, "surrogate")) << name;
  }
}

TEST(SafetensorsKeys, ParseRefusesAMetadataKeyOrValueWithANul) {
  EXPECT_TRUE(Refused(ParseJson(R"({"__metadata__":{"k\u0000":"v"}})", 0), Code::kCorrupt,
                      "__metadata__ key 'k\\x00' contains a NUL byte at offset 1"));
  EXPECT_TRUE(Refused(ParseJson(R"({"__metadata__":{"k":"v\u0000w"}})", 0), Code::kCorrupt,
                      "__metadata__ 'k': value 'v\\x00w' contains a NUL byte at offset 1"));
}

TEST(SafetensorsKeys, ParseDecodesEscapedButValidNames) {
  const auto parsed = ParseJson("{" + Entry("caf\\u00e9", 0) + "," + Entry("q\\\"uote\\\\", 1) + "," +
                                    Entry("ctl\\n\\t\\u0001\\u007f", 2) + "," + Entry("\\ud83d\\ude00", 3) + "}",
                                4);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  std::vector<std::string> names;
  for (const SafetensorsTensor& t : parsed->tensors) names.push_back(t.key);
  EXPECT_EQ(names, (std::vector<std::string>{"caf\xc3\xa9", "ctl\n\t\x01\x7f", "q\"uote\\", "\xf0\x9f\x98\x80"}));
}

TEST(SafetensorsKeys, IndexRefusesATensorNameWithANul) {
  EXPECT_TRUE(Refused(ParseHfIndex(R"({"weight_map": {"w\u0000": "model.safetensors"}})", "index"), Code::kCorrupt,
                      "weight_map tensor name 'w\\x00' contains a NUL byte at offset 1"));
}

// ---- Encoding --------------------------------------------------------------------------------------------------

TEST(SafetensorsKeys, EncodeRefusesANameThatIsNotUtf8InsteadOfReplacingIt) {
  // Replaced by U+FFFD, both names would be written as one, twice: a header that every reader refuses.
  EXPECT_TRUE(Refused(EncodeSafetensorsHeader({U8("a\xff", 0), U8("a\xfe", 1)}, {}, 8), Code::kInvalidArgument,
                      "tensor name 'a\\xff' is not valid UTF-8 (byte 0xff at offset 1)"));
  EXPECT_TRUE(Refused(EncodeSafetensorsHeader({U8(std::string("a\0b", 3), 0)}, {}, 8), Code::kInvalidArgument,
                      "tensor name 'a\\x00b' contains a NUL byte"));
}

TEST(SafetensorsKeys, EncodeRefusesMetadataThatIsNotUtf8OrGivenTwice) {
  EXPECT_TRUE(Refused(EncodeSafetensorsHeader({}, {{"run", "caf\xe9"}}, 8), Code::kInvalidArgument,
                      "__metadata__ 'run': value 'caf\\xe9' is not valid UTF-8"));
  EXPECT_TRUE(Refused(EncodeSafetensorsHeader({}, {{"k\xc0\xaf", "v"}}, 8), Code::kInvalidArgument,
                      "__metadata__ key 'k\\xc0\\xaf' is not valid UTF-8"));
  EXPECT_TRUE(Refused(EncodeSafetensorsHeader({}, {{"k", "1"}, {"k", "2"}}, 8), Code::kInvalidArgument,
                      "__metadata__ key 'k' given twice"));
}

TEST(SafetensorsKeys, EncodeRefusesATensorNamedTwiceOrNamedMetadata) {
  EXPECT_TRUE(Refused(EncodeSafetensorsHeader({U8("w", 0), U8("w", 1)}, {}, 8), Code::kInvalidArgument,
                      "tensor 'w' given twice"));
  EXPECT_TRUE(Refused(EncodeSafetensorsHeader({U8("__metadata__", 0)}, {{"format", "pt"}}, 8), Code::kUnsupported,
                      "tensor '__metadata__': safetensors reserves the name for the file's metadata"));
}

TEST(SafetensorsKeys, EncodeRefusesADtypeSafetensorsDoesNotName) {
  EXPECT_TRUE(Refused(EncodeSafetensorsHeader({SafetensorsTensor{"nibbles", CKPT_DTYPE_I4, {2}, 0, 2}}, {}, 8),
                      Code::kUnsupported, "tensor 'nibbles' is I4, which safetensors has no name for"));
}

TEST(SafetensorsKeys, EncodeRefusesAHeaderLongerThanReadersAccept) {
  const std::string value(kMaxSafetensorsHeaderBytes, 'v');
  EXPECT_TRUE(Refused(EncodeSafetensorsHeader({}, {{"big", value}}, 8), Code::kUnsupported,
                      "over the 100000000 that readers accept"));
}

TEST(SafetensorsKeys, AwkwardButValidNamesAndMetadataRoundTripExactly) {
  const std::vector<std::string> names = {"",
                                          "__metadata__.not",
                                          "back\\slash",
                                          "caf\xc3\xa9",
                                          "ctl\x01\x1f\x7f",
                                          "c1\xc2\x85",
                                          "new\nline\ttab\r",
                                          "q\"uote'",
                                          "\xe6\x97\xa5\xe6\x9c\xac",
                                          "\xef\xbf\xbd",
                                          "\xf0\x9f\x98\x80",
                                          "\xf4\x8f\xbf\xbf"};
  std::vector<SafetensorsTensor> tensors;
  for (const std::string& name : names) tensors.push_back(U8(name, tensors.size()));
  const std::vector<std::pair<std::string, std::string>> metadata = {{"a\nb", "\"\\\x01"},
                                                                     {"\xc3\xa9", "\xf0\x9f\x98\x80"}};
  auto encoded = EncodeSafetensorsHeader(tensors, metadata, 8);
  ASSERT_TRUE(encoded.ok()) << encoded.status().message();
  for (size_t i = 8; i < encoded->size(); ++i) {
    EXPECT_GE(static_cast<unsigned char>((*encoded)[i]), 0x20) << "a raw control character at byte " << i;
  }
  const auto parsed = ParseSafetensorsHeader(*encoded, encoded->size() + names.size(), kOrigin);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  std::vector<std::string> sorted = names;  // as the parser gives them back
  std::sort(sorted.begin(), sorted.end());
  ASSERT_EQ(parsed->tensors.size(), sorted.size());
  for (size_t i = 0; i < sorted.size(); ++i) EXPECT_EQ(parsed->tensors[i].key, sorted[i]) << i;
  EXPECT_EQ(parsed->metadata, metadata);
}

}  // namespace
}  // namespace ckpt::runtime

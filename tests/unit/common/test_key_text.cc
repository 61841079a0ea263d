// Keys are text (common/key_text.h): strict UTF-8 without NUL, and shown escaped in messages.
#include <gtest/gtest.h>

#include <string>

#include "common/key_text.h"

namespace ckpt {
namespace {

TEST(KeyText, AcceptsUtf8OfEveryLengthAndControlCharactersOtherThanNul) {
  for (const std::string key :
       {"a.weight", "", "caf\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac", "\xf0\x9f\x98\x80", "\xef\xbf\xbf",
        "\xf4\x8f\xbf\xbf", "tab\tnew\nline\x01\x7f", "\xc2\x85", "quote\"back\\slash'"}) {
    EXPECT_EQ(KeyTextProblem(key), "") << Quoted(key);
  }
}

TEST(KeyText, RefusesANulNamingItsOffset) {
  EXPECT_EQ(KeyTextProblem(std::string("ab\0c", 4)), "contains a NUL byte at offset 2");
}

TEST(KeyText, RefusesBytesThatAreNotUtf8NamingTheFirst) {
  EXPECT_EQ(KeyTextProblem("a\xff"), "is not valid UTF-8 (byte 0xff at offset 1)");
  EXPECT_EQ(KeyTextProblem("\x80"), "is not valid UTF-8 (byte 0x80 at offset 0)") << "a lone continuation byte";
  EXPECT_EQ(KeyTextProblem("x\xc3"), "is not valid UTF-8 (byte 0xc3 at offset 1)") << "a truncated sequence";
  EXPECT_EQ(KeyTextProblem("\xe6\x97x"), "is not valid UTF-8 (byte 0xe6 at offset 0)") << "a short sequence";
}

TEST(KeyText, RefusesOverlongForms) {
  for (const std::string key :
       {"\xc0\xaf", "\xc1\xbf", "\xe0\x80\xaf", "\xe0\x9f\xbf", "\xf0\x80\x80\xaf", "\xf0\x8f\xbf\xbf", "\xc0\x80"}) {
    EXPECT_NE(KeyTextProblem(key).find("not valid UTF-8"), std::string::npos) << Quoted(key);
  }
}

TEST(KeyText, RefusesSurrogatesAndCodePointsAboveTheLast) {
  for (const std::string key : {"\xed\xa0\x80", "\xed\xbf\xbf", "\xed\xa0\xbd\xed\xb8\x80", "\xf4\x90\x80\x80",
                                "\xf5\x80\x80\x80", "\xf8\x88\x80\x80\x80", "\xfe"}) {
    EXPECT_NE(KeyTextProblem(key).find("not valid UTF-8"), std::string::npos) << Quoted(key);
  }
  EXPECT_EQ(KeyTextProblem("\xed\x9f\xbf"), "") << "U+D7FF, the last code point before the surrogates";
}

TEST(KeyText, QuotedShowsEveryByteThatCouldMisleadAsAnEscape) {
  EXPECT_EQ(Quoted("a.weight"), "'a.weight'");
  EXPECT_EQ(Quoted("caf\xc3\xa9"), "'caf\xc3\xa9'") << "valid UTF-8 stays as it is";
  EXPECT_EQ(Quoted(std::string("a\0b", 3)), "'a\\x00b'");
  EXPECT_EQ(Quoted("a\xff\xfe"), "'a\\xff\\xfe'");
  EXPECT_EQ(Quoted("\xed\xa0\x80"), "'\\xed\\xa0\\x80'") << "a surrogate is three bad bytes";
  EXPECT_EQ(Quoted("\x1b[31m\n\t\r\x7f"), "'\\x1b[31m\\n\\t\\r\\x7f'");
  EXPECT_EQ(Quoted("\xc2\x85"), "'\\u0085'") << "a C1 control character";
  EXPECT_EQ(Quoted("it's a\\b"), "'it\\'s a\\\\b'");
}

TEST(KeyText, TwoKeysThatDifferOnlyInBadBytesQuoteDifferently) {
  EXPECT_NE(Quoted("a\xff"), Quoted("a\xfe"));
  EXPECT_NE(Quoted("a\xff"), Quoted("a\xef\xbf\xbd")) << "not as U+FFFD, which a key may hold";
}

TEST(KeyText, CheckKeyTextNamesWhatItChecksWithTheCodeAsked) {
  EXPECT_TRUE(CheckKeyText("ok", "tensor key", Code::kCorrupt).ok());
  const Status refused = CheckKeyText("w\xc0\xaf", "tensor key", Code::kCorrupt);
  EXPECT_EQ(refused.code(), Code::kCorrupt);
  EXPECT_EQ(refused.message(), "tensor key 'w\\xc0\\xaf' is not valid UTF-8 (byte 0xc0 at offset 1)");
}

}  // namespace
}  // namespace ckpt

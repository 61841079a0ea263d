// The XML replies of S3 read through expat (xml_replies.h), from canned documents.
#include <gtest/gtest.h>

#include "io/s3/xml_replies.h"

namespace ckpt::s3 {
namespace {

constexpr char kNamespace[] = " xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"";

TEST(S3Xml, ErrorDocumentGivesCodeMessageResourceAndRequestId) {
  std::string body = R"(<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message><Resource>/b/k</Resource>
<RequestId>tx0001</RequestId></Error>)";
  EXPECT_TRUE(LooksLikeErrorDocument(body));
  Result<ErrorDocument> error = ParseErrorDocument(body, "s3://b/k: GET");
  ASSERT_TRUE(error.ok()) << error.status().message();
  EXPECT_EQ(error->code, "NoSuchKey");
  EXPECT_EQ(error->message, "The specified key does not exist.");
  EXPECT_EQ(error->resource, "/b/k");
  EXPECT_EQ(error->request_id, "tx0001");
}

TEST(S3Xml, OnlyAnErrorRootLooksLikeAnErrorDocument) {
  EXPECT_FALSE(LooksLikeErrorDocument("<CompleteMultipartUploadResult><Error/></CompleteMultipartUploadResult>"));
  EXPECT_FALSE(LooksLikeErrorDocument(""));
  EXPECT_TRUE(LooksLikeErrorDocument("\n\n<Error><Code>InternalError</Code></Error>"));
}

TEST(S3Xml, InitiateResultGivesTheUploadId) {
  std::string body = std::string("<InitiateMultipartUploadResult") + kNamespace +
                     "><Bucket>b</Bucket><Key>k</Key><UploadId>2~abc</UploadId></InitiateMultipartUploadResult>";
  Result<std::string> upload_id = ParseInitiateResult(body, "s3://b/k: CreateMultipartUpload");
  ASSERT_TRUE(upload_id.ok()) << upload_id.status().message();
  EXPECT_EQ(*upload_id, "2~abc");
}

TEST(S3Xml, CompleteResultGivesTheEtagWithEntitiesDecoded) {
  Result<std::string> etag = ParseCompleteResult(
      "<CompleteMultipartUploadResult><ETag>&quot;abc-3&quot;</ETag></CompleteMultipartUploadResult>", "x");
  ASSERT_TRUE(etag.ok()) << etag.status().message();
  EXPECT_EQ(*etag, "\"abc-3\"");
}

TEST(S3Xml, CompleteResultWithAnEmptyEtagGivesEmptyAndWithoutOneIsCorrupt) {
  Result<std::string> empty = ParseCompleteResult(
      "<CompleteMultipartUploadResult><Key>k</Key><ETag></ETag></CompleteMultipartUploadResult>", "x");
  ASSERT_TRUE(empty.ok()) << empty.status().message();
  EXPECT_EQ(*empty, "");
  EXPECT_EQ(ParseCompleteResult("<CompleteMultipartUploadResult/>", "x").status().code(), Code::kCorrupt);
}

TEST(S3Xml, ListObjectsPageGivesKeysSizesTimesAndTheToken) {
  std::string body = std::string("<ListBucketResult") + kNamespace + R"(><Name>b</Name><IsTruncated>true</IsTruncated>
<Contents><Key>p/a</Key><LastModified>2026-12-02T12:00:01.000Z</LastModified><Size>5</Size></Contents>
<Contents><Key>p/b &amp; c</Key><LastModified>2026-12-02T12:00:02.000Z</LastModified><Size>0</Size></Contents>
<NextContinuationToken>tok/1=</NextContinuationToken></ListBucketResult>)";
  Result<ObjectPage> page = ParseListObjectsResult(body, "s3://b/p: ListObjectsV2");
  ASSERT_TRUE(page.ok()) << page.status().message();
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].key, "p/a");
  EXPECT_EQ(page->objects[0].size, 5u);
  EXPECT_EQ(page->objects[0].last_modified_unix, 1796212801);
  EXPECT_EQ(page->objects[1].key, "p/b & c");
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_continuation_token, "tok/1=");
}

TEST(S3Xml, ListUploadsPageGivesUploadsAndMarkers) {
  std::string body = R"(<ListMultipartUploadsResult><IsTruncated>true</IsTruncated>
<NextKeyMarker>k2</NextKeyMarker><NextUploadIdMarker>u2</NextUploadIdMarker>
<Upload><Key>k1</Key><UploadId>u1</UploadId><Initiated>2026-12-02T12:00:00.000Z</Initiated></Upload>
<Upload><Key>k2</Key><UploadId>u2</UploadId><Initiated>2026-12-02T12:00:00Z</Initiated></Upload>
</ListMultipartUploadsResult>)";
  Result<UploadPage> page = ParseListUploadsResult(body, "x");
  ASSERT_TRUE(page.ok()) << page.status().message();
  ASSERT_EQ(page->uploads.size(), 2u);
  EXPECT_EQ(page->uploads[1].key, "k2");
  EXPECT_EQ(page->uploads[1].upload_id, "u2");
  EXPECT_EQ(page->uploads[0].initiated_unix, 1796212800);
  EXPECT_EQ(page->next_key_marker, "k2");
  EXPECT_EQ(page->next_upload_id_marker, "u2");
}

TEST(S3Xml, MalformedXmlIsCorruptNamingTheRequest) {
  Result<ObjectPage> page =
      ParseListObjectsResult("<ListBucketResult><Contents></ListBucketResult>", "s3://b/p: ListObjectsV2");
  ASSERT_FALSE(page.ok());
  EXPECT_EQ(page.status().code(), Code::kCorrupt);
  EXPECT_NE(page.status().message().find("s3://b/p: ListObjectsV2: malformed XML"), std::string::npos)
      << page.status().message();
}

TEST(S3Xml, AnotherDocumentThanExpectedIsCorrupt) {
  Result<std::string> upload_id = ParseInitiateResult("<Error><Code>X</Code></Error>", "what");
  ASSERT_FALSE(upload_id.ok());
  EXPECT_EQ(upload_id.status().code(), Code::kCorrupt);
  EXPECT_NE(upload_id.status().message().find("expected a <InitiateMultipartUploadResult>"), std::string::npos);
}

TEST(S3Xml, MissingRequiredFieldsAreCorrupt) {
  EXPECT_EQ(ParseInitiateResult("<InitiateMultipartUploadResult/>", "x").status().code(), Code::kCorrupt);
  EXPECT_EQ(ParseListObjectsResult("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>", "x")
                .status()
                .code(),
            Code::kCorrupt);
  EXPECT_EQ(ParseListObjectsResult("<ListBucketResult><Contents><Size>-1</Size></Contents></ListBucketResult>", "x")
                .status()
                .code(),
            Code::kCorrupt);
}

TEST(S3Xml, OversizedRepliesAreRefusedUnparsed) {
  std::string body = "<ListBucketResult>" + std::string(kMaxXmlReplyBytes, ' ') + "</ListBucketResult>";
  Result<ObjectPage> page = ParseListObjectsResult(body, "x");
  ASSERT_FALSE(page.ok());
  EXPECT_EQ(page.status().code(), Code::kCorrupt);
  EXPECT_NE(page.status().message().find("larger than"), std::string::npos);
}

TEST(S3Xml, DeeplyNestedDocumentsAreRefused) {
  std::string body;
  for (int i = 0; i < 100; ++i) body += "<a>";
  for (int i = 0; i < 100; ++i) body += "</a>";
  EXPECT_EQ(ParseErrorDocument(body, "x").status().code(), Code::kCorrupt);
}

TEST(S3Xml, IsoTimesParseToUnixSeconds) {
  EXPECT_EQ(ParseIsoTime("1970-01-01T00:00:10.000Z"), 10);
  EXPECT_EQ(ParseIsoTime("garbage"), -1);
}

}  // namespace
}  // namespace ckpt::s3

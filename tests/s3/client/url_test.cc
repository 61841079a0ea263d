// s3:// URLs (ParseUrl, IsS3Url, UrlOf) and the HTTP URLs of requests (request_url.h).
#include <gtest/gtest.h>

#include "io/s3/request_url.h"
#include "io/s3/s3_client.h"

namespace ckpt::s3 {
namespace {

TEST(S3Url, ParsesBucketAndPrefixWithoutTrailingSlash) {
  Result<Location> location = ParseUrl("s3://my-bucket.1/runs/a-1/");
  ASSERT_TRUE(location.ok()) << location.status().message();
  EXPECT_EQ(location->bucket, "my-bucket.1");
  EXPECT_EQ(location->prefix, "runs/a-1");
}

TEST(S3Url, BucketAloneHasAnEmptyPrefix) {
  for (const char* url : {"s3://bucket", "s3://bucket/"}) {
    Result<Location> location = ParseUrl(url);
    ASSERT_TRUE(location.ok()) << url << ": " << location.status().message();
    EXPECT_EQ(location->bucket, "bucket");
    EXPECT_EQ(location->prefix, "");
  }
}

TEST(S3Url, RefusesWhatS3WouldRefuseNamingWhy) {
  struct Case {
    const char* url;
    const char* why;
  } cases[] = {
      {"s3://", "no bucket"},
      {"s3:///key", "no bucket"},
      {"s3://ab", "3 to 63"},
      {"s3://Bucket", "a-z"},
      {"s3://bucket_x", "a-z"},
      {"s3://-bucket", "starts and ends"},
      {"s3://bucket-", "starts and ends"},
      {"s3://a..b", ".."},
      {"s3://192.168.1.1", "IP address"},
      {"s3://bucket//x", "empty path component"},
      {"s3://bucket/a//b", "empty path component"},
      {"s3://bucket/a/./b", "'.' or '..'"},
      {"s3://bucket/../b", "'.' or '..'"},
      {"s3://bucket/a/..", "'.' or '..'"},
      {"s3://bucket/a\nb", "control character"},
      {"file:///tmp/x", "s3://"},
  };
  for (const Case& c : cases) {
    Result<Location> location = ParseUrl(c.url);
    ASSERT_FALSE(location.ok()) << c.url;
    EXPECT_EQ(location.status().code(), Code::kInvalidArgument) << c.url;
    EXPECT_NE(location.status().message().find(c.why), std::string::npos) << location.status().message();
  }
}

TEST(S3Url, IsS3UrlLooksAtTheSchemeOnly) {
  EXPECT_TRUE(IsS3Url("s3://bucket/x"));
  EXPECT_FALSE(IsS3Url("/tmp/s3://x"));
  EXPECT_FALSE(IsS3Url("S3://bucket"));
}

TEST(S3Url, UrlOfJoinsBucketAndKey) {
  EXPECT_EQ(UrlOf("b", "dir/k.bin"), "s3://b/dir/k.bin");
  EXPECT_EQ(UrlOf("b", ""), "s3://b");
}

TEST(S3Url, PercentEncodingKeepsUnreservedAndSlashOnly) {
  EXPECT_EQ(PercentEncode("dir/a-1.bin_~", true), "dir/a-1.bin_~");
  EXPECT_EQ(PercentEncode("a b+c=d&é/x", true), "a%20b%2Bc%3Dd%26%C3%A9/x");
  EXPECT_EQ(PercentEncode("a/b", false), "a%2Fb");
}

Settings At(const std::string& endpoint, Addressing addressing = Addressing::kAuto) {
  Settings settings;
  settings.endpoint = endpoint;
  settings.addressing = addressing;
  return settings;
}

TEST(S3Url, CustomEndpointsUsePathStyle) {
  EXPECT_EQ(RequestUrl(At("http://127.0.0.1:9000"), "bucket", "a b/c"), "http://127.0.0.1:9000/bucket/a%20b/c");
}

TEST(S3Url, AwsEndpointsUseVirtualHostsUnlessTheBucketHasDots) {
  Settings aws = At("https://s3.eu-west-1.amazonaws.com");
  EXPECT_EQ(RequestUrl(aws, "bucket", "k"), "https://bucket.s3.eu-west-1.amazonaws.com/k");
  EXPECT_EQ(RequestUrl(aws, "my.bucket", "k"), "https://s3.eu-west-1.amazonaws.com/my.bucket/k");
  EXPECT_EQ(RequestUrl(At("https://s3.eu-west-1.amazonaws.com", Addressing::kPath), "bucket", "k"),
            "https://s3.eu-west-1.amazonaws.com/bucket/k");
  EXPECT_EQ(RequestUrl(At("http://minio:9000", Addressing::kVirtualHosted), "bucket", "k"),
            "http://bucket.minio:9000/k");
}

TEST(S3Url, QueryIsSortedAndEncodedAsSigV4CanonicalizesIt) {
  EXPECT_EQ(RequestUrl(At("http://h"), "b", "k", {{"uploadId", "x/y+z"}, {"partNumber", "3"}}),
            "http://h/b/k?partNumber=3&uploadId=x%2Fy%2Bz");
  EXPECT_EQ(RequestUrl(At("http://h"), "b", "", {{"uploads", ""}, {"prefix", "p/"}}),
            "http://h/b/?prefix=p%2F&uploads=");
}

}  // namespace
}  // namespace ckpt::s3

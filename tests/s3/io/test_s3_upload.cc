// The part size of an object's upload (io/s3_upload.h), which needs no server: S3 takes at most 10,000 parts of at
// most 5 GiB, so a large object's parts grow past the configured size, and a larger object is refused up front.
#include <gtest/gtest.h>

#include <memory>

#include "io/s3/s3_client.h"
#include "io/s3_upload.h"

namespace ckpt::io {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

class S3FileJobsPartSizeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    s3::Settings settings;
    settings.endpoint = "http://127.0.0.1:9";  // never asked: choosing a part size sends nothing
    settings.access_key_id = "unused";
    settings.secret_access_key = "unused";
    settings.part_bytes = 16 * kMiB;
    Result<std::unique_ptr<s3::Client>> client = s3::Client::Create(settings);
    if (!client.ok() && client.status().code() == Code::kUnsupported) GTEST_SKIP() << client.status().message();
    ASSERT_TRUE(client.ok()) << client.status().message();
    client_ = std::move(client.value());
  }

  uint64_t PartBytesOf(uint64_t final_size) {
    Result<std::unique_ptr<ObjectUpload>> upload =
        ObjectUpload::Start(*client_, "s3://bucket/ckpt/data/0-0.bin", final_size);
    EXPECT_TRUE(upload.ok()) << upload.status().message();
    return upload.ok() ? upload.value()->part_bytes() : 0;
  }

  std::unique_ptr<s3::Client> client_;
};

TEST_F(S3FileJobsPartSizeTest, AnObjectOfUpTo10000PartsUsesTheConfiguredPartSize) {
  EXPECT_EQ(PartBytesOf(0), 16 * kMiB);
  EXPECT_EQ(PartBytesOf(10000 * 16 * kMiB), 16 * kMiB);
}

TEST_F(S3FileJobsPartSizeTest, ALargerObjectsPartsGrowToWholeMiBSoThatItTakesAtMost10000) {
  const uint64_t final_size = 10000 * 16 * kMiB + 1;
  const uint64_t part_bytes = PartBytesOf(final_size);
  EXPECT_EQ(part_bytes, 17 * kMiB);
  EXPECT_LE((final_size + part_bytes - 1) / part_bytes, 10000u);
  EXPECT_EQ(PartBytesOf(5000ull * kGiB) % kMiB, 0u);
  EXPECT_LE((5000ull * kGiB + PartBytesOf(5000ull * kGiB) - 1) / PartBytesOf(5000ull * kGiB), 10000u);
}

TEST_F(S3FileJobsPartSizeTest, AnObjectBeyond10000PartsOf5GiBIsRefused) {
  const Result<std::unique_ptr<ObjectUpload>> upload =
      ObjectUpload::Start(*client_, "s3://bucket/ckpt/data/0-0.bin", 10000 * 5 * kGiB + 1);
  EXPECT_EQ(upload.status().code(), Code::kInvalidArgument);
}

TEST_F(S3FileJobsPartSizeTest, AUrlWithoutAKeyIsRefused) {
  EXPECT_EQ(ObjectUpload::Start(*client_, "s3://bucket", 1).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace ckpt::io

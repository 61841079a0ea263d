// A save checksums each block as it stages it (io::StreamingCopyChecksummed), the staging threads of a large window
// each taking whole blocks: the checksums it records must be those of the bytes stored, whichever thread copied
// them and wherever a tensor's last, shorter block falls. A wrong one makes the reader's verification fail.
// ctest-labels: threaded
#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "ckpt.h"
#include "tests/unit/support/temp_dir.h"

namespace {

class StagedChecksumsTest : public ckpt::testing::TempDirTest {
 protected:
  void SetUp() override {
    ASSERT_EQ(ckpt_error_create(&err_), CKPT_OK);
    ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
    opts.rank = 0;
    opts.world_size = 1;
    opts.io_workers = 0;           // unit tests link libckpt statically: no worker executable beside them
    opts.arena_bytes = 64u << 20;  // room for one window of the whole state (a quarter of the arena at most)
    ASSERT_EQ(ckpt_context_create(&opts, &ctx_, err_), CKPT_OK) << message();
    ASSERT_EQ(ckpt_state_create(&state_, err_), CKPT_OK);
  }
  void TearDown() override {
    ckpt_state_free(state_);
    ckpt_context_free(ctx_);
    ckpt_error_free(err_);
  }
  std::string message() const { return ckpt_error_message(err_); }

  // Adds a 1-D U8 tensor `key` of `bytes` bytes, each a function of its index and the key's length.
  void AddBytes(const char* key, uint64_t bytes) {
    std::vector<uint8_t>& data = buffers_.emplace_back(bytes);
    for (uint64_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 7 + i / 4093 + std::string(key).size());
    shapes_.push_back(bytes);
    ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
    shard.key = key;
    shard.dtype = CKPT_DTYPE_U8;
    shard.ndim = 1;
    shard.global_shape = &shapes_.back();
    shard.local_shape = &shapes_.back();
    shard.global_offset = &zero_;
    shard.data = data.data();
    shard.data_size = bytes;
    ASSERT_EQ(ckpt_state_add_tensor(state_, &shard, err_), CKPT_OK) << message();
  }

  std::string Save() {
    const std::string path = Path("step-1");
    ckpt_request_t* request = nullptr;
    EXPECT_EQ(ckpt_save(ctx_, state_, path.c_str(), nullptr, &request, err_), CKPT_OK) << message();
    EXPECT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
    ckpt_request_free(request);
    return path;
  }

  ckpt_error_t* err_ = nullptr;
  ckpt_context_t* ctx_ = nullptr;
  ckpt_state_t* state_ = nullptr;
  std::vector<std::vector<uint8_t>> buffers_;
  std::deque<uint64_t> shapes_;  // the shards point at their shapes: a deque keeps them in place
  uint64_t zero_ = 0;
};

// 12 MiB and more in one window: two staging threads, the cut between them inside the larger tensor, at one of its
// block boundaries; both tensors end in a short block, and a small one goes through the copy below 64 KiB.
TEST_F(StagedChecksumsTest, AWindowCopiedByTwoThreadsVerifiesWholeAndReadsBackExactly) {
  ASSERT_NO_FATAL_FAILURE(AddBytes("first", (3u << 20) + 100));
  ASSERT_NO_FATAL_FAILURE(AddBytes("second", (9u << 20) + 12345));
  ASSERT_NO_FATAL_FAILURE(AddBytes("small", 5000));
  const std::string path = Save();

  ckpt_reader_t* reader = nullptr;
  ASSERT_EQ(ckpt_reader_open(path.c_str(), &reader, err_), CKPT_OK) << message();
  EXPECT_EQ(ckpt_reader_verify(reader, err_), CKPT_OK) << message();
  const char* keys[] = {"first", "second", "small"};
  for (size_t t = 0; t < buffers_.size(); ++t) {
    std::vector<uint8_t> got(buffers_[t].size());
    const uint64_t offset = 0, box = got.size();
    ASSERT_EQ(ckpt_reader_read(reader, keys[t], 1, &offset, &box, got.data(), got.size(), err_), CKPT_OK) << message();
    EXPECT_TRUE(got == buffers_[t]) << keys[t] << " reads back other bytes";
  }
  ckpt_reader_free(reader);
}

}  // namespace

// A checkpoint in memory (a tmpfs, as the memory tier's agents hold theirs) is read by the loading process itself
// rather than through the workers and the arena (runtime/load/chunk_fetcher.cc): straight into the destination where a
// piece lands there whole, else through a buffer; every block is still checked against its checksum, and any region
// of any chunk arrives where it belongs and nowhere else.
// ctest-labels: threaded
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "ckpt.h"
#include "runtime/format/manifest.h"
#include "tests/unit/support/temp_dir.h"

namespace {

class TmpfsLoadTest : public ckpt::testing::TempDirTest {
 protected:
  static constexpr uint64_t kRows = 300, kCols = 1000;  // 2.4 MB of f64: several 1 MiB blocks

  TmpfsLoadTest() : TempDirTest("/dev/shm") {}

  void SetUp() override {
    ASSERT_EQ(ckpt_error_create(&err_), CKPT_OK);
    ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
    opts.rank = 0;
    opts.world_size = 1;
    opts.io_workers = 0;
    ASSERT_EQ(ckpt_context_create(&opts, &ctx_, err_), CKPT_OK) << ckpt_error_message(err_);
    values_.resize(kRows * kCols);
    for (size_t i = 0; i < values_.size(); ++i) values_[i] = 0.25 * static_cast<double>(i);
    ckpt_state_t* state = StateOver(values_.data(), {kRows, kCols}, {0, 0});
    ckpt_request_t* request = nullptr;  // checksum blocks of 1 MiB, the default
    ASSERT_EQ(ckpt_save(ctx_, state, path().c_str(), nullptr, &request, err_), CKPT_OK) << ckpt_error_message(err_);
    ASSERT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << ckpt_error_message(err_);
    ckpt_request_free(request);
    ckpt_state_free(state);
  }
  void TearDown() override {
    ckpt_context_free(ctx_);
    ckpt_error_free(err_);
  }

  std::string path() const { return Path("ck"); }
  // A state asking for rows [row0, row0 + shape[0]) of "x" into `data`.
  ckpt_state_t* StateOver(double* data, std::vector<uint64_t> shape, std::vector<uint64_t> offset) {
    return StateOf("x", {kRows, kCols}, data, std::move(shape), std::move(offset));
  }
  // A state asking for the box (`offset`, `shape`) of the F64 tensor `key` of shape `global` into `data`.
  ckpt_state_t* StateOf(const char* key, std::vector<uint64_t> global, double* data, std::vector<uint64_t> shape,
                        std::vector<uint64_t> offset) {
    globals_.push_back(std::move(global));
    shapes_.push_back(std::move(shape));
    offsets_.push_back(std::move(offset));
    ckpt_state_t* state = nullptr;
    EXPECT_EQ(ckpt_state_create(&state, err_), CKPT_OK);
    ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
    shard.key = key;
    shard.dtype = CKPT_DTYPE_F64;
    shard.ndim = static_cast<uint32_t>(globals_.back().size());
    shard.global_shape = globals_.back().data();
    shard.local_shape = shapes_.back().data();
    shard.global_offset = offsets_.back().data();
    shard.data = data;
    shard.data_size = sizeof(double);
    for (uint64_t extent : shapes_.back()) shard.data_size *= extent;
    EXPECT_EQ(ckpt_state_add_tensor(state, &shard, err_), CKPT_OK) << ckpt_error_message(err_);
    return state;
  }

  ckpt_error_t* err_ = nullptr;
  ckpt_context_t* ctx_ = nullptr;
  std::vector<double> values_;
  std::vector<std::vector<uint64_t>> globals_, shapes_, offsets_;
};

TEST_F(TmpfsLoadTest, LoadsARegionAcrossBlocksThroughTheBuffer) {
  const uint64_t rows = 150, row0 = 100, cols = 400, col0 = 300;
  std::vector<double> got(rows * cols, -1);
  ckpt_state_t* state = StateOver(got.data(), {rows, cols}, {row0, col0});
  ASSERT_EQ(ckpt_load(ctx_, state, path().c_str(), nullptr, err_), CKPT_OK) << ckpt_error_message(err_);
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(got[r * cols + c], values_[(row0 + r) * kCols + col0 + c]) << "row " << r << " column " << c;
    }
  }
  ckpt_state_free(state);
}

// Rows [37, 290) of every column: one run of the destination, which holds the middle pieces whole (read straight
// into it) but only parts of the first and last (read through the buffer); nothing outside it is written.
TEST_F(TmpfsLoadTest, LoadsARowBlockPartlyStraightIntoItsBufferAndNothingAroundIt) {
  const uint64_t rows = 253, row0 = 37, guard = 4096;
  const double fill = -7.0;
  std::vector<double> got(guard + rows * kCols + guard, fill);
  ckpt_state_t* state = StateOver(got.data() + guard, {rows, kCols}, {row0, 0});
  ASSERT_EQ(ckpt_load(ctx_, state, path().c_str(), nullptr, err_), CKPT_OK) << ckpt_error_message(err_);
  for (uint64_t i = 0; i < rows * kCols; ++i) {
    ASSERT_EQ(got[guard + i], values_[row0 * kCols + i]) << "element " << i;
  }
  for (uint64_t i = 0; i < guard; ++i) {
    ASSERT_EQ(got[i], fill) << "before the destination, element " << i;
    ASSERT_EQ(got[guard + rows * kCols + i], fill) << "after the destination, element " << i;
  }
  ckpt_state_free(state);
}

TEST_F(TmpfsLoadTest, AFlippedByteIsACorruptBlockNamingTheFile) {
  const std::string data_file = path() + "/data/0-0.bin";
  std::fstream file(data_file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(file.good()) << data_file;
  file.seekp(1500000);  // inside the second block
  file.put('\x5a');
  file.close();
  std::vector<double> got(kRows * kCols);
  ckpt_state_t* state = StateOver(got.data(), {kRows, kCols}, {0, 0});
  EXPECT_EQ(ckpt_load(ctx_, state, path().c_str(), nullptr, err_), CKPT_E_CORRUPT);
  const std::string message = ckpt_error_message(err_);
  EXPECT_NE(message.find("checksum mismatch"), std::string::npos) << message;
  EXPECT_NE(message.find("0-0.bin"), std::string::npos) << message;
  ckpt_state_free(state);
}

// A forged manifest whose one block is larger than a load verifies at once (ckpt writes 1 MiB blocks) is refused by
// name, never buffered whole: half of an 80 MiB tensor is asked for, so its block cannot be read into the
// destination either.
TEST_F(TmpfsLoadTest, AForgedBlockTooLargeToVerifyIsRefusedByName) {
  const uint64_t elements = 10u << 20;  // 80 MiB of f64
  std::vector<double> big(elements, 1.5);
  ckpt_state_t* state = StateOf("big", {elements}, big.data(), {elements}, {0});
  const std::string forged = Path("forged");
  ckpt_request_t* request = nullptr;
  ASSERT_EQ(ckpt_save(ctx_, state, forged.c_str(), nullptr, &request, err_), CKPT_OK) << ckpt_error_message(err_);
  ASSERT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << ckpt_error_message(err_);
  ckpt_request_free(request);
  ckpt_state_free(state);

  ckpt::Result<ckpt::runtime::Manifest> manifest = ckpt::runtime::ReadManifest(forged);
  ASSERT_TRUE(manifest.ok()) << manifest.status().message();
  ASSERT_EQ(manifest->tensors.size(), 1u);
  for (ckpt::runtime::ChunkRecord& chunk : manifest->tensors[0].chunks) {
    chunk.bytes.block_size = 128ull << 20;
    chunk.bytes.block_checksums = {0};
  }
  ASSERT_EQ(std::remove((forged + "/MANIFEST").c_str()), 0);
  ASSERT_TRUE(ckpt::runtime::WriteManifest(forged, *manifest).ok());

  std::vector<double> got(elements / 2);
  state = StateOf("big", {elements}, got.data(), {elements / 2}, {0});
  EXPECT_EQ(ckpt_load(ctx_, state, forged.c_str(), nullptr, err_), CKPT_E_CORRUPT);
  const std::string message = ckpt_error_message(err_);
  EXPECT_NE(message.find("block size 134217728"), std::string::npos) << message;
  ckpt_state_free(state);
}

// Safetensors weights on a tmpfs are read the same way; their tensors start at any multiple of 8 bytes, not on a
// page.
TEST_F(TmpfsLoadTest, LoadsSafetensorsWhoseTensorsStartInsideAPage) {
  const std::string small = R"("a":{"dtype":"F64","shape":[3],"data_offsets":[0,24]})";
  const uint64_t b_bytes = sizeof(double) * kRows * kCols;
  std::string header = "{" + small + R"(,"b":{"dtype":"F64","shape":[)" + std::to_string(kRows) + "," +
                       std::to_string(kCols) + R"(],"data_offsets":[24,)" + std::to_string(24 + b_bytes) + "]}}";
  header.append((8 - header.size() % 8) % 8, ' ');
  const std::string file = Path("weights.safetensors");
  {
    std::ofstream out(file, std::ios::binary);
    const uint64_t length = header.size();  // little-endian, as on every machine this runs on
    out.write(reinterpret_cast<const char*>(&length), sizeof length);
    out << header;
    const double a[3] = {1.5, 2.5, 3.5};
    out.write(reinterpret_cast<const char*>(a), sizeof a);
    out.write(reinterpret_cast<const char*>(values_.data()), static_cast<std::streamsize>(b_bytes));
  }
  const uint64_t rows = 120, row0 = 170;
  std::vector<double> got(rows * kCols, -1);
  ckpt_state_t* state = nullptr;
  ASSERT_EQ(ckpt_state_create(&state, err_), CKPT_OK);
  static const uint64_t global[2] = {kRows, kCols};
  const uint64_t local[2] = {rows, kCols}, offset[2] = {row0, 0};
  ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
  shard.key = "b";
  shard.dtype = CKPT_DTYPE_F64;
  shard.ndim = 2;
  shard.global_shape = global;
  shard.local_shape = local;
  shard.global_offset = offset;
  shard.data = got.data();
  shard.data_size = sizeof(double) * got.size();
  ASSERT_EQ(ckpt_state_add_tensor(state, &shard, err_), CKPT_OK) << ckpt_error_message(err_);
  ckpt_load_options opts = CKPT_LOAD_OPTIONS_INIT;
  opts.unexpected_keys = CKPT_STRICT_IGNORE;
  ASSERT_EQ(ckpt_load(ctx_, state, file.c_str(), &opts, err_), CKPT_OK) << ckpt_error_message(err_);
  for (uint64_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], values_[row0 * kCols + i]) << "element " << i;
  ckpt_state_free(state);
}

}  // namespace

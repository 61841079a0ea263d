// Safetensors weights as a load and reader source (runtime/format/checkpoint_source.h): a single file, a Hugging Face
// directory with its index, the index itself; boxes of tensors that start anywhere in the file; what is refused.
// ctest-labels: threaded
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "ckpt.h"
#include "runtime/format/checkpoint_source.h"
#include "runtime/format/safetensors.h"
#include "tests/unit/support/temp_dir.h"

namespace {

namespace rt = ckpt::runtime;

std::vector<float> Iota(size_t n, float start) {
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = start + static_cast<float>(i);
  return values;
}

// Writes a safetensors file of F32 tensors (in the order given, packed), its data starting 8-byte aligned only, so
// that tensors start at offsets no direct read could use as they are.
void WriteF32File(const std::string& path, const std::vector<std::pair<std::string, std::vector<uint64_t>>>& shapes,
                  const std::vector<std::vector<float>>& values, uint64_t truncate_by = 0) {
  std::vector<rt::SafetensorsTensor> tensors;
  std::string data;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const uint64_t begin = data.size();
    data.append(reinterpret_cast<const char*>(values[i].data()), values[i].size() * sizeof(float));
    tensors.push_back(rt::SafetensorsTensor{shapes[i].first, CKPT_DTYPE_F32, shapes[i].second, begin, data.size()});
  }
  const std::string header = rt::EncodeSafetensorsHeader(tensors, {{"source", "unit-test"}}, 8).value();
  std::ofstream out(path, std::ios::binary);
  const std::string bytes = header + data;
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() - truncate_by));
}

class CheckpointSourceTest : public ckpt::testing::TempDirTest {
 protected:
  void SetUp() override {
    ASSERT_EQ(ckpt_error_create(&err_), CKPT_OK);
    ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
    opts.rank = 0;
    opts.world_size = 1;
    opts.io_workers = 0;  // in-process I/O threads: the same aligned, direct reads as worker processes
    ASSERT_EQ(ckpt_context_create(&opts, &ctx_, err_), CKPT_OK) << message();
    ASSERT_EQ(ckpt_state_create(&state_, err_), CKPT_OK);
  }
  void TearDown() override {
    ckpt_state_free(state_);
    ckpt_context_free(ctx_);
    ckpt_error_free(err_);
  }
  std::string message() const { return ckpt_error_message(err_); }

  // Registers the box (offset, shape) of a tensor of `global` shape, to be loaded into `buffer`.
  void Ask(const char* key, std::vector<uint64_t> global, std::vector<uint64_t> offset, std::vector<uint64_t> shape,
           void* buffer, uint64_t bytes, int32_t dtype = CKPT_DTYPE_F32, uint32_t flags = 0) {
    boxes_.push_back(std::move(global));
    boxes_.push_back(std::move(offset));
    boxes_.push_back(std::move(shape));
    ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
    shard.key = key;
    shard.dtype = dtype;
    shard.ndim = static_cast<uint32_t>(boxes_.back().size());
    shard.global_shape = boxes_[boxes_.size() - 3].data();
    shard.global_offset = boxes_[boxes_.size() - 2].data();
    shard.local_shape = boxes_.back().data();
    shard.flags = flags;
    shard.data = buffer;
    shard.data_size = bytes;
    ASSERT_EQ(ckpt_state_add_tensor(state_, &shard, err_), CKPT_OK) << message();
  }

  void WriteModel() {
    WriteF32File(Path("model.safetensors"), {{"a.bias", {3}}, {"w.weight", {6, 5}}}, {Iota(3, 100), Iota(30, 0)});
  }

  ckpt_error_t* err_ = nullptr;
  ckpt_context_t* ctx_ = nullptr;
  ckpt_state_t* state_ = nullptr;
  std::vector<std::vector<uint64_t>> boxes_;
};

TEST_F(CheckpointSourceTest, LoadsBoxesOfTensorsThatStartAnywhereInASafetensorsFile) {
  WriteModel();
  float box[3 * 3] = {0};
  float bias[3] = {0};
  Ask("w.weight", {6, 5}, {1, 2}, {3, 3}, box, sizeof box);
  Ask("a.bias", {3}, {0}, {3}, bias, sizeof bias);
  ASSERT_EQ(ckpt_load(ctx_, state_, Path("model.safetensors").c_str(), nullptr, err_), CKPT_OK) << message();
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(box[r * 3 + c], static_cast<float>((1 + r) * 5 + 2 + c)) << r << "," << c;
  }
  EXPECT_EQ(bias[2], 102.0f);
}

TEST_F(CheckpointSourceTest, ADirectoryWithModelSafetensorsLoadsLikeTheFile) {
  WriteModel();
  float whole[30] = {0};
  Ask("w.weight", {6, 5}, {0, 0}, {6, 5}, whole, sizeof whole);
  ckpt_load_options opts = CKPT_LOAD_OPTIONS_INIT;
  opts.unexpected_keys = CKPT_STRICT_IGNORE;
  ASSERT_EQ(ckpt_load(ctx_, state_, dir().c_str(), &opts, err_), CKPT_OK) << message();
  EXPECT_EQ(std::vector<float>(whole, whole + 30), Iota(30, 0));
}

TEST_F(CheckpointSourceTest, AShardedDirectoryLoadsThroughItsIndexAndMayCastToBf16) {
  WriteF32File(Path("model-00001-of-00002.safetensors"), {{"a.bias", {3}}}, {Iota(3, 100)});
  WriteF32File(Path("model-00002-of-00002.safetensors"), {{"w.weight", {6, 5}}}, {Iota(30, 0)});
  std::ofstream(Path(rt::kHfIndexName)) << rt::EncodeHfIndex(rt::HfIndex{
      132, {{"a.bias", "model-00001-of-00002.safetensors"}, {"w.weight", "model-00002-of-00002.safetensors"}}});
  uint16_t row[5] = {0};
  float bias[3] = {0};
  Ask("w.weight", {6, 5}, {4, 0}, {1, 5}, row, sizeof row, CKPT_DTYPE_BF16, CKPT_SHARD_ALLOW_DTYPE_CAST);
  Ask("a.bias", {3}, {0}, {3}, bias, sizeof bias);
  ASSERT_EQ(ckpt_load(ctx_, state_, dir().c_str(), nullptr, err_), CKPT_OK) << message();
  for (int c = 0; c < 5; ++c) {
    float widened = 0;
    const uint32_t bits = static_cast<uint32_t>(row[c]) << 16;
    std::memcpy(&widened, &bits, sizeof widened);
    EXPECT_EQ(widened, static_cast<float>(20 + c)) << c;  // small integers are exact in BF16
  }
  EXPECT_EQ(bias[0], 100.0f);
  // The index itself names the same weights.
  ckpt_reader_t* reader = nullptr;
  ASSERT_EQ(ckpt_reader_open(Path(rt::kHfIndexName).c_str(), &reader, err_), CKPT_OK) << message();
  ckpt_checkpoint_info info = CKPT_CHECKPOINT_INFO_INIT;
  ASSERT_EQ(ckpt_reader_info(reader, &info, err_), CKPT_OK);
  EXPECT_EQ(info.tensor_count, 2u);
  EXPECT_EQ(info.file_count, 2u);
  ckpt_reader_free(reader);
}

TEST_F(CheckpointSourceTest, AnIndexThatDisagreesWithItsFilesIsCorrupt) {
  WriteF32File(Path("model-00001-of-00002.safetensors"), {{"a.bias", {3}}}, {Iota(3, 100)});
  WriteF32File(Path("model-00002-of-00002.safetensors"), {{"w.weight", {6, 5}}}, {Iota(30, 0)});
  std::ofstream(Path(rt::kHfIndexName)) << rt::EncodeHfIndex(rt::HfIndex{
      132, {{"a.bias", "model-00002-of-00002.safetensors"}, {"w.weight", "model-00002-of-00002.safetensors"}}});
  auto source = rt::OpenCheckpointSource(dir());
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), ckpt::Code::kCorrupt);
  EXPECT_NE(source.status().message().find("'a.bias'"), std::string::npos) << source.status().message();
}

TEST_F(CheckpointSourceTest, ATensorInTwoFilesIsCorrupt) {
  WriteF32File(Path("model-00001-of-00002.safetensors"), {{"a.bias", {3}}}, {Iota(3, 100)});
  WriteF32File(Path("model-00002-of-00002.safetensors"), {{"a.bias", {3}}}, {Iota(3, 0)});
  std::ofstream(Path(rt::kHfIndexName)) << rt::EncodeHfIndex(
      rt::HfIndex{24, {{"a.bias", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}});
  auto source = rt::OpenCheckpointSource(dir());
  ASSERT_FALSE(source.ok());
  EXPECT_NE(source.status().message().find("in both"), std::string::npos) << source.status().message();
}

TEST_F(CheckpointSourceTest, ATruncatedFileIsCorruptBeforeAnyRead) {
  WriteF32File(Path("model.safetensors"), {{"w.weight", {6, 5}}}, {Iota(30, 0)}, 4);
  float whole[30] = {0};
  Ask("w.weight", {6, 5}, {0, 0}, {6, 5}, whole, sizeof whole);
  EXPECT_EQ(ckpt_load(ctx_, state_, Path("model.safetensors").c_str(), nullptr, err_), CKPT_E_CORRUPT);
  EXPECT_NE(message().find("model.safetensors"), std::string::npos) << message();
}

TEST_F(CheckpointSourceTest, TheReaderListsReadsAndVerifiesSafetensors) {
  WriteModel();
  ckpt_reader_t* reader = nullptr;
  ASSERT_EQ(ckpt_reader_open(Path("model.safetensors").c_str(), &reader, err_), CKPT_OK) << message();
  ckpt_tensor_info tensor = CKPT_TENSOR_INFO_INIT;
  ASSERT_EQ(ckpt_reader_tensor(reader, 1, &tensor, err_), CKPT_OK);
  EXPECT_STREQ(tensor.key, "w.weight");
  EXPECT_EQ(tensor.chunk_count, 1u);
  const char* source = nullptr;
  ASSERT_EQ(ckpt_reader_metadata(reader, "source", &source, err_), CKPT_OK);
  EXPECT_STREQ(source, "unit-test");
  const uint64_t offset[2] = {5, 3}, shape[2] = {1, 2};
  float got[2] = {0, 0};
  ASSERT_EQ(ckpt_reader_read(reader, "w.weight", 2, offset, shape, got, sizeof got, err_), CKPT_OK) << message();
  EXPECT_EQ(got[0], 28.0f);
  EXPECT_EQ(got[1], 29.0f);
  EXPECT_EQ(ckpt_reader_verify(reader, err_), CKPT_OK) << message();
  ckpt_reader_free(reader);
}

TEST_F(CheckpointSourceTest, ADirectoryWithAManifestIsACkptCheckpointWhateverElseItHolds) {
  WriteModel();
  std::ofstream(Path("MANIFEST")) << "not a manifest";
  auto source = rt::OpenCheckpointSource(dir());
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), ckpt::Code::kCorrupt);
  EXPECT_NE(source.status().message().find("MANIFEST"), std::string::npos) << source.status().message();
}

TEST_F(CheckpointSourceTest, NeitherACheckpointNorSafetensorsIsNotFound) {
  auto source = rt::OpenCheckpointSource(Path("nothing-here"));
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), ckpt::Code::kNotFound);
}

}  // namespace

// Export to safetensors (ckpt_export, runtime/export/safetensors_export.h): tensors whole whatever chunks saved them,
// sharding with an index, streaming through small windows, parts sharing one export, and what is refused.
// ctest-labels: threaded
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt.h"
#include "io/file_io.h"
#include "runtime/core/dtype_cast.h"
#include "runtime/export/safetensors_export.h"
#include "runtime/format/safetensors.h"
#include "runtime/load/reader.h"
#include "tests/unit/support/temp_dir.h"
#include "tests/unit/support/test_pattern.h"

namespace {

namespace rt = ckpt::runtime;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// One row-major tensor as the test knows it, and how it is split into the shards one rank saves.
struct TestTensor {
  std::string key;
  int32_t dtype;
  std::vector<uint64_t> shape;
  std::string bytes;          // the whole tensor, row-major
  uint64_t column_slabs = 1;  // saved as this many slabs along the last dimension
};

using ckpt::testing::Pattern;

class SafetensorsExportTest : public ckpt::testing::TempDirTest {
 protected:
  void SetUp() override {
    ASSERT_EQ(ckpt_error_create(&err_), CKPT_OK);
    checkpoint_ = Path("step-1");
    tensors_ = {
        {"b.bias", CKPT_DTYPE_F64, {7}, Pattern(7 * 8, 1), 1},
        {"a.weight", CKPT_DTYPE_F32, {5, 7}, Pattern(5 * 7 * 4, 2), 3},
        {"c.cube", CKPT_DTYPE_BF16, {3, 4, 5}, Pattern(3 * 4 * 5 * 2, 3), 2},
        {"d.scalar", CKPT_DTYPE_I32, {}, Pattern(4, 4), 1},
        {"e.empty", CKPT_DTYPE_F32, {0, 4}, "", 1},
    };
  }
  void TearDown() override { ckpt_error_free(err_); }
  std::string message() const { return ckpt_error_message(err_); }

  // Saves tensors_ from one rank, each split into column slabs (so into several chunks), with metadata run=test.
  void Save() {
    ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
    opts.rank = 0;
    opts.world_size = 1;
    opts.io_workers = 0;  // unit tests link libckpt statically: no worker executable beside them
    ckpt_context_t* ctx = nullptr;
    ASSERT_EQ(ckpt_context_create(&opts, &ctx, err_), CKPT_OK) << message();
    ckpt_state_t* state = nullptr;
    ASSERT_EQ(ckpt_state_create(&state, err_), CKPT_OK);
    std::vector<std::string> slabs;  // kept alive until the save completes
    std::vector<std::vector<uint64_t>> boxes;
    slabs.reserve(64);
    boxes.reserve(128);
    for (const TestTensor& t : tensors_) {
      const size_t ndim = t.shape.size();
      const uint64_t last = ndim == 0 ? 1 : t.shape[ndim - 1];
      const uint64_t width = (last + t.column_slabs - 1) / t.column_slabs;
      const uint64_t element = ckpt_dtype_size(t.dtype);
      const uint64_t rows = t.bytes.size() / element / last;
      for (uint64_t start = 0; start < last; start += width) {
        const uint64_t columns = std::min(width, last - start);
        std::string slab;
        for (uint64_t r = 0; r < rows; ++r) slab += t.bytes.substr((r * last + start) * element, columns * element);
        slabs.push_back(slab);
        boxes.push_back(t.shape);
        if (ndim > 0) boxes.back()[ndim - 1] = columns;
        boxes.push_back(std::vector<uint64_t>(ndim, 0));
        if (ndim > 0) boxes.back()[ndim - 1] = start;
        ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
        shard.key = t.key.c_str();
        shard.dtype = t.dtype;
        shard.ndim = static_cast<uint32_t>(ndim);
        shard.global_shape = t.shape.data();
        shard.local_shape = boxes[boxes.size() - 2].data();
        shard.global_offset = boxes.back().data();
        shard.data = slabs.back().data();
        shard.data_size = slabs.back().size();
        ASSERT_EQ(ckpt_state_add_tensor(state, &shard, err_), CKPT_OK) << t.key << ": " << message();
      }
    }
    const char* keys[] = {"run"};
    const char* values[] = {"test"};
    ckpt_save_options save = CKPT_SAVE_OPTIONS_INIT;
    save.metadata_count = 1;
    save.metadata_keys = keys;
    save.metadata_values = values;
    ckpt_request_t* request = nullptr;
    ASSERT_EQ(ckpt_save(ctx, state, checkpoint_.c_str(), &save, &request, err_), CKPT_OK) << message();
    ASSERT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
    ckpt_request_free(request);
    ckpt_state_free(state);
    ckpt_context_free(ctx);
  }

  // Checks that `file` in `dir` is a valid safetensors file holding exactly the tensors named, whole.
  void ExpectFileHolds(const std::string& dir, const std::string& file, const std::vector<std::string>& keys) {
    auto header = rt::ReadSafetensorsHeader(dir, file);
    ASSERT_TRUE(header.ok()) << header.status().message();
    EXPECT_EQ(header->data_start % 4096, 0u) << file;
    const std::string bytes = ReadFile(dir + "/" + file);
    ASSERT_EQ(header->tensors.size(), keys.size()) << file;
    uint64_t data = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      const rt::SafetensorsTensor& got = header->tensors[i];
      EXPECT_EQ(got.key, keys[i]);
      const TestTensor& want = Tensor(keys[i]);
      EXPECT_EQ(got.dtype, want.dtype) << want.key;
      EXPECT_EQ(got.shape, want.shape) << want.key;
      EXPECT_EQ(bytes.substr(header->data_start + got.begin, got.end - got.begin), want.bytes) << want.key;
      data += got.end - got.begin;
    }
    EXPECT_EQ(bytes.size(), header->data_start + data) << file;
    std::map<std::string, std::string> metadata(header->metadata.begin(), header->metadata.end());
    EXPECT_EQ(metadata["run"], "test");
    EXPECT_EQ(metadata["format"], "pt");
  }

  const TestTensor& Tensor(const std::string& key) const {
    for (const TestTensor& t : tensors_) {
      if (t.key == key) return t;
    }
    ADD_FAILURE() << "no tensor " << key;
    return tensors_[0];
  }

  std::unique_ptr<rt::CheckpointReader> OpenReader() {
    auto reader = rt::CheckpointReader::Open(checkpoint_);
    EXPECT_TRUE(reader.ok()) << reader.status().message();
    return std::move(*reader);
  }

  ckpt_error_t* err_ = nullptr;
  std::string checkpoint_;
  std::vector<TestTensor> tensors_;
};

const std::vector<std::string> kAllKeys = {"a.weight", "b.bias", "c.cube", "d.scalar", "e.empty"};

TEST_F(SafetensorsExportTest, OneFileHoldsEveryTensorWholeInKeyOrderWithTheMetadata) {
  Save();
  const std::string out = Path("out/weights.safetensors");
  ASSERT_EQ(ckpt_export(checkpoint_.c_str(), out.c_str(), nullptr, err_), CKPT_OK) << message();
  ExpectFileHolds(Path("out"), "weights.safetensors", kAllKeys);
  auto listed = ckpt::io::ListDirectory(Path("out"));
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(*listed, std::vector<std::string>{"weights.safetensors"}) << "no temporary left behind";
}

TEST_F(SafetensorsExportTest, ADirectoryGetsModelSafetensorsWhenEverythingFitsOneShard) {
  Save();
  const std::string out = Path("hf");
  ASSERT_EQ(ckpt_export(checkpoint_.c_str(), out.c_str(), nullptr, err_), CKPT_OK) << message();
  ExpectFileHolds(out, "model.safetensors", kAllKeys);
  EXPECT_FALSE(ckpt::io::PathExists(out + "/" + rt::kHfIndexName));
}

TEST_F(SafetensorsExportTest, ShardsAtTheMaximumSizeWithAnIndexNamingEveryTensorsFile) {
  Save();
  const std::string out = Path("hf");
  ckpt_export_options opts = CKPT_EXPORT_OPTIONS_INIT;
  opts.max_shard_bytes = 140;  // a.weight (140 bytes) alone, then b.bias + c.cube would exceed: 56 | 120+4+0
  ASSERT_EQ(ckpt_export(checkpoint_.c_str(), out.c_str(), &opts, err_), CKPT_OK) << message();
  ExpectFileHolds(out, "model-00001-of-00003.safetensors", {"a.weight"});
  ExpectFileHolds(out, "model-00002-of-00003.safetensors", {"b.bias"});
  ExpectFileHolds(out, "model-00003-of-00003.safetensors", {"c.cube", "d.scalar", "e.empty"});
  auto index = rt::ParseHfIndex(ReadFile(out + "/" + rt::kHfIndexName), "index");
  ASSERT_TRUE(index.ok()) << index.status().message();
  EXPECT_EQ(index->total_size, 140u + 56u + 120u + 4u);
  const std::vector<std::pair<std::string, std::string>> expected = {{"a.weight", "model-00001-of-00003.safetensors"},
                                                                     {"b.bias", "model-00002-of-00003.safetensors"},
                                                                     {"c.cube", "model-00003-of-00003.safetensors"},
                                                                     {"d.scalar", "model-00003-of-00003.safetensors"},
                                                                     {"e.empty", "model-00003-of-00003.safetensors"}};
  EXPECT_EQ(index->weight_map, expected);
}

TEST_F(SafetensorsExportTest, TensorsSpanningWindowsAndElementsAcrossWindowEdgesCopyEveryByte) {
  // After 3 bytes of I8 the F32 and F64 elements sit at odd offsets: window edges (multiples of 4096) cut elements.
  tensors_.push_back({"f.odd", CKPT_DTYPE_I8, {3}, Pattern(3, 5), 1});
  tensors_.push_back({"g.long", CKPT_DTYPE_F32, {3000}, Pattern(3000 * 4, 6), 1});
  tensors_.push_back({"h.wide", CKPT_DTYPE_F64, {7, 300}, Pattern(7 * 300 * 8, 7), 4});
  Save();
  std::vector<std::string> keys = kAllKeys;
  keys.insert(keys.end(), {"f.odd", "g.long", "h.wide"});
  for (uint64_t window : {1ull, 4096ull, 8192ull, 12288ull}) {
    rt::ExportOptions options;
    options.window_bytes = window;
    const std::string name = "window-" + std::to_string(window) + ".safetensors";
    auto summary = rt::ExportSafetensors(checkpoint_, Path(name), options);
    ASSERT_TRUE(summary.ok()) << summary.status().message();
    ExpectFileHolds(dir(), name, keys);
  }
}

TEST_F(SafetensorsExportTest, PartsOfOneExportWriteDisjointFilesAndPartZeroTheIndex) {
  Save();
  const std::string out = Path("hf");
  ckpt_export_options opts = CKPT_EXPORT_OPTIONS_INIT;
  opts.max_shard_bytes = 140;
  opts.part_count = 2;
  opts.part_index = 1;
  ASSERT_EQ(ckpt_export(checkpoint_.c_str(), out.c_str(), &opts, err_), CKPT_OK) << message();
  auto listed = ckpt::io::ListDirectory(out);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(*listed, std::vector<std::string>{"model-00002-of-00003.safetensors"});
  opts.part_index = 0;
  ASSERT_EQ(ckpt_export(checkpoint_.c_str(), out.c_str(), &opts, err_), CKPT_OK) << message();
  listed = ckpt::io::ListDirectory(out);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 4u);
  ExpectFileHolds(out, "model-00001-of-00003.safetensors", {"a.weight"});
  ExpectFileHolds(out, "model-00003-of-00003.safetensors", {"c.cube", "d.scalar", "e.empty"});
  opts.part_index = 2;
  EXPECT_EQ(ckpt_export(checkpoint_.c_str(), out.c_str(), &opts, err_), CKPT_E_INVALID_ARGUMENT);
}

TEST_F(SafetensorsExportTest, SelectedKeysOnly) {
  Save();
  const char* keys[] = {"c.cube", "a.weight", "c.cube"};
  ckpt_export_options opts = CKPT_EXPORT_OPTIONS_INIT;
  opts.keys = keys;
  opts.key_count = 3;
  const std::string out = Path("some.safetensors");
  ASSERT_EQ(ckpt_export(checkpoint_.c_str(), out.c_str(), &opts, err_), CKPT_OK) << message();
  ExpectFileHolds(dir(), "some.safetensors", {"a.weight", "c.cube"});
}

TEST_F(SafetensorsExportTest, AKeyTheCheckpointLacksIsNotFoundAndWritesNothing) {
  Save();
  const char* keys[] = {"a.weight", "nope"};
  ckpt_export_options opts = CKPT_EXPORT_OPTIONS_INIT;
  opts.keys = keys;
  opts.key_count = 2;
  const std::string out = Path("none.safetensors");
  EXPECT_EQ(ckpt_export(checkpoint_.c_str(), out.c_str(), &opts, err_), CKPT_E_NOT_FOUND);
  EXPECT_NE(message().find("'nope'"), std::string::npos) << message();
  EXPECT_FALSE(ckpt::io::PathExists(out));
}

TEST_F(SafetensorsExportTest, NeverReplacesAnExistingFile) {
  Save();
  const std::string out = Path("hf");
  ASSERT_EQ(ckpt_export(checkpoint_.c_str(), out.c_str(), nullptr, err_), CKPT_OK) << message();
  const std::string before = ReadFile(out + "/model.safetensors");
  EXPECT_EQ(ckpt_export(checkpoint_.c_str(), out.c_str(), nullptr, err_), CKPT_E_ALREADY_EXISTS);
  EXPECT_NE(message().find("model.safetensors"), std::string::npos) << message();
  EXPECT_EQ(ReadFile(out + "/model.safetensors"), before);
  auto listed = ckpt::io::ListDirectory(out);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 1u) << "no temporary left behind";
}

TEST_F(SafetensorsExportTest, ADirectoryHoldingAnotherExportIsRefused) {
  Save();
  const std::string out = Path("hf");
  ckpt_export_options opts = CKPT_EXPORT_OPTIONS_INIT;
  opts.max_shard_bytes = 140;
  ASSERT_EQ(ckpt_export(checkpoint_.c_str(), out.c_str(), &opts, err_), CKPT_OK) << message();
  // Unsharded, this export would write model.safetensors beside the sharded files: two models in one directory.
  EXPECT_EQ(ckpt_export(checkpoint_.c_str(), out.c_str(), nullptr, err_), CKPT_E_ALREADY_EXISTS);
  EXPECT_NE(message().find("another export"), std::string::npos) << message();
  EXPECT_FALSE(ckpt::io::PathExists(out + "/model.safetensors"));
}

TEST_F(SafetensorsExportTest, FloatingTensorsConvertToTheDtypeAskedForAndOthersStayAsStored) {
  tensors_.push_back({"g.long", CKPT_DTYPE_F32, {3000}, Pattern(3000 * 4, 6), 1});
  Save();
  rt::ExportOptions options;
  options.dtype = CKPT_DTYPE_F16;
  options.window_bytes = 4096;  // several windows per tensor, each converted on its own
  const std::string out = Path("half.safetensors");
  auto exported = rt::ExportSafetensors(checkpoint_, out, options);
  ASSERT_TRUE(exported.ok()) << exported.status().message();
  auto header = rt::ReadSafetensorsHeader(dir(), "half.safetensors");
  ASSERT_TRUE(header.ok()) << header.status().message();
  const std::string bytes = ReadFile(out);
  for (const rt::SafetensorsTensor& t : header->tensors) {
    const TestTensor& original = Tensor(t.key);
    const bool floating =
        original.dtype == CKPT_DTYPE_F64 || original.dtype == CKPT_DTYPE_F32 || original.dtype == CKPT_DTYPE_BF16;
    EXPECT_EQ(t.dtype, floating ? CKPT_DTYPE_F16 : original.dtype) << t.key;
    const uint64_t count = original.bytes.size() / ckpt_dtype_size(original.dtype);
    std::string expected(count * ckpt_dtype_size(t.dtype), '\0');
    if (floating) {
      rt::CastElements(original.dtype, CKPT_DTYPE_F16, original.bytes.data(), expected.data(), count);
    } else {
      expected = original.bytes;
    }
    EXPECT_EQ(bytes.substr(header->data_start + t.begin, t.end - t.begin), expected) << t.key;
  }
  options.dtype = CKPT_DTYPE_I32;
  auto refused = rt::ExportSafetensors(checkpoint_, Path("ints.safetensors"), options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ckpt::Code::kInvalidArgument);
}

TEST_F(SafetensorsExportTest, ADtypeSafetensorsCannotNameIsUnsupportedNamingTheTensor) {
  tensors_.push_back({"f.nibbles", CKPT_DTYPE_I4, {4}, std::string(4, '\1'), 1});
  Save();
  EXPECT_EQ(ckpt_export(checkpoint_.c_str(), Path("x.safetensors").c_str(), nullptr, err_), CKPT_E_UNSUPPORTED);
  EXPECT_NE(message().find("f.nibbles"), std::string::npos) << message();
}

TEST_F(SafetensorsExportTest, ACorruptBlockFailsTheExportAndLeavesNoFile) {
  Save();
  auto reader = OpenReader();
  const rt::Manifest& manifest = reader->manifest();
  const rt::ChunkRecord chunk = manifest.tensors[0].chunks[0];
  const std::string data_file = checkpoint_ + "/" + manifest.files[chunk.bytes.file_index].name;
  reader.reset();
  std::fstream file(data_file, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(static_cast<std::streamoff>(chunk.bytes.file_offset));
  const char flipped = static_cast<char>(~Tensor("a.weight").bytes[0]);
  file.write(&flipped, 1);
  file.close();
  const std::string out = Path("out");
  EXPECT_EQ(ckpt_export(checkpoint_.c_str(), out.c_str(), nullptr, err_), CKPT_E_CORRUPT);
  EXPECT_NE(message().find("a.weight"), std::string::npos) << message();
  auto listed = ckpt::io::ListDirectory(out);
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
}

TEST_F(SafetensorsExportTest, AFullDiskFailsTheExportWithNoSpaceAndLeavesNoFile) {
  // 24 MiB: several of the pieces a window is written in at once, onto a 4 MiB file system that fills part way.
  tensors_ = {{"big", CKPT_DTYPE_F32, {6u << 20}, Pattern(24u << 20, 5), 1}};
  Save();
  const std::string small = Path("small");
  ASSERT_EQ(mkdir(small.c_str(), 0700), 0);
  if (mount("tmpfs", small.c_str(), "tmpfs", 0, "size=4m") != 0) {
    GTEST_SKIP() << "cannot mount a 4 MiB tmpfs: " << std::strerror(errno);
  }
  const std::string out = small + "/model.safetensors";
  const int32_t status = ckpt_export(checkpoint_.c_str(), out.c_str(), nullptr, err_);
  auto listed = ckpt::io::ListDirectory(small);
  umount2(small.c_str(), MNT_DETACH);
  EXPECT_EQ(status, CKPT_E_NO_SPACE) << message();
  EXPECT_NE(message().find("model.safetensors"), std::string::npos) << message();
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
}

TEST_F(SafetensorsExportTest, AwkwardButValidKeysRoundTripThroughExportAndCkptsOwnReader) {
  // Non-ASCII, quotes, backslashes and control characters, which JSON escapes: exported exactly, and read back by
  // ckpt's own safetensors reader under the same keys.
  tensors_ = {{"caf\xc3\xa9.\xe6\x97\xa5\xf0\x9f\x98\x80", CKPT_DTYPE_F32, {2, 3}, Pattern(24, 1), 2},
              {"q\"uote'back\\slash", CKPT_DTYPE_I8, {5}, Pattern(5, 2), 1},
              {"ctl\n\t\x01\x1f\x7f\xc2\x85", CKPT_DTYPE_F64, {3}, Pattern(24, 3), 1},
              {"__metadata__.w", CKPT_DTYPE_U8, {1}, Pattern(1, 4), 1}};
  Save();
  const std::string out = Path("awkward.safetensors");
  ASSERT_EQ(ckpt_export(checkpoint_.c_str(), out.c_str(), nullptr, err_), CKPT_OK) << message();
  std::vector<std::string> keys;
  for (const TestTensor& t : tensors_) keys.push_back(t.key);
  std::sort(keys.begin(), keys.end());
  ExpectFileHolds(dir(), "awkward.safetensors", keys);
  ckpt_reader_t* reader = nullptr;
  ASSERT_EQ(ckpt_reader_open(out.c_str(), &reader, err_), CKPT_OK) << message();
  for (const TestTensor& t : tensors_) {
    std::string got(t.bytes.size(), '\0');
    const std::vector<uint64_t> zero(t.shape.size(), 0);
    EXPECT_EQ(ckpt_reader_read(reader, t.key.c_str(), static_cast<uint32_t>(t.shape.size()), zero.data(),
                               t.shape.data(), got.data(), got.size(), err_),
              CKPT_OK)
        << message();
    EXPECT_EQ(got, t.bytes) << t.key;
  }
  ckpt_reader_free(reader);
}

TEST_F(SafetensorsExportTest, ATensorNamedMetadataIsUnsupportedAndNothingIsWritten) {
  // safetensors keeps "__metadata__" for the file's own metadata: written as a tensor, it would replace that and
  // make a header that every reader refuses.
  tensors_.push_back({"__metadata__", CKPT_DTYPE_F32, {2}, Pattern(8, 5), 1});
  Save();
  const std::string out = Path("hf");
  EXPECT_EQ(ckpt_export(checkpoint_.c_str(), out.c_str(), nullptr, err_), CKPT_E_UNSUPPORTED);
  EXPECT_NE(message().find("tensor '__metadata__': safetensors reserves the name"), std::string::npos) << message();
  EXPECT_FALSE(ckpt::io::PathExists(out));
}

TEST_F(SafetensorsExportTest, OptionsInitWritesTheDefaults) {
  ckpt_export_options from_function;
  std::memset(&from_function, 0xAB, sizeof from_function);
  ASSERT_EQ(ckpt_export_options_init(&from_function, sizeof from_function), CKPT_OK);
  EXPECT_EQ(from_function.max_shard_bytes, 5000000000u);
  EXPECT_EQ(from_function.keys, nullptr);
  EXPECT_EQ(from_function.key_count, 0u);
  EXPECT_EQ(from_function.part_index, 0u);
  EXPECT_EQ(from_function.part_count, 1u);
  EXPECT_EQ(ckpt_export_options_init(&from_function, sizeof from_function + 8), CKPT_E_UNSUPPORTED);
}

}  // namespace

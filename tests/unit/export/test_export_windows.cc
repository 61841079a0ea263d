// An export's windows (runtime/export/export_writer.h): a tensor's checksum blocks are read straight into the window
// that writes them, verified there, while a ring of windows is written behind; a corrupt block read so, or a write
// that fails, fails the export and leaves no file.
// ctest-labels: threaded
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt.h"
#include "common/fault_injection.h"
#include "io/file_io.h"
#include "runtime/export/safetensors_export.h"
#include "runtime/format/manifest.h"
#include "runtime/format/safetensors.h"
#include "tests/unit/support/scoped_env.h"
#include "tests/unit/support/temp_dir.h"
#include "tests/unit/support/test_pattern.h"

namespace ckpt::runtime {
namespace {

// "big": 4 MiB of F32, four checksum blocks of 1 MiB, over several windows; "odd": 3 bytes of I8, after which
// nothing is page-aligned in the file any more, then "tail", 1000 F32 at an odd offset.
constexpr uint64_t kBigElements = 1u << 20, kTailElements = 1000;

class ExportWindowsTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    ASSERT_EQ(ckpt_error_create(&err_), CKPT_OK);
    big_ = testing::Pattern(kBigElements * 4, 11);
    odd_ = testing::Pattern(3, 12);
    tail_ = testing::Pattern(kTailElements * 4, 13);
    Save();
  }
  void TearDown() override { ckpt_error_free(err_); }

  std::string checkpoint() const { return Path("ck"); }

  void Save() {
    ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
    opts.rank = 0;
    opts.world_size = 1;
    opts.io_workers = 0;
    opts.arena_bytes = 64ull << 20;  // the smallest: the default (an eighth of the memory) takes seconds to set up
    ckpt_context_t* ctx = nullptr;
    ASSERT_EQ(ckpt_context_create(&opts, &ctx, err_), CKPT_OK) << ckpt_error_message(err_);
    ckpt_state_t* state = nullptr;
    ASSERT_EQ(ckpt_state_create(&state, err_), CKPT_OK);
    const uint64_t big_shape[1] = {kBigElements}, odd_shape[1] = {3}, tail_shape[1] = {kTailElements}, zero[1] = {0};
    Add(state, "big", CKPT_DTYPE_F32, big_shape, zero, big_);
    Add(state, "odd", CKPT_DTYPE_I8, odd_shape, zero, odd_);
    Add(state, "tail", CKPT_DTYPE_F32, tail_shape, zero, tail_);
    ckpt_request_t* request = nullptr;
    ASSERT_EQ(ckpt_save(ctx, state, checkpoint().c_str(), nullptr, &request, err_), CKPT_OK)
        << ckpt_error_message(err_);
    ASSERT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << ckpt_error_message(err_);
    ckpt_request_free(request);
    ckpt_state_free(state);
    ckpt_context_free(ctx);
  }

  void Add(ckpt_state_t* state, const char* key, int32_t dtype, const uint64_t* shape, const uint64_t* offset,
           std::string& bytes) {
    ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
    shard.key = key;
    shard.dtype = dtype;
    shard.ndim = 1;
    shard.global_shape = shape;
    shard.local_shape = shape;
    shard.global_offset = offset;
    shard.data = bytes.data();
    shard.data_size = bytes.size();
    ASSERT_EQ(ckpt_state_add_tensor(state, &shard, err_), CKPT_OK) << key << ": " << ckpt_error_message(err_);
  }

  // Exports with windows of `window` bytes to `name` in the test's directory.
  Result<ExportSummary> Export(const std::string& name, uint64_t window) {
    ExportOptions options;
    options.window_bytes = window;
    return ExportSafetensors(checkpoint(), Path(name), options);
  }

  // Every tensor of the file `name`, exactly.
  void ExpectExported(const std::string& name) {
    Result<SafetensorsHeader> header = ReadSafetensorsHeader(dir(), name);
    ASSERT_TRUE(header.ok()) << header.status().message();
    std::ifstream in(Path(name), std::ios::binary);
    std::stringstream read;
    read << in.rdbuf();
    const std::string bytes = read.str();
    const std::vector<std::pair<std::string, const std::string*>> want = {
        {"big", &big_}, {"odd", &odd_}, {"tail", &tail_}};
    ASSERT_EQ(header->tensors.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const SafetensorsTensor& t = header->tensors[i];
      ASSERT_EQ(t.key, want[i].first);
      EXPECT_TRUE(bytes.substr(header->data_start + t.begin, t.end - t.begin) == *want[i].second) << t.key;
    }
    EXPECT_EQ(bytes.size(), header->data_start + big_.size() + odd_.size() + tail_.size());
  }

  // Writes one byte at `at` of "big"'s chunk in its data file.
  void FlipBig(uint64_t at) {
    Result<Manifest> manifest = ReadManifest(checkpoint());
    ASSERT_TRUE(manifest.ok()) << manifest.status().message();
    const StoredBytes& stored = manifest->tensors[0].chunks[0].bytes;
    ASSERT_EQ(stored.block_size, 1u << 20);
    data_file_ = manifest->files[stored.file_index].name;
    std::fstream file(checkpoint() + "/" + data_file_, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(file.good());
    file.seekp(static_cast<std::streamoff>(stored.file_offset + at));
    file.put(static_cast<char>(~big_[at]));
  }

  void ExpectNothingLeftBut(const std::vector<std::string>& names) {
    Result<std::vector<std::string>> listed = io::ListDirectory(dir());
    ASSERT_TRUE(listed.ok()) << listed.status().message();
    EXPECT_EQ(*listed, names);
  }

  ckpt_error_t* err_ = nullptr;
  std::string big_, odd_, tail_;
  std::string data_file_;
};

// 1 MiB windows hold whole blocks of "big" (its bytes start on a page after the padded header) and go round the
// ring of windows twice; 12 KiB windows cut its blocks, whose parts are read through a buffer and copied out.
TEST_F(ExportWindowsTest, WindowsOfWholeBlocksAndWindowsCuttingBlocksBothExportEveryByte) {
  for (const uint64_t window : {1ull << 20, 3ull * 4096}) {
    const std::string name = "w" + std::to_string(window) + ".safetensors";
    const Result<ExportSummary> exported = Export(name, window);
    ASSERT_TRUE(exported.ok()) << exported.status().message();
    ExpectExported(name);
  }
}

TEST_F(ExportWindowsTest, ACorruptBlockReadStraightIntoAWindowFailsTheExportNamingTheTensorAndLeavesNoFile) {
  FlipBig((2u << 20) + 4321);  // inside block 2, which a 1 MiB window takes whole
  const Result<ExportSummary> exported = Export("out.safetensors", 1u << 20);
  ASSERT_FALSE(exported.ok());
  EXPECT_EQ(exported.status().code(), Code::kCorrupt) << exported.status().message();
  const std::string message = exported.status().message();
  EXPECT_NE(message.find("checksum mismatch"), std::string::npos) << message;
  EXPECT_NE(message.find("tensor 'big'"), std::string::npos) << message;
  EXPECT_NE(message.find(data_file_), std::string::npos) << message;
  ExpectNothingLeftBut({"ck"});
}

TEST_F(ExportWindowsTest, AWriteThatFailsFailsTheExportAndLeavesNoFile) {
  if (!fault::kCompiledIn) GTEST_SKIP() << "a build without CKPT_FAULT_INJECTION has no fault hooks";
  const testing::ScopedEnv fault(fault::kEioPathVar, "out.safetensors");
  const Result<ExportSummary> exported = Export("out.safetensors", 1u << 20);
  ASSERT_FALSE(exported.ok());
  EXPECT_EQ(exported.status().code(), Code::kIo) << exported.status().message();
  EXPECT_NE(exported.status().message().find("out.safetensors"), std::string::npos) << exported.status().message();
  ExpectNothingLeftBut({"ck"});
}

}  // namespace
}  // namespace ckpt::runtime

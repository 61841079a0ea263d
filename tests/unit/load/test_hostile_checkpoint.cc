// A checkpoint whose files were tampered with is refused, naming the file, and nothing outside the checkpoint
// directory is read: a data file, the data directory or the MANIFEST replaced by a symbolic link (to a byte-identical
// copy, so that sizes and checksums all match), a data file replaced by a FIFO (which must not hang), and a manifest
// claiming more bytes than its file holds (which must not be allocated).
// ctest-labels: threaded
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt.h"
#include "io/checksum.h"
#include "io/file_io.h"
#include "runtime/format/manifest.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

class HostileCheckpointTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    checkpoint_ = Path("step-1");
    outside_ = Path("outside");
    fs::create_directories(outside_);
    ASSERT_EQ(ckpt_error_create(&err_), CKPT_OK);
    ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
    opts.rank = 0;
    opts.world_size = 1;
    opts.io_workers = 0;  // the same read path as the worker processes, in threads (unit tests link statically)
    opts.arena_bytes = 64ull << 20;
    ASSERT_EQ(ckpt_context_create(&opts, &ctx_, err_), CKPT_OK) << message();
    values_.resize(3000);
    for (size_t i = 0; i < values_.size(); ++i) values_[i] = static_cast<double>(i) * 0.25;
    ckpt_state_t* state = MakeState(values_.data());
    const std::string blob(5000, 'c');
    ASSERT_EQ(ckpt_state_add_common(state, "blob", blob.data(), blob.size(), err_), CKPT_OK);
    ckpt_request_t* request = nullptr;
    ASSERT_EQ(ckpt_save(ctx_, state, checkpoint_.c_str(), nullptr, &request, err_), CKPT_OK) << message();
    ASSERT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
    ckpt_request_free(request);
    ckpt_state_free(state);
    for (const auto& entry : fs::directory_iterator(checkpoint_ + "/data")) {
      if (fs::file_size(entry.path()) > 0) data_file_ = entry.path().string();
    }
    ASSERT_FALSE(data_file_.empty());
  }

  void TearDown() override {
    ckpt_context_free(ctx_);
    ckpt_error_free(err_);
  }

  std::string message() const { return ckpt_error_message(err_); }

  // A state of one F64 tensor "x" of 3000 elements at `data`.
  ckpt_state_t* MakeState(double* data) {
    ckpt_state_t* state = nullptr;
    EXPECT_EQ(ckpt_state_create(&state, err_), CKPT_OK);
    static const uint64_t shape[1] = {3000}, zero[1] = {0};
    ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
    shard.key = "x";
    shard.dtype = CKPT_DTYPE_F64;
    shard.ndim = 1;
    shard.global_shape = shape;
    shard.local_shape = shape;
    shard.global_offset = zero;
    shard.data = data;
    shard.data_size = 3000 * sizeof(double);
    EXPECT_EQ(ckpt_state_add_tensor(state, &shard, err_), CKPT_OK) << message();
    return state;
  }

  // Moves `path` outside the checkpoint and leaves a symbolic link to it in its place: same bytes, same size.
  void ReplaceBySymlink(const std::string& path) {
    const std::string target = outside_ + "/" + fs::path(path).filename().string();
    fs::rename(path, target);
    fs::create_symlink(target, path);
  }

  int32_t Load() {
    std::vector<double> out(3000, -1.0);
    ckpt_state_t* state = MakeState(out.data());
    const int32_t status = ckpt_load(ctx_, state, checkpoint_.c_str(), nullptr, err_);
    ckpt_state_free(state);
    return status;
  }

  // Opens a reader and runs `fn` on it; returns the first failing status.
  template <typename Fn>
  int32_t WithReader(Fn&& fn) {
    ckpt_reader_t* reader = nullptr;
    int32_t status = ckpt_reader_open(checkpoint_.c_str(), &reader, err_);
    if (status == CKPT_OK) status = fn(reader);
    ckpt_reader_free(reader);
    return status;
  }

  int32_t Verify() {
    return WithReader([&](ckpt_reader_t* reader) { return ckpt_reader_verify(reader, err_); });
  }

  int32_t ReadWhole() {
    std::vector<double> out(3000);
    const uint64_t offset[1] = {0}, shape[1] = {3000};
    return WithReader([&](ckpt_reader_t* reader) {
      return ckpt_reader_read(reader, "x", 1, offset, shape, out.data(), out.size() * sizeof(double), err_);
    });
  }

  std::string checkpoint_, outside_, data_file_;
  std::vector<double> values_;
  ckpt_error_t* err_ = nullptr;
  ckpt_context_t* ctx_ = nullptr;
};

TEST_F(HostileCheckpointTest, IntactCheckpointLoadsVerifiesAndReads) {
  EXPECT_EQ(Load(), CKPT_OK) << message();
  EXPECT_EQ(Verify(), CKPT_OK) << message();
  EXPECT_EQ(ReadWhole(), CKPT_OK) << message();
}

TEST_F(HostileCheckpointTest, DataFileReplacedBySymlinkIsNotFollowed) {
  ReplaceBySymlink(data_file_);
  EXPECT_EQ(Load(), CKPT_E_CORRUPT);
  EXPECT_NE(message().find("symbolic link"), std::string::npos) << message();
  EXPECT_NE(message().find(fs::path(data_file_).filename().string()), std::string::npos) << message();
  EXPECT_EQ(Verify(), CKPT_E_CORRUPT) << message();
  EXPECT_EQ(ReadWhole(), CKPT_E_CORRUPT) << message();
}

TEST_F(HostileCheckpointTest, DataDirectoryReplacedBySymlinkIsNotFollowed) {
  const std::string copy = outside_ + "/data";
  fs::copy(checkpoint_ + "/data", copy);
  fs::remove_all(checkpoint_ + "/data");
  fs::create_directory_symlink(copy, checkpoint_ + "/data");
  EXPECT_EQ(Load(), CKPT_E_CORRUPT);
  EXPECT_NE(message().find("symbolic link"), std::string::npos) << message();
  EXPECT_EQ(Verify(), CKPT_E_CORRUPT) << message();
}

TEST_F(HostileCheckpointTest, ManifestReplacedBySymlinkIsNotFollowed) {
  ReplaceBySymlink(checkpoint_ + "/MANIFEST");
  EXPECT_EQ(WithReader([](ckpt_reader_t*) { return CKPT_OK; }), CKPT_E_CORRUPT);
  EXPECT_NE(message().find("symbolic link"), std::string::npos) << message();
  EXPECT_EQ(Load(), CKPT_E_CORRUPT) << message();
}

TEST_F(HostileCheckpointTest, DataFileReplacedByFifoFailsInsteadOfHanging) {
  fs::remove(data_file_);
  ASSERT_EQ(mkfifo(data_file_.c_str(), 0600), 0);
  EXPECT_EQ(Load(), CKPT_E_CORRUPT);
  EXPECT_NE(message().find("not a regular file"), std::string::npos) << message();
  EXPECT_EQ(Verify(), CKPT_E_CORRUPT) << message();
}

TEST_F(HostileCheckpointTest, ManifestClaimingMoreBytesThanItsFileHoldsAllocatesNothing) {
  // The common entry is said to hold 2^62 bytes, and its data file to be that large: consistent in itself, so only
  // the real file's size can refute it, which must happen before a byte is allocated.
  Result<runtime::Manifest> manifest = runtime::ReadManifest(checkpoint_);
  ASSERT_TRUE(manifest.ok()) << manifest.status().message();
  runtime::CommonRecord huge;
  huge.key = "huge";
  huge.is_inline = false;
  huge.stored.file_index = 0;
  huge.stored.file_offset = 0;
  huge.stored.byte_length = uint64_t{1} << 62;
  huge.stored.block_size = uint64_t{1} << 61;
  huge.stored.block_checksums = {1, 2};
  manifest->common.push_back(huge);
  manifest->files[0].size = uint64_t{1} << 62;
  fs::remove(checkpoint_ + "/MANIFEST");
  ASSERT_TRUE(runtime::WriteManifest(checkpoint_, *manifest).ok());

  const void* data = nullptr;
  uint64_t size = 0;
  EXPECT_EQ(WithReader([&](ckpt_reader_t* reader) { return ckpt_reader_common(reader, "huge", &data, &size, err_); }),
            CKPT_E_CORRUPT);
  EXPECT_NE(message().find("truncated"), std::string::npos) << message();
  EXPECT_EQ(Load(), CKPT_E_CORRUPT) << message();
  EXPECT_EQ(Verify(), CKPT_E_CORRUPT) << message();
}

// Rewrites the MANIFEST so that it holds `hostile` where `tamper` put `placeholder` (valid text of the same length,
// found once in the file), sealed with a correct checksum: what a hostile writer could make, and WriteManifest,
// which validates, would not.
template <typename Tamper>
void WriteHostileManifest(const std::string& checkpoint, const std::string& placeholder, const std::string& hostile,
                          Tamper&& tamper) {
  ASSERT_EQ(placeholder.size(), hostile.size());
  Result<runtime::Manifest> manifest = runtime::ReadManifest(checkpoint);
  ASSERT_TRUE(manifest.ok()) << manifest.status().message();
  tamper(*manifest);
  Result<std::string> file = runtime::EncodeManifest(*manifest);
  ASSERT_TRUE(file.ok()) << file.status().message();
  const size_t at = file->find(placeholder);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(file->find(placeholder, at + 1), std::string::npos);
  file->replace(at, hostile.size(), hostile);
  constexpr size_t kHeaderBytes = 32, kChecksumOffset = 24;  // runtime/format/manifest.h's file layout
  const uint64_t checksum = io::Checksum(file->data() + kHeaderBytes, file->size() - kHeaderBytes);
  std::memcpy(file->data() + kChecksumOffset, &checksum, sizeof checksum);  // little-endian, as the machine
  fs::remove(checkpoint + "/MANIFEST");
  ASSERT_TRUE(io::WriteFileDurably(checkpoint + "/MANIFEST", file->data(), file->size()).ok());
}

TEST_F(HostileCheckpointTest, ManifestWithATensorKeyThatIsNotUtf8IsCorruptShowingTheKeyEscaped) {
  WriteHostileManifest(checkpoint_, "tensor!key", "tensor\xffkey",
                       [](runtime::Manifest& m) { m.tensors[0].key = "tensor!key"; });
  EXPECT_EQ(WithReader([](ckpt_reader_t*) { return CKPT_OK; }), CKPT_E_CORRUPT);
  EXPECT_NE(message().find("tensor key 'tensor\\xffkey' is not valid UTF-8 (byte 0xff at offset 6)"), std::string::npos)
      << message();
  EXPECT_EQ(message().find('\xff'), std::string::npos) << "the raw byte is never shown";
  EXPECT_EQ(Load(), CKPT_E_CORRUPT) << message();
}

TEST_F(HostileCheckpointTest, ManifestWithASurrogateInACommonKeyIsCorrupt) {
  WriteHostileManifest(checkpoint_, "blob!!!", "blob\xed\xa0\x80",
                       [](runtime::Manifest& m) { m.common[0].key = "blob!!!"; });
  EXPECT_EQ(WithReader([](ckpt_reader_t*) { return CKPT_OK; }), CKPT_E_CORRUPT);
  EXPECT_NE(message().find("common key 'blob\\xed\\xa0\\x80' is not valid UTF-8"), std::string::npos) << message();
}

TEST_F(HostileCheckpointTest, ManifestWithAMetadataValueHoldingANulIsCorrupt) {
  WriteHostileManifest(checkpoint_, "value!with!nul", std::string("value\0with!nul", 14), [](runtime::Manifest& m) {
    m.metadata = {{"run", "value!with!nul"}};
  });
  EXPECT_EQ(WithReader([](ckpt_reader_t*) { return CKPT_OK; }), CKPT_E_CORRUPT);
  EXPECT_NE(message().find("metadata 'run': value 'value\\x00with!nul' contains a NUL byte at offset 5"),
            std::string::npos)
      << message();
}

TEST_F(HostileCheckpointTest, ManifestWithAMetadataKeyThatIsNotUtf8IsCorrupt) {
  WriteHostileManifest(checkpoint_, "latin!key", "latin\xe9key", [](runtime::Manifest& m) {
    m.metadata = {{"latin!key", "v"}};
  });
  EXPECT_EQ(WithReader([](ckpt_reader_t*) { return CKPT_OK; }), CKPT_E_CORRUPT);
  EXPECT_NE(message().find("metadata key 'latin\\xe9key' is not valid UTF-8"), std::string::npos) << message();
}

}  // namespace
}  // namespace ckpt

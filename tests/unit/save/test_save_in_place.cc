// A save written in place (CKPT_SAVE_IN_PLACE), through the C API on one rank: ckpt_save returns with every byte
// durable, host tensors go from where they lie (nothing copied into the arena) where the file system takes them so,
// the rest through the arena, and what the checkpoint holds is what the buffers held during the call, verified on
// load.
// ctest-labels: threaded
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ckpt.h"
#include "common/fault_injection.h"
#include "io/file_jobs.h"
#include "tests/unit/support/temp_dir.h"

namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kMiB = 1ull << 20;  // the default checksum block

// Page-aligned bytes (as a trainer's large tensors are), with a deterministic pattern per seed.
class Bytes {
 public:
  Bytes(uint64_t size, uint32_t seed, uint64_t misalignment = 0)
      : memory_(static_cast<char*>(std::aligned_alloc(kPage, (size + misalignment + kPage - 1) / kPage * kPage))),
        data_(memory_ + misalignment),
        size_(size) {
    for (uint64_t i = 0; i < size; ++i) data_[i] = static_cast<char>((i * 131 + seed * 7 + i / 4099) & 0xff);
  }
  ~Bytes() { std::free(memory_); }
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;
  char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  char* memory_;
  char* data_;
  uint64_t size_;
};

struct Tensor {
  std::string key;
  uint64_t size;
  uint64_t misalignment;
};

class SaveInPlaceTest : public ckpt::testing::TempDirTest {
 protected:
  void SetUp() override {
    ASSERT_EQ(ckpt_error_create(&err_), CKPT_OK);
    ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
    opts.rank = 0;
    opts.world_size = 1;
    opts.io_workers = 0;           // unit tests link libckpt statically: no worker executable beside them
    opts.arena_bytes = 64 * kMiB;  // the smallest: the default (an eighth of the memory) takes seconds to set up
    ASSERT_EQ(ckpt_context_create(&opts, &ctx_, err_), CKPT_OK) << message();
  }
  void TearDown() override {
    ckpt_context_free(ctx_);
    ckpt_error_free(err_);
  }
  std::string message() const { return ckpt_error_message(err_); }

  // A state of 1-D U8 tensors, each in its own buffer filled with its seed's pattern (the tensor's index + seed).
  ckpt_state_t* MakeState(const std::vector<Tensor>& tensors, uint32_t seed,
                          std::vector<std::unique_ptr<Bytes>>* buffers) {
    ckpt_state_t* state = nullptr;
    EXPECT_EQ(ckpt_state_create(&state, err_), CKPT_OK);
    for (size_t i = 0; i < tensors.size(); ++i) {
      buffers->push_back(
          std::make_unique<Bytes>(tensors[i].size, seed + static_cast<uint32_t>(i), tensors[i].misalignment));
      shapes_.push_back(std::make_unique<uint64_t[]>(2));
      shapes_.back()[0] = tensors[i].size;
      shapes_.back()[1] = 0;
      ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
      shard.key = tensors[i].key.c_str();
      shard.dtype = CKPT_DTYPE_U8;
      shard.ndim = 1;
      shard.global_shape = &shapes_.back()[0];
      shard.local_shape = &shapes_.back()[0];
      shard.global_offset = &shapes_.back()[1];
      shard.data = buffers->back()->data();
      shard.data_size = tensors[i].size;
      EXPECT_EQ(ckpt_state_add_tensor(state, &shard, err_), CKPT_OK) << message();
    }
    return state;
  }

  // Saves `tensors` in place to `name`; returns the request's stats as ckpt_save returned, after overwriting every
  // buffer (which the checkpoint must not see), and waits for the commit.
  ckpt_request_stats SaveInPlace(const std::vector<Tensor>& tensors, const std::string& name) {
    std::vector<std::unique_ptr<Bytes>> buffers;
    ckpt_state_t* state = MakeState(tensors, 1, &buffers);
    ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
    opts.flags = CKPT_SAVE_IN_PLACE;
    ckpt_request_t* request = nullptr;
    ckpt_request_stats stats = CKPT_REQUEST_STATS_INIT;
    EXPECT_EQ(ckpt_save(ctx_, state, Path(name).c_str(), &opts, &request, err_), CKPT_OK) << message();
    if (request == nullptr) return stats;
    EXPECT_EQ(ckpt_request_stats_get(request, &stats, err_), CKPT_OK) << message();
    for (const auto& buffer : buffers) std::memset(buffer->data(), 0xa5, buffer->size());
    EXPECT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
    ckpt_request_free(request);
    ckpt_state_free(state);
    return stats;
  }

  // Loads `name` into fresh buffers and compares each tensor with the pattern it was saved with; verifies every
  // block of the checkpoint too.
  void ExpectHolds(const std::vector<Tensor>& tensors, const std::string& name, uint32_t seed = 1) {
    std::vector<std::unique_ptr<Bytes>> loaded;
    ckpt_state_t* state = MakeState(tensors, 1000, &loaded);
    ASSERT_EQ(ckpt_load(ctx_, state, Path(name).c_str(), nullptr, err_), CKPT_OK) << message();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Bytes expected(tensors[i].size, seed + static_cast<uint32_t>(i));
      EXPECT_EQ(std::memcmp(loaded[i]->data(), expected.data(), tensors[i].size), 0) << tensors[i].key;
    }
    ckpt_state_free(state);
    ckpt_reader_t* reader = nullptr;
    ASSERT_EQ(ckpt_reader_open(Path(name).c_str(), &reader, err_), CKPT_OK) << message();
    EXPECT_EQ(ckpt_reader_verify(reader, err_), CKPT_OK) << message();
    ckpt_reader_free(reader);
  }

  uint64_t ContextBytesStaged() {
    ckpt_context_stats stats = CKPT_CONTEXT_STATS_INIT;
    EXPECT_EQ(ckpt_context_stats_get(ctx_, &stats, err_), CKPT_OK) << message();
    return stats.bytes_staged;
  }

  ckpt_error_t* err_ = nullptr;
  ckpt_context_t* ctx_ = nullptr;
  std::vector<std::unique_ptr<uint64_t[]>> shapes_;
};

TEST_F(SaveInPlaceTest, PageAlignedTensorsAreDurableWhenTheCallReturnsAndNoByteGoesThroughTheArena) {
  const std::vector<Tensor> tensors = {{"a", 3 * kMiB, 0}, {"b", 2 * kMiB, 0}, {"c", 16 * kPage, 0}};
  const ckpt_request_stats stats = SaveInPlace(tensors, "step-1");
  EXPECT_EQ(stats.bytes_to_write, 5 * kMiB + 16 * kPage);
  EXPECT_EQ(stats.bytes_written, stats.bytes_to_write);
  EXPECT_EQ(stats.bytes_staged, 0u);
  EXPECT_EQ(stats.files_written, 2u);  // one data file per I/O slot, written side by side
  EXPECT_EQ(ContextBytesStaged(), 0u);
  ExpectHolds(tensors, "step-1");
}

// What the file system under the test's directory allows a write from memory (what a save's data files get).
ckpt::io::SourceRules RulesOf(const std::string& dir) {
  auto executor = ckpt::io::FileJobExecutor::CreateForCallerMemory(ckpt::io::IoTuning{});
  EXPECT_TRUE(executor.ok()) << executor.status().message();
  ckpt::io::WriteJob probe;
  probe.path = dir + "/probe";
  probe.create = true;
  ckpt::Result<ckpt::io::SourceRules> rules = (*executor)->PrepareWrite(probe);
  EXPECT_TRUE(rules.ok()) << rules.status().message();
  std::filesystem::remove(probe.path);
  return rules.ok() ? *rules : ckpt::io::SourceRules{};
}

// Only what the file system cannot take from where it lies goes through the arena, exactly those bytes: with direct
// I/O a tensor's last bytes short of a page (after its last whole checksum block) and a tensor whose start is not
// aligned as the device needs (512 bytes here; 4 on NVMe drives, so that arrays aligned to 64 bytes, as numpy and
// JAX allocate them, go in place there); with buffered I/O (tmpfs) nothing. The checkpoint is the same either way.
TEST_F(SaveInPlaceTest, OnlyWhatTheFileSystemCannotTakeWhereItLiesGoesThroughTheArena) {
  const ckpt::io::SourceRules rules = RulesOf(dir());
  const std::vector<Tensor> tensors = {
      {"tail", kMiB + 1000, 0}, {"at-64", 64 * 1024, 64}, {"at-512", 64 * 1024, 512}, {"small", 3 * kPage, 0}};
  const ckpt_request_stats stats = SaveInPlace(tensors, "step-1");
  const uint64_t expected = (rules.whole_pages ? 1000 : 0) + (64 % rules.alignment != 0 ? 64 * 1024 : 0) +
                            (512 % rules.alignment != 0 ? 64 * 1024 : 0);
  EXPECT_EQ(stats.bytes_written, stats.bytes_to_write);
  EXPECT_EQ(stats.bytes_staged, expected) << "sources aligned to " << rules.alignment;
  EXPECT_EQ(ContextBytesStaged(), expected);
  ExpectHolds(tensors, "step-1");
}

// Saves may be issued back to back: an asynchronous one still writing when an in-place one starts; both commit.
TEST_F(SaveInPlaceTest, AnInPlaceSaveRightAfterAnAsynchronousOneCommitsBoth) {
  const std::vector<Tensor> tensors = {{"a", 4 * kMiB, 0}, {"b", kMiB + 8, 0}};
  std::vector<std::unique_ptr<Bytes>> buffers;
  ckpt_state_t* state = MakeState(tensors, 1, &buffers);
  ckpt_request_t* first = nullptr;
  ASSERT_EQ(ckpt_save(ctx_, state, Path("step-1").c_str(), nullptr, &first, err_), CKPT_OK) << message();
  const ckpt_request_stats stats = SaveInPlace(tensors, "step-2");
  EXPECT_EQ(stats.bytes_written, stats.bytes_to_write);
  EXPECT_EQ(ckpt_request_wait(first, 0, err_), CKPT_OK) << message();
  ckpt_request_free(first);
  ckpt_state_free(state);
  ExpectHolds(tensors, "step-1");
  ExpectHolds(tensors, "step-2");
}

TEST_F(SaveInPlaceTest, UnknownSaveFlagsAreRefusedAndNothingIsCreated) {
  std::vector<std::unique_ptr<Bytes>> buffers;
  ckpt_state_t* state = MakeState({{"a", kMiB, 0}}, 1, &buffers);
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.flags = CKPT_SAVE_IN_PLACE | 32;
  ckpt_request_t* request = nullptr;
  EXPECT_EQ(ckpt_save(ctx_, state, Path("step-1").c_str(), &opts, &request, err_), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("save flags 33"), std::string::npos) << message();
  EXPECT_EQ(request, nullptr);
  EXPECT_TRUE(std::filesystem::is_empty(dir()));
  ckpt_state_free(state);
}

// A disk failing under an in-place save fails it naming the file, leaves no directory behind, and leaves the
// checkpoint saved before it whole.
TEST_F(SaveInPlaceTest, AWriteErrorFailsTheSaveNamingTheFileAndLeavesTheCheckpointBeforeIt) {
  if (!ckpt::fault::kCompiledIn) GTEST_SKIP() << "a build without CKPT_FAULT_INJECTION has no fault hooks";
  const std::vector<Tensor> tensors = {{"a", 2 * kMiB, 0}, {"b", 2 * kMiB, 0}};
  SaveInPlace(tensors, "step-1");
  std::vector<std::unique_ptr<Bytes>> buffers;
  ckpt_state_t* state = MakeState(tensors, 1, &buffers);
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.flags = CKPT_SAVE_IN_PLACE;
  setenv(ckpt::fault::kEioPathVar, "step-2.tmp-", 1);
  ckpt_request_t* request = nullptr;
  const int32_t started = ckpt_save(ctx_, state, Path("step-2").c_str(), &opts, &request, err_);
  unsetenv(ckpt::fault::kEioPathVar);
  ASSERT_EQ(started, CKPT_OK) << message();
  EXPECT_EQ(ckpt_request_wait(request, 0, err_), CKPT_E_IO);
  EXPECT_NE(message().find("data/0-"), std::string::npos) << message();
  ckpt_request_free(request);
  ckpt_state_free(state);
  EXPECT_FALSE(std::filesystem::exists(Path("step-2")));
  for (const auto& entry : std::filesystem::directory_iterator(dir())) {
    EXPECT_EQ(entry.path().filename(), "step-1") << "left behind: " << entry.path();
  }
  ExpectHolds(tensors, "step-1");
}

// A full disk fails an in-place save on every count the others do: CKPT_E_NO_SPACE naming the file, nothing left.
TEST_F(SaveInPlaceTest, AFullDiskFailsTheSaveAsNoSpaceNamingTheFileAndLeavesNothing) {
  const std::string small = Path("small");
  ASSERT_EQ(mkdir(small.c_str(), 0700), 0);
  if (mount("tmpfs", small.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a 1 MiB tmpfs: " << std::strerror(errno);
  }
  std::vector<std::unique_ptr<Bytes>> buffers;
  ckpt_state_t* state = MakeState({{"a", 2 * kMiB, 0}}, 1, &buffers);
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.flags = CKPT_SAVE_IN_PLACE;
  ckpt_request_t* request = nullptr;
  const int32_t started = ckpt_save(ctx_, state, (small + "/step-1").c_str(), &opts, &request, err_);
  const int32_t finished = started == CKPT_OK ? ckpt_request_wait(request, 0, err_) : started;
  const std::string failure = message();
  ckpt_request_free(request);
  ckpt_state_free(state);
  const bool empty = std::filesystem::is_empty(small);
  umount2(small.c_str(), MNT_DETACH);
  EXPECT_EQ(finished, CKPT_E_NO_SPACE) << failure;
  EXPECT_NE(failure.find("data/0-0.bin"), std::string::npos) << failure;
  EXPECT_TRUE(empty) << "the failed save left files on the full disk";
}

// Writes that the kernel completes short are resumed until whole, as the I/O workers' are.
TEST_F(SaveInPlaceTest, WritesCutShortAreResumedAndTheCheckpointIsWhole) {
  if (!ckpt::fault::kCompiledIn) GTEST_SKIP() << "a build without CKPT_FAULT_INJECTION has no fault hooks";
  const std::vector<Tensor> tensors = {{"a", 2 * kMiB, 0}, {"b", kMiB + 1000, 0}};
  setenv(ckpt::fault::kShortTransferVar, "4096", 1);
  const ckpt_request_stats stats = SaveInPlace(tensors, "step-1");
  unsetenv(ckpt::fault::kShortTransferVar);
  EXPECT_EQ(stats.bytes_written, stats.bytes_to_write);
  ExpectHolds(tensors, "step-1");
}

}  // namespace

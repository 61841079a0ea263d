// Copy-on-write saves (CKPT_SAVE_COPY_ON_WRITE), through the C API on one rank: ckpt_save returns once the host
// buffers are write-protected, the trainer writes them right away (several threads, every page, twice), and the
// checkpoint still holds every byte as it was at the call; a buffer unmapped or released during the save fails it
// naming the tensor, never a crash; without userfaultfd the save copies at the call.
// ctest-labels: threaded
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ckpt.h"
#include "common/fault_injection.h"
#include "runtime/save/user_fault_fd.h"
#include "tests/unit/support/temp_dir.h"

namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kMiB = 1ull << 20;

uint8_t Pattern(uint64_t i, uint32_t seed) { return static_cast<uint8_t>((i * 131 + seed * 7 + i / 4099) & 0xff); }

// Anonymous memory of its own mapping (as a trainer's large tensors get from malloc), so that a test may unmap it.
class Mapping {
 public:
  explicit Mapping(uint64_t size) : size_(size) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }
  ~Mapping() {
    if (data_ != nullptr) munmap(data_, size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  char* data() const { return data_; }
  uint64_t size() const { return size_; }
  // Unmaps it now (the test's trainer freeing the buffer).
  void Unmap() {
    munmap(data_, size_);
    data_ = nullptr;
  }

 private:
  char* data_;
  uint64_t size_;
};

// A 1-D U8 tensor at `offset` bytes into a mapping.
struct Tensor {
  std::string key;
  size_t mapping;
  uint64_t offset;
  uint64_t size;
};

class SaveCopyOnWriteTest : public ckpt::testing::TempDirTest {
 protected:
  void SetUp() override {
    const ckpt::Result<ckpt::runtime::UserFaultFd> uffd = ckpt::runtime::UserFaultFd::Open();
    if (!uffd.ok()) GTEST_SKIP() << "copy-on-write needs userfaultfd: " << uffd.status().message();
    ASSERT_EQ(ckpt_error_create(&err_), CKPT_OK);
    ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
    opts.rank = 0;
    opts.world_size = 1;
    opts.io_workers = 0;           // unit tests link libckpt statically: no worker executable beside them
    opts.arena_bytes = 64 * kMiB;  // the smallest; states larger than it stream through it
    ASSERT_EQ(ckpt_context_create(&opts, &ctx_, err_), CKPT_OK) << message();
  }
  void TearDown() override {
    unsetenv(ckpt::fault::kStagingPauseVar);
    unsetenv(ckpt::fault::kUnprotectRefusedVar);
    ckpt_context_free(ctx_);
    ckpt_error_free(err_);
  }
  std::string message() const { return err_ != nullptr ? ckpt_error_message(err_) : ""; }

  // Mappings of these sizes, each filled with its seed's pattern.
  void Map(const std::vector<uint64_t>& sizes, uint32_t seed) {
    for (uint64_t size : sizes) {
      mappings_.push_back(std::make_unique<Mapping>(size));
      ASSERT_NE(mappings_.back()->data(), nullptr);
      for (uint64_t i = 0; i < size; ++i) {
        mappings_.back()->data()[i] = static_cast<char>(Pattern(i, seed + static_cast<uint32_t>(mappings_.size())));
      }
    }
  }
  // The bytes tensor `t` holds as mapped with `seed`.
  std::vector<char> Expected(const Tensor& t, uint32_t seed) const {
    std::vector<char> bytes(t.size);
    for (uint64_t i = 0; i < t.size; ++i) {
      bytes[i] = static_cast<char>(Pattern(t.offset + i, seed + static_cast<uint32_t>(t.mapping + 1)));
    }
    return bytes;
  }

  ckpt_state_t* MakeState(const std::vector<Tensor>& tensors, const std::vector<char*>& data) {
    ckpt_state_t* state = nullptr;
    EXPECT_EQ(ckpt_state_create(&state, err_), CKPT_OK);
    for (size_t i = 0; i < tensors.size(); ++i) {
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
      shard.data = data[i];
      shard.data_size = tensors[i].size;
      EXPECT_EQ(ckpt_state_add_tensor(state, &shard, err_), CKPT_OK) << message();
    }
    return state;
  }
  ckpt_state_t* MakeState(const std::vector<Tensor>& tensors) {
    std::vector<char*> data;
    for (const Tensor& t : tensors) data.push_back(mappings_[t.mapping]->data() + t.offset);
    return MakeState(tensors, data);
  }

  // Starts a copy-on-write save of `state` to `name`; the staging pauses `pause_ms` before each window where the
  // build has the fault hooks, so that what the test does right after the call comes before the copy.
  ckpt_request_t* StartSave(ckpt_state_t* state, const std::string& name, int pause_ms = 200,
                            ckpt_request_stats* stats = nullptr) {
    if (ckpt::fault::kCompiledIn) setenv(ckpt::fault::kStagingPauseVar, std::to_string(pause_ms).c_str(), 1);
    ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
    opts.flags = CKPT_SAVE_COPY_ON_WRITE;
    ckpt_request_t* request = nullptr;
    EXPECT_EQ(ckpt_save(ctx_, state, Path(name).c_str(), &opts, &request, err_), CKPT_OK) << message();
    if (stats != nullptr && request != nullptr) EXPECT_EQ(ckpt_request_stats_get(request, stats, err_), CKPT_OK);
    return request;
  }

  // Overwrites every page of every mapping from `threads` threads, each its own slice, twice.
  void WriteEverything(int threads) {
    std::vector<std::thread> writers;
    for (int t = 0; t < threads; ++t) {
      writers.emplace_back([this, t, threads] {
        for (int pass = 0; pass < 2; ++pass) {
          for (const auto& m : mappings_) {
            const uint64_t pages = m->size() / kPage;
            for (uint64_t p = pages * t / threads; p < pages * (t + 1) / threads; ++p) {
              std::memset(m->data() + p * kPage, 0x5a + pass, kPage);
            }
          }
        }
      });
    }
    for (std::thread& w : writers) w.join();
  }

  // Loads `name` into fresh buffers and compares each tensor with what it held when mapped with `seed`.
  void ExpectHolds(const std::vector<Tensor>& tensors, const std::string& name, uint32_t seed) {
    std::vector<std::vector<char>> loaded;
    std::vector<char*> data;
    for (const Tensor& t : tensors) {
      loaded.emplace_back(t.size);
      data.push_back(loaded.back().data());
    }
    ckpt_state_t* state = MakeState(tensors, data);
    ASSERT_EQ(ckpt_load(ctx_, state, Path(name).c_str(), nullptr, err_), CKPT_OK) << message();
    for (size_t i = 0; i < tensors.size(); ++i) {
      EXPECT_TRUE(loaded[i] == Expected(tensors[i], seed)) << tensors[i].key << " differs from its value at the call";
    }
    ckpt_state_free(state);
  }

  // Saves `tensors` with copy-on-write while `threads` threads overwrite every page right after the call returns;
  // the checkpoint must hold the values at the call.
  void SaveWhileWriting(const std::vector<Tensor>& tensors, int threads) {
    ckpt_state_t* state = MakeState(tensors);
    ckpt_request_t* request = StartSave(state, "step-1");
    ASSERT_NE(request, nullptr);
    WriteEverything(threads);
    EXPECT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
    ckpt_request_free(request);
    ckpt_state_free(state);
    ExpectHolds(tensors, "step-1", 1);
  }

  ckpt_error_t* err_ = nullptr;
  ckpt_context_t* ctx_ = nullptr;
  std::vector<std::unique_ptr<Mapping>> mappings_;
  std::vector<std::unique_ptr<uint64_t[]>> shapes_;
};

TEST_F(SaveCopyOnWriteTest, EveryPageWrittenTwiceRightAfterTheCallIsSavedAsItWasAtTheCall) {
  Map({8 * kMiB, 6 * kMiB, 64 * kPage}, 1);
  SaveWhileWriting({{"a", 0, 0, 8 * kMiB}, {"b", 1, 0, 6 * kMiB}, {"c", 2, 0, 64 * kPage}}, 4);
}

// A state larger than the 64 MiB arena streams through it while the trainer writes: the later windows come from the
// handler's copies.
TEST_F(SaveCopyOnWriteTest, AStateLargerThanTheArenaWrittenRightAfterTheCallIsSavedAsItWasAtTheCall) {
  Map({96 * kMiB}, 1);
  SaveWhileWriting({{"big", 0, 0, 96 * kMiB}}, 3);
}

// The partial pages at a tensor's ends are copied at the call, and never protected: the allocator's headers beside
// them stay writable.
TEST_F(SaveCopyOnWriteTest, TensorsWhoseEndsAreNotPageAlignedAreSavedAsTheyWereAtTheCall) {
  Map({4 * kMiB, kMiB, kPage}, 1);
  SaveWhileWriting({{"a", 0, 123, 3 * kMiB + 4001}, {"b", 1, kPage - 7, 5 * kPage}, {"c", 2, 10, 1000}}, 2);
}

TEST_F(SaveCopyOnWriteTest, TwoTensorsSharingPagesAreBothSavedAsTheyWereAtTheCall) {
  Map({6 * kMiB}, 1);
  SaveWhileWriting({{"first", 0, 100, 3 * kMiB + 5}, {"second", 0, 3 * kMiB + 105, 2 * kMiB}}, 2);
}

// ckpt_save returns before the copy, which the stats place after the call: it blocked for less than it staged.
TEST_F(SaveCopyOnWriteTest, TheCallReturnsBeforeTheCopyWhichRunsAfterIt) {
  if (!ckpt::fault::kCompiledIn) GTEST_SKIP() << "a build without CKPT_FAULT_INJECTION has no fault hooks";
  Map({32 * kMiB}, 1);
  ckpt_state_t* state = MakeState({{"a", 0, 0, 32 * kMiB}});
  ckpt_request_stats at_return = CKPT_REQUEST_STATS_INIT;
  ckpt_request_t* request = StartSave(state, "step-1", 200, &at_return);
  ASSERT_NE(request, nullptr);
  EXPECT_EQ(at_return.bytes_staged, 0u);
  ASSERT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
  ckpt_request_stats done = CKPT_REQUEST_STATS_INIT;
  ASSERT_EQ(ckpt_request_stats_get(request, &done, err_), CKPT_OK);
  EXPECT_EQ(done.bytes_staged, 32 * kMiB);
  EXPECT_GE(done.staging_ns, 200'000'000u);  // at least one window's pause
  EXPECT_LT(done.blocking_ns, done.staging_ns);
  ckpt_request_free(request);
  ckpt_state_free(state);
}

TEST_F(SaveCopyOnWriteTest, ASecondSaveIssuedWhileTheFirstStagesWaitsForItAndBothHoldTheirCallsValues) {
  Map({8 * kMiB}, 1);
  const std::vector<Tensor> tensors = {{"a", 0, 0, 8 * kMiB}};
  ckpt_state_t* state = MakeState(tensors);
  ckpt_request_t* first = StartSave(state, "step-1");
  ASSERT_NE(first, nullptr);
  // Between the calls the trainer rewrites the buffer with the pattern of seed 2: the second save holds that.
  for (uint64_t i = 0; i < 8 * kMiB; ++i) mappings_[0]->data()[i] = static_cast<char>(Pattern(i, 3));
  ckpt_request_t* second = StartSave(state, "step-2", 0);
  ASSERT_NE(second, nullptr);
  WriteEverything(2);
  EXPECT_EQ(ckpt_request_wait(first, 0, err_), CKPT_OK) << message();
  EXPECT_EQ(ckpt_request_wait(second, 0, err_), CKPT_OK) << message();
  ckpt_request_free(first);
  ckpt_request_free(second);
  ckpt_state_free(state);
  ExpectHolds(tensors, "step-1", 1);
  ExpectHolds(tensors, "step-2", 2);
}

// The kernel refuses to lift a write protection (EAGAIN) while an event such as a madvise waits unread by the fault
// handler; the stager tries again once the handler has read it, letting go of the stripe meanwhile, which the
// trainer's writes then copy: the save succeeds with the values at the call (it failed naming EAGAIN before).
TEST_F(SaveCopyOnWriteTest, ALiftOfProtectionRefusedWhileAnEventWaitsIsTriedAgainAndTheSaveHoldsTheCallsValues) {
  if (!ckpt::fault::kCompiledIn) GTEST_SKIP() << "a build without CKPT_FAULT_INJECTION has no fault hooks";
  setenv(ckpt::fault::kUnprotectRefusedVar, "3", 1);
  Map({8 * kMiB, 6 * kMiB}, 1);
  const std::vector<Tensor> tensors = {{"a", 0, 0, 8 * kMiB}, {"b", 1, 0, 6 * kMiB}};
  ckpt_state_t* state = MakeState(tensors);
  // Untouched: every stripe is lifted by the stager, each refused three times.
  ckpt_request_t* request = StartSave(state, "step-1", 0);
  ASSERT_NE(request, nullptr);
  EXPECT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
  ckpt_request_free(request);
  // Written while it stages: the handler copies stripes the stager let go of while it waited.
  request = StartSave(state, "step-2", 0);
  ASSERT_NE(request, nullptr);
  WriteEverything(2);
  EXPECT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
  ckpt_request_free(request);
  ckpt_state_free(state);
  ExpectHolds(tensors, "step-1", 1);
  ExpectHolds(tensors, "step-2", 1);
}

// A buffer the trainer unmaps before ckpt copied it: the request fails naming the tensor, nothing is committed, and
// the process goes on.
TEST_F(SaveCopyOnWriteTest, ABufferUnmappedDuringTheSaveFailsItNamingTheTensor) {
  Map({4 * kMiB, 4 * kMiB}, 1);
  ckpt_state_t* state = MakeState({{"kept", 0, 0, 4 * kMiB}, {"doomed", 1, 0, 4 * kMiB}});
  ckpt_request_t* request = StartSave(state, "step-1");
  ASSERT_NE(request, nullptr);
  mappings_[1]->Unmap();
  EXPECT_EQ(ckpt_request_wait(request, 0, err_), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("'doomed': its buffer was unmapped"), std::string::npos) << message();
  ckpt_request_free(request);
  ckpt_state_free(state);
  EXPECT_FALSE(std::filesystem::exists(Path("step-1")));
}

TEST_F(SaveCopyOnWriteTest, ABufferReleasedWithMadviseDuringTheSaveFailsItNamingTheTensor) {
  Map({4 * kMiB}, 1);
  ckpt_state_t* state = MakeState({{"dropped", 0, 0, 4 * kMiB}});
  ckpt_request_t* request = StartSave(state, "step-1");
  ASSERT_NE(request, nullptr);
  ASSERT_EQ(madvise(mappings_[0]->data(), 4 * kMiB, MADV_DONTNEED), 0);
  EXPECT_EQ(ckpt_request_wait(request, 0, err_), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("'dropped': its buffer was released by madvise"), std::string::npos) << message();
  ckpt_request_free(request);
  ckpt_state_free(state);
  EXPECT_FALSE(std::filesystem::exists(Path("step-1")));
}

// free() of a malloc'ed buffer during the save, its memory then reused and written: the save holds the old bytes
// (the writes went through the handler's copy) or fails naming the tensor (the allocator unmapped or released it).
TEST_F(SaveCopyOnWriteTest, ABufferFreedAndItsMemoryReusedIsSavedAsAtTheCallOrFailsNamingTheTensor) {
  for (const uint64_t size : {24 * kPage, 4 * kMiB}) {  // from the heap, and from a mapping of its own
    const Tensor t{"freed", 0, 0, size};
    char* buffer = static_cast<char*>(std::malloc(size));
    ASSERT_NE(buffer, nullptr);
    for (uint64_t i = 0; i < size; ++i) buffer[i] = static_cast<char>(Pattern(i, 2));
    ckpt_state_t* state = MakeState({t}, {buffer});
    const std::string name = "step-" + std::to_string(size);
    ckpt_request_t* request = StartSave(state, name);
    ASSERT_NE(request, nullptr);
    std::free(buffer);
    std::vector<char*> reused;
    for (int i = 0; i < 4; ++i) {
      reused.push_back(static_cast<char*>(std::malloc(size)));
      std::memset(reused.back(), 0x77, size);
    }
    const int32_t outcome = ckpt_request_wait(request, 0, err_);
    const std::string failure = message();
    ckpt_request_free(request);
    ckpt_state_free(state);
    for (char* r : reused) std::free(r);
    if (outcome != CKPT_OK) {
      EXPECT_EQ(outcome, CKPT_E_INVALID_ARGUMENT) << failure;
      EXPECT_NE(failure.find("'freed': its buffer"), std::string::npos) << failure;
      EXPECT_FALSE(std::filesystem::exists(Path(name)));
      continue;
    }
    std::vector<char> loaded(size);
    ckpt_state_t* into = MakeState({t}, {loaded.data()});
    ASSERT_EQ(ckpt_load(ctx_, into, Path(name).c_str(), nullptr, err_), CKPT_OK) << message();
    ckpt_state_free(into);
    for (uint64_t i = 0; i < size; ++i) {
      ASSERT_EQ(static_cast<uint8_t>(loaded[i]), Pattern(i, 2)) << "byte " << i << " of a " << size << "-byte buffer";
    }
  }
}

// How much of [begin, end) lies in transparent huge pages, in KiB (/proc/self/smaps' AnonHugePages of the mappings
// overlapping it).
uint64_t HugePagesKib(const char* begin, const char* end) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  uint64_t total = 0;
  while (std::getline(smaps, line)) {
    uintptr_t from = 0, to = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &from, &to) == 2 && line.find(':') > line.find(' ')) {
      inside = from < reinterpret_cast<uintptr_t>(end) && to > reinterpret_cast<uintptr_t>(begin);
      continue;
    }
    unsigned long kib = 0;
    if (inside && std::sscanf(line.c_str(), "AnonHugePages: %lu kB", &kib) == 1) total += kib;
  }
  return total;
}

// Once a save staged, its buffers are collapsed into huge pages in the background, so that the next save's
// protection is cheap; the bytes stay what the trainer wrote.
TEST_F(SaveCopyOnWriteTest, AfterASaveItsBuffersAreCollapsedIntoHugePagesKeepingTheirBytes) {
  std::ifstream enabled("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string setting;
  if (!std::getline(enabled, setting) || setting.find("[never]") != std::string::npos) {
    GTEST_SKIP() << "transparent huge pages are disabled here";
  }
  Map({16 * kMiB}, 1);
  const Tensor t{"a", 0, 0, 16 * kMiB};
  const char* begin = mappings_[0]->data();
  ASSERT_EQ(HugePagesKib(begin, begin + t.size), 0u) << "the test's mapping is in huge pages already";
  ckpt_state_t* state = MakeState({t});
  ckpt_request_t* request = StartSave(state, "step-1", 0);
  ASSERT_NE(request, nullptr);
  EXPECT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
  ckpt_request_free(request);
  ckpt_state_free(state);
  // 16 MiB hold at least 7 whole huge pages, however the mapping is aligned.
  for (int i = 0; i < 200 && HugePagesKib(begin, begin + t.size) < 7 * 2048; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GE(HugePagesKib(begin, begin + t.size), 7 * 2048u);
  EXPECT_TRUE(std::memcmp(begin, Expected(t, 1).data(), t.size) == 0);
}

TEST_F(SaveCopyOnWriteTest, CopyOnWriteWithInPlaceIsRefused) {
  Map({kMiB}, 1);
  ckpt_state_t* state = MakeState({{"a", 0, 0, kMiB}});
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.flags = CKPT_SAVE_COPY_ON_WRITE | CKPT_SAVE_IN_PLACE;
  ckpt_request_t* request = nullptr;
  EXPECT_EQ(ckpt_save(ctx_, state, Path("step-1").c_str(), &opts, &request, err_), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("cannot be combined with CKPT_SAVE_IN_PLACE"), std::string::npos) << message();
  EXPECT_EQ(request, nullptr);
  EXPECT_TRUE(std::filesystem::is_empty(dir()));
  ckpt_state_free(state);
}

TEST_F(SaveCopyOnWriteTest, CopyOnWriteToTheMemoryTierIsRefused) {
  Map({kMiB}, 1);
  ckpt_state_t* state = MakeState({{"a", 0, 0, kMiB}});
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.flags = CKPT_SAVE_COPY_ON_WRITE;
  opts.tier = CKPT_TIER_MEMORY;
  ckpt_request_t* request = nullptr;
  EXPECT_EQ(ckpt_save(ctx_, state, Path("step-1").c_str(), &opts, &request, err_), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("storage only"), std::string::npos) << message();
  EXPECT_EQ(request, nullptr);
  ckpt_state_free(state);
}

// Where userfaultfd is refused the save stages at the call, as one without the flag: the buffers may change as
// soon as it returns.
TEST(SaveCopyOnWriteFallbackTest, WithoutUserfaultfdTheSaveCopiesAtTheCallAndHoldsTheValuesAtTheCall) {
  if (!ckpt::fault::kCompiledIn) GTEST_SKIP() << "a build without CKPT_FAULT_INJECTION has no fault hooks";
  ckpt::testing::TempDir dir("cow-fallback");
  setenv(ckpt::fault::kNoUserFaultFdVar, "1", 1);
  ckpt_error_t* err = nullptr;
  ASSERT_EQ(ckpt_error_create(&err), CKPT_OK);
  ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
  opts.io_workers = 0;
  opts.arena_bytes = 64 * kMiB;
  ckpt_context_t* ctx = nullptr;
  ASSERT_EQ(ckpt_context_create(&opts, &ctx, err), CKPT_OK) << ckpt_error_message(err);
  std::vector<char> bytes(3 * kMiB + 11), loaded(bytes.size());
  for (uint64_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(Pattern(i, 4));
  const std::vector<char> at_call = bytes;
  uint64_t shape[1] = {bytes.size()}, offset[1] = {0};
  auto state_of = [&](char* data) {
    ckpt_state_t* state = nullptr;
    EXPECT_EQ(ckpt_state_create(&state, err), CKPT_OK);
    ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
    shard.key = "a";
    shard.dtype = CKPT_DTYPE_U8;
    shard.ndim = 1;
    shard.global_shape = shard.local_shape = shape;
    shard.global_offset = offset;
    shard.data = data;
    shard.data_size = bytes.size();
    EXPECT_EQ(ckpt_state_add_tensor(state, &shard, err), CKPT_OK) << ckpt_error_message(err);
    return state;
  };
  ckpt_state_t* state = state_of(bytes.data());
  ckpt_save_options save = CKPT_SAVE_OPTIONS_INIT;
  save.flags = CKPT_SAVE_COPY_ON_WRITE;
  ckpt_request_t* request = nullptr;
  const int32_t started = ckpt_save(ctx, state, dir.Path("step-1").c_str(), &save, &request, err);
  unsetenv(ckpt::fault::kNoUserFaultFdVar);
  ASSERT_EQ(started, CKPT_OK) << ckpt_error_message(err);
  ckpt_request_stats stats = CKPT_REQUEST_STATS_INIT;
  EXPECT_EQ(ckpt_request_stats_get(request, &stats, err), CKPT_OK);
  EXPECT_EQ(stats.bytes_staged, bytes.size());  // staged within the call
  std::memset(bytes.data(), 0x33, bytes.size());
  EXPECT_EQ(ckpt_request_wait(request, 0, err), CKPT_OK) << ckpt_error_message(err);
  ckpt_request_free(request);
  ckpt_state_free(state);
  ckpt_state_t* into = state_of(loaded.data());
  ASSERT_EQ(ckpt_load(ctx, into, dir.Path("step-1").c_str(), nullptr, err), CKPT_OK) << ckpt_error_message(err);
  EXPECT_TRUE(loaded == at_call);
  ckpt_state_free(into);
  ckpt_context_free(ctx);
  ckpt_error_free(err);
}

}  // namespace

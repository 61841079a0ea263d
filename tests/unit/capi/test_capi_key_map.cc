// Loads through a key map (ckpt_load_options' key_map), on one rank through the C API: a state whose keys changed
// since the save finds its tensors, objects and common entries under their saved keys; what cannot be found is
// named with what it was looked up as, beside the checkpoint's keys nobody asked for; a map that would leave a key
// unfilled is refused.
// ctest-labels: threaded
#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include "ckpt.h"
#include "tests/unit/support/temp_dir.h"

namespace {

class CapiKeyMapTest : public ckpt::testing::TempDirTest {
 protected:
  void SetUp() override {
    ASSERT_EQ(ckpt_error_create(&err_), CKPT_OK);
    ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
    opts.rank = 0;
    opts.world_size = 1;
    opts.io_workers = 0;  // unit tests link libckpt statically: no worker executable beside them
    opts.log = [](void*, int32_t, const char*) {};  // the warnings of CKPT_STRICT_LOG are not this test's output
    ASSERT_EQ(ckpt_context_create(&opts, &ctx_, err_), CKPT_OK) << message();
    ASSERT_EQ(ckpt_state_create(&state_, err_), CKPT_OK);
    path_ = Path("step");
  }
  void TearDown() override {
    ckpt_state_free(state_);
    ckpt_context_free(ctx_);
    ckpt_error_free(err_);
  }
  std::string message() const { return ckpt_error_message(err_); }

  // Registers a whole 1-D float tensor under `key`.
  int32_t AddTensor(ckpt_state_t* state, const char* key, std::vector<float>& data) {
    const uint64_t* shape = &sizes_.emplace_back(data.size());
    ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
    shard.key = key;
    shard.dtype = CKPT_DTYPE_F32;
    shard.ndim = 1;
    shard.global_shape = shape;
    shard.local_shape = shape;
    shard.global_offset = &zero_;
    shard.data = data.data();
    shard.data_size = data.size() * sizeof(float);
    return ckpt_state_add_tensor(state, &shard, err_);
  }

  // Saves the float tensors and common strings, by key, as the checkpoint at path_.
  void Save(const std::vector<std::pair<const char*, std::vector<float>*>>& tensors,
            const std::vector<std::pair<const char*, std::string>>& common = {}) {
    ckpt_state_t* state = nullptr;
    ASSERT_EQ(ckpt_state_create(&state, err_), CKPT_OK);
    for (const auto& [key, data] : tensors) ASSERT_EQ(AddTensor(state, key, *data), CKPT_OK) << message();
    for (const auto& [key, value] : common) {
      ASSERT_EQ(ckpt_state_add_common(state, key, value.data(), value.size(), err_), CKPT_OK) << message();
    }
    ckpt_request_t* request = nullptr;
    ASSERT_EQ(ckpt_save(ctx_, state, path_.c_str(), nullptr, &request, err_), CKPT_OK) << message();
    ASSERT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
    ckpt_request_free(request);
    ckpt_state_free(state);
  }

  // Loads path_ into state_ with `pairs` as the key map (registered key, saved key, ...).
  int32_t Load(const std::vector<const char*>& pairs, int32_t missing = CKPT_STRICT_FAIL,
               int32_t unexpected = CKPT_STRICT_FAIL) {
    ckpt_load_options opts = CKPT_LOAD_OPTIONS_INIT;
    opts.missing_keys = missing;
    opts.unexpected_keys = unexpected;
    opts.key_map = pairs.data();
    opts.key_map_count = pairs.size() / 2;
    return ckpt_load(ctx_, state_, path_.c_str(), &opts, err_);
  }

  std::string Common(const char* key) {
    const void* data = nullptr;
    uint64_t size = 0;
    if (ckpt_state_common(state_, key, &data, &size, err_) != CKPT_OK) return "<absent>";
    return std::string(static_cast<const char*>(data), size);
  }

  ckpt_error_t* err_ = nullptr;
  ckpt_context_t* ctx_ = nullptr;
  ckpt_state_t* state_ = nullptr;
  std::string path_;
  std::deque<uint64_t> sizes_;  // the registered shapes, which must not move
  const uint64_t zero_ = 0;
};

std::vector<float> Values(size_t n, float first) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = first + static_cast<float>(i);
  return v;
}

TEST_F(CapiKeyMapTest, ARenamedTensorLoadsFromItsSavedKey) {
  std::vector<float> kernel = Values(6, 1), bias = Values(3, 10);
  Save({{"params/Dense_0/kernel", &kernel}, {"params/Dense_0/bias", &bias}});
  std::vector<float> new_kernel(6), new_bias(3);
  ASSERT_EQ(AddTensor(state_, "model/layers/0/kernel", new_kernel), CKPT_OK) << message();
  ASSERT_EQ(AddTensor(state_, "model/layers/0/bias", new_bias), CKPT_OK) << message();
  ASSERT_EQ(Load({"model/layers/0/kernel", "params/Dense_0/kernel", "model/layers/0/bias", "params/Dense_0/bias"}),
            CKPT_OK)
      << message();
  EXPECT_EQ(new_kernel, kernel);
  EXPECT_EQ(new_bias, bias);
}

TEST_F(CapiKeyMapTest, AMapThatSwapsTwoTensorsFillsEachFromTheOther) {
  std::vector<float> a = Values(4, 1), b = Values(4, 100);
  Save({{"a", &a}, {"b", &b}});
  std::vector<float> got_a(4), got_b(4);
  ASSERT_EQ(AddTensor(state_, "a", got_a), CKPT_OK);
  ASSERT_EQ(AddTensor(state_, "b", got_b), CKPT_OK);
  ASSERT_EQ(Load({"a", "b", "b", "a"}), CKPT_OK) << message();
  EXPECT_EQ(got_a, b);
  EXPECT_EQ(got_b, a);
}

TEST_F(CapiKeyMapTest, AMappedCommonEntryIsReadBackUnderTheRegisteredKey) {
  std::vector<float> w = Values(2, 0);
  Save({{"w", &w}}, {{"old/step", "41"}, {"old/name", "run"}});
  std::vector<float> got(2);
  ASSERT_EQ(AddTensor(state_, "w", got), CKPT_OK);
  ASSERT_EQ(Load({"new/step", "old/step"}), CKPT_OK) << message();
  EXPECT_EQ(Common("new/step"), "41");
  EXPECT_EQ(Common("old/name"), "run");  // unmapped entries keep their own keys
}

TEST_F(CapiKeyMapTest, AMapThatSwapsTwoCommonEntriesReadsEachUnderTheOthersKey) {
  std::vector<float> w = Values(2, 0);
  Save({{"w", &w}}, {{"x", "ex"}, {"y", "why"}});
  std::vector<float> got(2);
  ASSERT_EQ(AddTensor(state_, "w", got), CKPT_OK);
  ASSERT_EQ(Load({"x", "y", "y", "x"}), CKPT_OK) << message();
  EXPECT_EQ(Common("x"), "why");
  EXPECT_EQ(Common("y"), "ex");
}

TEST_F(CapiKeyMapTest, ARenamedObjectLoadsFromItsSavedKey) {
  char saved[5] = "abcd";
  {
    ckpt_state_t* state = nullptr;
    ASSERT_EQ(ckpt_state_create(&state, err_), CKPT_OK);
    ASSERT_EQ(ckpt_state_add_object(state, "rng_old", 0, nullptr, nullptr, saved, 4, err_), CKPT_OK) << message();
    ckpt_request_t* request = nullptr;
    ASSERT_EQ(ckpt_save(ctx_, state, path_.c_str(), nullptr, &request, err_), CKPT_OK) << message();
    ASSERT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
    ckpt_request_free(request);
    ckpt_state_free(state);
  }
  char got[5] = "....";
  ASSERT_EQ(ckpt_state_add_object(state_, "rng", 0, nullptr, nullptr, got, 4, err_), CKPT_OK) << message();
  ASSERT_EQ(Load({"rng", "rng_old"}), CKPT_OK) << message();
  EXPECT_STREQ(got, "abcd");
}

TEST_F(CapiKeyMapTest, AMissingKeyUnderStrictFailNamesWhatItWasLookedUpAsAndTheKeysNobodyAskedFor) {
  std::vector<float> kernel = Values(6, 1), bias = Values(3, 10);
  Save({{"params/Dense_0/kernel", &kernel}, {"params/Dense_0/bias", &bias}});
  std::vector<float> new_kernel(6), new_bias(3);
  ASSERT_EQ(AddTensor(state_, "model/kernel", new_kernel), CKPT_OK);
  ASSERT_EQ(AddTensor(state_, "model/bias", new_bias), CKPT_OK);
  EXPECT_EQ(Load({"model/kernel", "params/Dense_0/kernal"}), CKPT_E_MISMATCH);
  EXPECT_NE(message().find("2 keys of this rank's state are not in the checkpoint"), std::string::npos) << message();
  EXPECT_NE(message().find("'model/kernel' (looked up as 'params/Dense_0/kernal')"), std::string::npos) << message();
  EXPECT_NE(message().find("'model/bias'"), std::string::npos) << message();
  EXPECT_NE(message().find("the checkpoint's keys this rank did not ask for: 'params/Dense_0/bias', "
                           "'params/Dense_0/kernel'"),
            std::string::npos)
      << message();
}

TEST_F(CapiKeyMapTest, AMissingKeyUnderStrictIgnoreLeavesItsBufferAndLoadsTheRest) {
  std::vector<float> kernel = Values(6, 1);
  Save({{"params/kernel", &kernel}});
  std::vector<float> got(6), absent(2, -1.0f);
  ASSERT_EQ(AddTensor(state_, "kernel", got), CKPT_OK);
  ASSERT_EQ(AddTensor(state_, "new_bias", absent), CKPT_OK);
  ASSERT_EQ(Load({"kernel", "params/kernel"}, CKPT_STRICT_IGNORE), CKPT_OK) << message();
  EXPECT_EQ(got, kernel);
  EXPECT_EQ(absent, std::vector<float>(2, -1.0f));
}

TEST_F(CapiKeyMapTest, UnexpectedKeysUnderStrictFailAreNamedWithTheKeysTheCheckpointLacks) {
  std::vector<float> kernel = Values(6, 1), bias = Values(3, 10);
  Save({{"params/kernel", &kernel}, {"params/bias", &bias}});
  std::vector<float> got(6), other(3);
  ASSERT_EQ(AddTensor(state_, "kernel", got), CKPT_OK);
  ASSERT_EQ(AddTensor(state_, "b", other), CKPT_OK);
  EXPECT_EQ(Load({"kernel", "params/kernel"}, CKPT_STRICT_LOG, CKPT_STRICT_FAIL), CKPT_E_MISMATCH);
  EXPECT_NE(message().find("1 keys of the checkpoint no rank asked for: 'params/bias'"), std::string::npos)
      << message();
  EXPECT_NE(message().find("rank 0's keys not in the checkpoint: 'b'"), std::string::npos) << message();
}

TEST_F(CapiKeyMapTest, AKeyMappedTwiceIsRefusedNamingBothTargets) {
  std::vector<float> w = Values(2, 0);
  Save({{"w", &w}});
  std::vector<float> got(2);
  ASSERT_EQ(AddTensor(state_, "v", got), CKPT_OK);
  EXPECT_EQ(Load({"v", "w", "v", "u"}), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("maps 'v' twice: to 'w' and to 'u'"), std::string::npos) << message();
}

TEST_F(CapiKeyMapTest, TwoKeysMappedToOneSavedKeyAreRefusedNamingThem) {
  std::vector<float> w = Values(2, 0);
  Save({{"w", &w}});
  std::vector<float> got(2);
  ASSERT_EQ(AddTensor(state_, "v", got), CKPT_OK);
  EXPECT_EQ(Load({"v", "w", "u", "w"}), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("maps both 'v' and 'u' to 'w'"), std::string::npos) << message();
}

TEST_F(CapiKeyMapTest, AMapWithoutItsPairsOrWithANullKeyIsRefused) {
  ckpt_load_options opts = CKPT_LOAD_OPTIONS_INIT;
  opts.key_map_count = 1;
  EXPECT_EQ(ckpt_load(ctx_, state_, path_.c_str(), &opts, err_), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("key_map is required"), std::string::npos) << message();
  const char* pairs[] = {"a", nullptr};
  opts.key_map = pairs;
  EXPECT_EQ(ckpt_load(ctx_, state_, path_.c_str(), &opts, err_), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("key_map pair 0"), std::string::npos) << message();
}

}  // namespace

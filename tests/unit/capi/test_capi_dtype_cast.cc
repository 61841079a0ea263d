// Loads that convert the stored floating dtype into the registered one (CKPT_SHARD_ALLOW_DTYPE_CAST), through the
// C API on one rank: whole, resharded, flattened, with a changed shape, and what is refused. The expected values
// come from the conversion kernel, whose rounding core/test_dtype_cast.cc checks against independent references.
// ctest-labels: threaded
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ckpt.h"
#include "runtime/core/dtype_cast.h"
#include "tests/unit/support/temp_dir.h"

namespace {

using ckpt::runtime::CastElements;

// One tensor's shard as the C API takes it; the vectors own the shape arrays.
struct Shard {
  std::string key = "w";
  int32_t dtype = CKPT_DTYPE_F32;
  std::vector<uint64_t> global, local, offset;
  uint32_t flags = 0;
  uint64_t flat_start = 0, flat_end = 0;
  void* data = nullptr;
  uint64_t data_size = 0;
};

class CapiDtypeCastTest : public ckpt::testing::TempDirTest {
 protected:
  void SetUp() override {
    ASSERT_EQ(ckpt_error_create(&err_), CKPT_OK);
    ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
    opts.rank = 0;
    opts.world_size = 1;
    opts.io_workers = 0;  // unit tests link libckpt statically: no worker executable beside them
    ASSERT_EQ(ckpt_context_create(&opts, &ctx_, err_), CKPT_OK) << message();
    path_ = Path("step");
  }
  void TearDown() override {
    ckpt_context_free(ctx_);
    ckpt_error_free(err_);
  }
  std::string message() const { return ckpt_error_message(err_); }

  int32_t Add(ckpt_state_t* state, const Shard& s) {
    ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
    shard.key = s.key.c_str();
    shard.dtype = s.dtype;
    shard.ndim = static_cast<uint32_t>(s.global.size());
    shard.global_shape = s.global.data();
    shard.local_shape = s.local.data();
    shard.global_offset = s.offset.data();
    shard.flags = s.flags;
    shard.flat_start = s.flat_start;
    shard.flat_end = s.flat_end;
    shard.data = s.data;
    shard.data_size = s.data_size;
    return ckpt_state_add_tensor(state, &shard, err_);
  }

  // Saves the shards as one rank's state; fails the test if anything is refused.
  void Save(const std::vector<Shard>& shards) {
    ckpt_state_t* state = nullptr;
    ASSERT_EQ(ckpt_state_create(&state, err_), CKPT_OK);
    for (const Shard& s : shards) ASSERT_EQ(Add(state, s), CKPT_OK) << message();
    ckpt_request_t* request = nullptr;
    ASSERT_EQ(ckpt_save(ctx_, state, path_.c_str(), nullptr, &request, err_), CKPT_OK) << message();
    ASSERT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
    ckpt_request_free(request);
    ckpt_state_free(state);
  }

  // Loads into the shards; returns the load's status.
  int32_t Load(const std::vector<Shard>& shards) {
    ckpt_state_t* state = nullptr;
    EXPECT_EQ(ckpt_state_create(&state, err_), CKPT_OK);
    for (const Shard& s : shards) {
      const int32_t added = Add(state, s);
      if (added != CKPT_OK) {
        ckpt_state_free(state);
        return added;
      }
    }
    const int32_t status = ckpt_load(ctx_, state, path_.c_str(), nullptr, err_);
    ckpt_state_free(state);
    return status;
  }

  ckpt_error_t* err_ = nullptr;
  ckpt_context_t* ctx_ = nullptr;
  std::string path_;
};

template <typename T>
Shard Whole(std::vector<T>& data, int32_t dtype, std::vector<uint64_t> shape, uint32_t flags = 0) {
  Shard s;
  s.dtype = dtype;
  s.global = shape;
  s.local = shape;
  s.offset.assign(shape.size(), 0);
  s.flags = flags;
  s.data = data.data();
  s.data_size = data.size() * sizeof(T);
  return s;
}

// F32 values that exercise rounding: ties, values past BF16's range, subnormals, NaN and infinities.
std::vector<float> TrickyFloats(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::ldexp(1.0f + static_cast<float>(i) / 256.0f, static_cast<int>(i % 17) - 8);
  const float special[] = {1.0f + std::ldexp(1.0f, -8), 3.0e38f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, 65520.0f};
  for (size_t i = 0; i < sizeof special / sizeof special[0] && i < n; ++i) v[i] = special[i];
  return v;
}

template <typename To, typename From>
std::vector<To> Expected(const std::vector<From>& values, int32_t from, int32_t to) {
  std::vector<To> out(values.size());
  CastElements(from, to, values.data(), out.data(), values.size());
  return out;
}

TEST_F(CapiDtypeCastTest, F32SavedLoadsIntoBf16) {
  std::vector<float> saved = TrickyFloats(6 * 10);
  Save({Whole(saved, CKPT_DTYPE_F32, {6, 10})});
  std::vector<uint16_t> loaded(saved.size(), 0xAAAA);
  ASSERT_EQ(Load({Whole(loaded, CKPT_DTYPE_BF16, {6, 10}, CKPT_SHARD_ALLOW_DTYPE_CAST)}), CKPT_OK) << message();
  EXPECT_EQ(loaded, (Expected<uint16_t>(saved, CKPT_DTYPE_F32, CKPT_DTYPE_BF16)));
  EXPECT_EQ(loaded[0], 0x3F80);           // 1 + 2^-8, a tie, goes to the even 1.0
  EXPECT_EQ(loaded[3], 0x7F80);           // infinity
  EXPECT_EQ(loaded[5] & 0x7FC0, 0x7FC0);  // a quiet NaN
}

TEST_F(CapiDtypeCastTest, Bf16SavedLoadsIntoF32AndF16) {
  std::vector<uint16_t> saved(64 * 32);
  for (size_t i = 0; i < saved.size(); ++i) saved[i] = static_cast<uint16_t>(i * 37);
  Save({Whole(saved, CKPT_DTYPE_BF16, {64, 32})});
  std::vector<float> single(saved.size());
  ASSERT_EQ(Load({Whole(single, CKPT_DTYPE_F32, {64, 32}, CKPT_SHARD_ALLOW_DTYPE_CAST)}), CKPT_OK) << message();
  for (size_t i = 0; i < saved.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &single[i], sizeof bits);
    if (!std::isnan(single[i])) ASSERT_EQ(bits, static_cast<uint32_t>(saved[i]) << 16) << i;  // exact
  }
  std::vector<uint16_t> half(saved.size());
  ASSERT_EQ(Load({Whole(half, CKPT_DTYPE_F16, {64, 32}, CKPT_SHARD_ALLOW_DTYPE_CAST)}), CKPT_OK) << message();
  EXPECT_EQ(half, (Expected<uint16_t>(saved, CKPT_DTYPE_BF16, CKPT_DTYPE_F16)));
}

TEST_F(CapiDtypeCastTest, F64SavedLoadsIntoF32) {
  std::vector<double> saved(1000);
  for (size_t i = 0; i < saved.size(); ++i)
    saved[i] = std::sin(static_cast<double>(i)) * std::pow(10.0, static_cast<int>(i % 80) - 40);
  Save({Whole(saved, CKPT_DTYPE_F64, {1000})});
  std::vector<float> loaded(saved.size());
  ASSERT_EQ(Load({Whole(loaded, CKPT_DTYPE_F32, {1000}, CKPT_SHARD_ALLOW_DTYPE_CAST)}), CKPT_OK) << message();
  for (size_t i = 0; i < saved.size(); ++i) ASSERT_EQ(loaded[i], static_cast<float>(saved[i])) << i;
}

TEST_F(CapiDtypeCastTest, ReshardedLoadCastsEveryBox) {
  // Saved as two row halves of [8, 6], loaded as two column boxes, each read from both halves and converted.
  std::vector<float> all = TrickyFloats(8 * 6);
  std::vector<float> top(all.begin(), all.begin() + 24), bottom(all.begin() + 24, all.end());
  Shard top_shard = Whole(top, CKPT_DTYPE_F32, {8, 6});
  top_shard.local = {4, 6};
  Shard bottom_shard = top_shard;
  bottom_shard.offset = {4, 0};
  bottom_shard.data = bottom.data();
  Save({top_shard, bottom_shard});

  std::vector<uint16_t> left(8 * 4), right(8 * 2);
  Shard left_shard = Whole(left, CKPT_DTYPE_BF16, {8, 6}, CKPT_SHARD_ALLOW_DTYPE_CAST);
  left_shard.local = {8, 4};
  Shard right_shard = Whole(right, CKPT_DTYPE_BF16, {8, 6}, CKPT_SHARD_ALLOW_DTYPE_CAST);
  right_shard.local = {8, 2};
  right_shard.offset = {0, 4};
  ASSERT_EQ(Load({left_shard, right_shard}), CKPT_OK) << message();
  const std::vector<uint16_t> expected = Expected<uint16_t>(all, CKPT_DTYPE_F32, CKPT_DTYPE_BF16);
  for (size_t r = 0; r < 8; ++r) {
    for (size_t c = 0; c < 6; ++c) {
      const uint16_t got = c < 4 ? left[r * 4 + c] : right[r * 2 + c - 4];
      ASSERT_EQ(got, expected[r * 6 + c]) << r << "," << c;
    }
  }
}

TEST_F(CapiDtypeCastTest, FlattenedShardIsCast) {
  std::vector<float> saved = TrickyFloats(5 * 7);
  Save({Whole(saved, CKPT_DTYPE_F32, {5, 7})});
  std::vector<uint16_t> range(30 - 3);
  Shard flat = Whole(range, CKPT_DTYPE_BF16, {5, 7}, CKPT_SHARD_FLATTENED | CKPT_SHARD_ALLOW_DTYPE_CAST);
  flat.flat_start = 3;
  flat.flat_end = 30;
  ASSERT_EQ(Load({flat}), CKPT_OK) << message();
  const std::vector<uint16_t> expected = Expected<uint16_t>(saved, CKPT_DTYPE_F32, CKPT_DTYPE_BF16);
  EXPECT_EQ(range, std::vector<uint16_t>(expected.begin() + 3, expected.begin() + 30));
}

TEST_F(CapiDtypeCastTest, CastCombinesWithAShapeMismatch) {
  std::vector<float> saved(4 * 4);
  for (size_t i = 0; i < saved.size(); ++i) saved[i] = static_cast<float>(i) + 0.5f;
  Save({Whole(saved, CKPT_DTYPE_F32, {4, 4})});
  std::vector<uint16_t> loaded(5 * 3, 0xAAAA);
  ASSERT_EQ(
      Load({Whole(loaded, CKPT_DTYPE_BF16, {5, 3}, CKPT_SHARD_ALLOW_DTYPE_CAST | CKPT_SHARD_ALLOW_SHAPE_MISMATCH)}),
      CKPT_OK)
      << message();
  for (size_t r = 0; r < 5; ++r) {
    for (size_t c = 0; c < 3; ++c) {
      const float value = r < 4 ? saved[r * 4 + c] : 0.0f;  // row 4 is not stored: zeros; column 3 is dropped
      ASSERT_EQ(loaded[r * 3 + c], (Expected<uint16_t>(std::vector<float>{value}, CKPT_DTYPE_F32, CKPT_DTYPE_BF16)[0]))
          << r << "," << c;
    }
  }
}

TEST_F(CapiDtypeCastTest, WithoutTheFlagIsAMismatchNamingTheKeyAndBothDtypes) {
  std::vector<float> saved(16, 1.0f);
  Save({Whole(saved, CKPT_DTYPE_F32, {16})});
  std::vector<uint16_t> loaded(16);
  EXPECT_EQ(Load({Whole(loaded, CKPT_DTYPE_BF16, {16})}), CKPT_E_MISMATCH);
  EXPECT_NE(message().find("tensor 'w': stored as F32, registered as BF16 without CKPT_SHARD_ALLOW_DTYPE_CAST"),
            std::string::npos)
      << message();
}

TEST_F(CapiDtypeCastTest, IntegerAndFloat8DifferencesAreRefusedEvenWithTheFlag) {
  std::vector<int32_t> saved(16, 7);
  Save({Whole(saved, CKPT_DTYPE_I32, {16})});
  std::vector<float> single(16);
  EXPECT_EQ(Load({Whole(single, CKPT_DTYPE_F32, {16}, CKPT_SHARD_ALLOW_DTYPE_CAST)}), CKPT_E_MISMATCH);
  EXPECT_NE(message().find("tensor 'w': stored as I32, registered as F32"), std::string::npos) << message();
  EXPECT_NE(message().find("F16, BF16, F32 and F64"), std::string::npos) << message();
  std::vector<uint8_t> bytes(16);
  EXPECT_EQ(Load({Whole(bytes, CKPT_DTYPE_F8_E4M3, {16}, CKPT_SHARD_ALLOW_DTYPE_CAST)}), CKPT_E_MISMATCH);
  EXPECT_NE(message().find("stored as I32, registered as F8_E4M3"), std::string::npos) << message();
}

TEST_F(CapiDtypeCastTest, DataSizeCountsTheRegisteredDtype) {
  std::vector<float> saved(16, 1.0f);
  Save({Whole(saved, CKPT_DTYPE_F32, {16})});
  std::vector<uint16_t> loaded(16);
  Shard shard = Whole(loaded, CKPT_DTYPE_BF16, {16}, CKPT_SHARD_ALLOW_DTYPE_CAST);
  shard.data_size = 16 * sizeof(float);  // the stored dtype's size: wrong
  EXPECT_EQ(Load({shard}), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("data_size"), std::string::npos) << message();
}

TEST_F(CapiDtypeCastTest, SaveIgnoresTheFlagAndStoresTheRegisteredDtype) {
  std::vector<uint16_t> saved(8, 0x3F80);
  Save({Whole(saved, CKPT_DTYPE_BF16, {8}, CKPT_SHARD_ALLOW_DTYPE_CAST)});
  ckpt_reader_t* reader = nullptr;
  ASSERT_EQ(ckpt_reader_open(path_.c_str(), &reader, err_), CKPT_OK) << message();
  ckpt_tensor_info info = CKPT_TENSOR_INFO_INIT;
  ASSERT_EQ(ckpt_reader_tensor(reader, 0, &info, err_), CKPT_OK) << message();
  EXPECT_EQ(info.dtype, CKPT_DTYPE_BF16);
  ckpt_reader_free(reader);
}

}  // namespace

// The C API's contract on one rank: ABI conventions (struct_size, _INIT macros), status codes, argument checks.
// ctest-labels: threaded
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "ckpt.h"
#include "tests/unit/support/temp_dir.h"

namespace {

class CapiTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(ckpt_error_create(&err_), CKPT_OK); }
  void TearDown() override { ckpt_error_free(err_); }
  std::string message() const { return ckpt_error_message(err_); }
  ckpt_error_t* err_ = nullptr;
};

template <typename T>
bool SameBytes(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Field by field: padding bytes are not part of a struct's value.
bool SameOptions(const ckpt_context_options& a, const ckpt_context_options& b) {
  return a.struct_size == b.struct_size && a.rank == b.rank && a.world_size == b.world_size &&
         a.local_rank == b.local_rank && a.store_host == b.store_host && a.store_port == b.store_port &&
         a.timeout_ms == b.timeout_ms && a.allgather == b.allgather && a.allgather_user == b.allgather_user &&
         a.node_name == b.node_name && a.log == b.log && a.log_user == b.log_user && a.io_workers == b.io_workers &&
         a.arena_bytes == b.arena_bytes && a.transport == b.transport;
}

bool SameShard(const ckpt_tensor_shard& a, const ckpt_tensor_shard& b) {
  return a.struct_size == b.struct_size && a.key == b.key && a.dtype == b.dtype && a.ndim == b.ndim &&
         a.global_shape == b.global_shape && a.local_shape == b.local_shape && a.global_offset == b.global_offset &&
         a.replica_ndim == b.replica_ndim && a.replica_id == b.replica_id && a.flags == b.flags &&
         a.flat_start == b.flat_start && a.flat_end == b.flat_end && a.memory_kind == b.memory_kind &&
         a.device == b.device && a.data == b.data && a.data_size == b.data_size;
}

// Field by field: the struct has padding before its callback.
bool SameLoadOptions(const ckpt_load_options& a, const ckpt_load_options& b) {
  return a.struct_size == b.struct_size && a.missing_keys == b.missing_keys && a.unexpected_keys == b.unexpected_keys &&
         a.progress == b.progress && a.progress_user == b.progress_user && a.key_map == b.key_map &&
         a.key_map_count == b.key_map_count;
}

// Field by field: the struct has padding before storage_every, which neither side defines.
bool SameManagerOptions(const ckpt_manager_options& a, const ckpt_manager_options& b) {
  return a.struct_size == b.struct_size && a.keep_last == b.keep_last && a.keep_every == b.keep_every &&
         a.memory_tier == b.memory_tier && a.storage_every == b.storage_every;
}

TEST(CapiAbi, InitMacrosMatchInitFunctions) {
  ckpt_context_options from_macro = CKPT_CONTEXT_OPTIONS_INIT, from_function;
  std::memset(&from_function, 0xAB, sizeof from_function);
  EXPECT_EQ(ckpt_context_options_init(&from_function, sizeof from_function), CKPT_OK);
  EXPECT_TRUE(SameOptions(from_macro, from_function));

  ckpt_tensor_shard shard_macro = CKPT_TENSOR_SHARD_INIT, shard_function;
  std::memset(&shard_function, 0xAB, sizeof shard_function);
  EXPECT_EQ(ckpt_tensor_shard_init(&shard_function, sizeof shard_function), CKPT_OK);
  EXPECT_TRUE(SameShard(shard_macro, shard_function));

  ckpt_save_options save_macro = CKPT_SAVE_OPTIONS_INIT, save_function;
  std::memset(&save_function, 0xAB, sizeof save_function);
  EXPECT_EQ(ckpt_save_options_init(&save_function, sizeof save_function), CKPT_OK);
  EXPECT_TRUE(SameBytes(save_macro, save_function));

  ckpt_load_options load_macro = CKPT_LOAD_OPTIONS_INIT, load_function;
  std::memset(&load_function, 0xAB, sizeof load_function);
  EXPECT_EQ(ckpt_load_options_init(&load_function, sizeof load_function), CKPT_OK);
  EXPECT_TRUE(SameLoadOptions(load_macro, load_function));

  ckpt_manager_options manager_macro = CKPT_MANAGER_OPTIONS_INIT, manager_function;
  std::memset(&manager_function, 0xAB, sizeof manager_function);
  EXPECT_EQ(ckpt_manager_options_init(&manager_function, sizeof manager_function), CKPT_OK);
  EXPECT_TRUE(SameManagerOptions(manager_macro, manager_function));
}

// Room for an options struct followed by bytes the init function must leave alone.
struct GuardedLoadOptions {
  ckpt_load_options opts;
  unsigned char guard[32];
};

bool GuardIntact(const GuardedLoadOptions& g) {
  for (unsigned char byte : g.guard) {
    if (byte != 0xAB) return false;
  }
  return true;
}

TEST(CapiAbi, InitRefusesAStructLargerThanTheLibrarysAndWritesNothing) {
  GuardedLoadOptions g;
  std::memset(&g, 0xAB, sizeof g);
  EXPECT_EQ(ckpt_load_options_init(&g.opts, sizeof g.opts + 8), CKPT_E_UNSUPPORTED);
  EXPECT_EQ(g.opts.struct_size, 0xABABABABu);
  EXPECT_TRUE(GuardIntact(g));
}

TEST(CapiAbi, InitRefusesASizeSmallerThanAnyVersionOfTheStruct) {
  ckpt_context_options opts;
  std::memset(&opts, 0xAB, sizeof opts);
  EXPECT_EQ(ckpt_context_options_init(&opts, sizeof(uint32_t)), CKPT_E_INVALID_ARGUMENT);
  EXPECT_EQ(opts.struct_size, 0xABABABABu);
  EXPECT_EQ(ckpt_manager_options_init(nullptr, sizeof(ckpt_manager_options)), CKPT_E_INVALID_ARGUMENT);
}

TEST(CapiAbi, InitWritesExactlyTheCallersSize) {
  GuardedLoadOptions g;
  std::memset(&g, 0xAB, sizeof g);
  EXPECT_EQ(ckpt_load_options_init(&g.opts, sizeof g.opts), CKPT_OK);
  EXPECT_EQ(g.opts.struct_size, sizeof g.opts);
  EXPECT_EQ(g.opts.unexpected_keys, CKPT_STRICT_LOG);
  EXPECT_TRUE(GuardIntact(g));
}

TEST(CapiAbi, EveryStructStartsWithItsSize) {
  EXPECT_EQ(ckpt_context_options(CKPT_CONTEXT_OPTIONS_INIT).struct_size, sizeof(ckpt_context_options));
  EXPECT_EQ(ckpt_tensor_shard(CKPT_TENSOR_SHARD_INIT).struct_size, sizeof(ckpt_tensor_shard));
  EXPECT_EQ(ckpt_save_options(CKPT_SAVE_OPTIONS_INIT).struct_size, sizeof(ckpt_save_options));
  EXPECT_EQ(ckpt_load_options(CKPT_LOAD_OPTIONS_INIT).struct_size, sizeof(ckpt_load_options));
  EXPECT_EQ(ckpt_checkpoint_info(CKPT_CHECKPOINT_INFO_INIT).struct_size, sizeof(ckpt_checkpoint_info));
  EXPECT_EQ(ckpt_tensor_info(CKPT_TENSOR_INFO_INIT).struct_size, sizeof(ckpt_tensor_info));
  EXPECT_EQ(ckpt_chunk_info(CKPT_CHUNK_INFO_INIT).struct_size, sizeof(ckpt_chunk_info));
  EXPECT_EQ(ckpt_context_stats(CKPT_CONTEXT_STATS_INIT).struct_size, sizeof(ckpt_context_stats));
  EXPECT_EQ(ckpt_manager_options(CKPT_MANAGER_OPTIONS_INIT).struct_size, sizeof(ckpt_manager_options));
  EXPECT_EQ(ckpt_request_stats(CKPT_REQUEST_STATS_INIT).struct_size, sizeof(ckpt_request_stats));
}

TEST(CapiAbi, VersionMatchesTheHeader) {
  EXPECT_EQ(ckpt_version_number(), static_cast<uint32_t>(CKPT_VERSION_NUMBER));
  const std::string expected = std::to_string(CKPT_VERSION_MAJOR) + "." + std::to_string(CKPT_VERSION_MINOR) + "." +
                               std::to_string(CKPT_VERSION_PATCH);
  EXPECT_EQ(ckpt_version_string(), expected);
}

TEST(CapiAbi, StatusStringsNameTheirCode) {
  EXPECT_NE(std::string(ckpt_status_string(CKPT_E_CORRUPT)).find("CKPT_E_CORRUPT"), std::string::npos);
  EXPECT_NE(std::string(ckpt_status_string(CKPT_E_PEER_FAILED)).find("CKPT_E_PEER_FAILED"), std::string::npos);
  for (int32_t code = CKPT_OK; code <= CKPT_E_INTERNAL; ++code) {
    EXPECT_STRNE(ckpt_status_string(code), "unknown ckpt status") << code;
  }
  EXPECT_STREQ(ckpt_status_string(999), "unknown ckpt status");
}

TEST(CapiAbi, DtypeSizesAndNames) {
  EXPECT_EQ(ckpt_dtype_size(CKPT_DTYPE_BF16), 2u);
  EXPECT_EQ(ckpt_dtype_size(CKPT_DTYPE_C64), 8u);
  EXPECT_EQ(ckpt_dtype_size(CKPT_DTYPE_F8_E5M2), 1u);
  EXPECT_EQ(ckpt_dtype_size(0), 0u);
  EXPECT_EQ(ckpt_dtype_size(CKPT_DTYPE_U2 + 1), 0u);
  EXPECT_STREQ(ckpt_dtype_name(CKPT_DTYPE_F8_E4M3), "F8_E4M3");
  EXPECT_STREQ(ckpt_dtype_name(-3), "?");
}

TEST(CapiAbi, MlDtypesElementTypesHaveTheirNumpySizes) {
  EXPECT_EQ(ckpt_dtype_size(CKPT_DTYPE_C128), 16u);
  EXPECT_STREQ(ckpt_dtype_name(CKPT_DTYPE_C128), "C128");
  EXPECT_STREQ(ckpt_dtype_name(CKPT_DTYPE_F8_E4M3_IEEE), "F8_E4M3_IEEE");
  EXPECT_STREQ(ckpt_dtype_name(CKPT_DTYPE_F8_E8M0), "F8_E8M0");
  // Sub-byte and 8-bit types are held one element per byte, as numpy and ml_dtypes hold them.
  for (int32_t dtype = CKPT_DTYPE_F8_E4M3FNUZ; dtype <= CKPT_DTYPE_U2; ++dtype) {
    EXPECT_EQ(ckpt_dtype_size(dtype), 1u) << ckpt_dtype_name(dtype);
    EXPECT_STRNE(ckpt_dtype_name(dtype), "?") << dtype;
  }
}

TEST(CapiAbi, FreeFunctionsAcceptNull) {
  ckpt_error_free(nullptr);
  ckpt_context_free(nullptr);
  ckpt_state_free(nullptr);
  ckpt_request_free(nullptr);
  ckpt_reader_free(nullptr);
}

class CapiShardTest : public CapiTest {
 protected:
  void SetUp() override {
    CapiTest::SetUp();
    ASSERT_EQ(ckpt_state_create(&state_, err_), CKPT_OK);
    shard_.key = "layer.w";
    shard_.dtype = CKPT_DTYPE_F32;
    shard_.ndim = 2;
    shard_.global_shape = global_;
    shard_.local_shape = local_;
    shard_.global_offset = offset_;
    shard_.data = data_.data();
    shard_.data_size = data_.size() * sizeof(float);
  }
  void TearDown() override {
    ckpt_state_free(state_);
    CapiTest::TearDown();
  }
  int32_t Add() { return ckpt_state_add_tensor(state_, &shard_, err_); }

  ckpt_state_t* state_ = nullptr;
  uint64_t global_[2] = {8, 4}, local_[2] = {4, 4}, offset_[2] = {4, 0};
  std::vector<float> data_ = std::vector<float>(16);
  ckpt_tensor_shard shard_ = CKPT_TENSOR_SHARD_INIT;
};

TEST_F(CapiShardTest, AcceptsAValidShardAndClearsTheError) {
  EXPECT_EQ(Add(), CKPT_OK);
  EXPECT_EQ(ckpt_error_status(err_), CKPT_OK);
  EXPECT_EQ(message(), "");
}

TEST_F(CapiShardTest, AcceptsAShardStructFromAnOlderCaller) {
  // A caller built against a header whose struct ended before data_size cannot pass its data; one that ended
  // after it can, and the fields it lacks keep their defaults.
  shard_.struct_size = offsetof(ckpt_tensor_shard, data_size) + sizeof(uint64_t);
  EXPECT_EQ(Add(), CKPT_OK) << message();
}

TEST_F(CapiShardTest, RefusesAStructWithoutASize) {
  shard_.struct_size = 0;
  EXPECT_EQ(Add(), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("struct_size"), std::string::npos) << message();
}

TEST_F(CapiShardTest, RefusesABoxOutsideTheGlobalShape) {
  offset_[0] = 5;
  EXPECT_EQ(Add(), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("layer.w"), std::string::npos) << message();
  EXPECT_NE(message().find("outside"), std::string::npos) << message();
}

TEST_F(CapiShardTest, RefusesAWrongDataSize) {
  shard_.data_size -= 4;
  EXPECT_EQ(Add(), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("data_size"), std::string::npos) << message();
}

TEST_F(CapiShardTest, RefusesAnUnknownDtypeAndTooManyDimensions) {
  shard_.dtype = 42;
  EXPECT_EQ(Add(), CKPT_E_INVALID_ARGUMENT);
  shard_.dtype = CKPT_DTYPE_F32;
  shard_.ndim = 9;
  EXPECT_EQ(Add(), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("exceeds 8"), std::string::npos) << message();
}

TEST_F(CapiShardTest, RefusesTheSameElementsTwiceOnOneRank) {
  ASSERT_EQ(Add(), CKPT_OK);
  EXPECT_EQ(Add(), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("twice"), std::string::npos) << message();
}

TEST_F(CapiShardTest, RefusesAFlattenedRangeOutsideItsBox) {
  shard_.flags = CKPT_SHARD_FLATTENED;
  shard_.flat_start = 10;
  shard_.flat_end = 17;
  shard_.data_size = 7 * sizeof(float);
  EXPECT_EQ(Add(), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("flattened range"), std::string::npos) << message();
}

TEST_F(CapiShardTest, RefusesCudaMemoryAsUnsupported) {
  shard_.memory_kind = CKPT_MEMORY_CUDA;
  EXPECT_EQ(Add(), CKPT_E_UNSUPPORTED);
}

TEST_F(CapiTest, ReaderOnAMissingDirectoryIsNotFound) {
  ckpt_reader_t* reader = nullptr;
  EXPECT_EQ(ckpt_reader_open("/nonexistent/ckpt-dir", &reader, err_), CKPT_E_NOT_FOUND);
  EXPECT_EQ(reader, nullptr);
  EXPECT_NE(message().find("/nonexistent/ckpt-dir"), std::string::npos) << message();
}

TEST_F(CapiTest, SingleRankSaveAndReadBack) {
  const ckpt::testing::TempDir dir("capi");
  const std::string path = dir.Path("step-1");

  ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
  opts.rank = 0;
  opts.world_size = 1;
  opts.io_workers = 0;  // unit tests link libckpt statically: no worker executable beside them
  ckpt_context_t* ctx = nullptr;
  ASSERT_EQ(ckpt_context_create(&opts, &ctx, err_), CKPT_OK) << message();
  ckpt_state_t* state = nullptr;
  ASSERT_EQ(ckpt_state_create(&state, err_), CKPT_OK);
  std::vector<double> values(6);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5 * static_cast<double>(i);
  const uint64_t shape[2] = {2, 3}, zero[2] = {0, 0};
  ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
  shard.key = "x";
  shard.dtype = CKPT_DTYPE_F64;
  shard.ndim = 2;
  shard.global_shape = shape;
  shard.local_shape = shape;
  shard.global_offset = zero;
  shard.data = values.data();
  shard.data_size = sizeof(double) * values.size();
  ASSERT_EQ(ckpt_state_add_tensor(state, &shard, err_), CKPT_OK) << message();
  const char* keys[] = {"run"};
  const char* vals[] = {"unit-test"};
  ckpt_save_options save_opts = CKPT_SAVE_OPTIONS_INIT;
  save_opts.metadata_count = 1;
  save_opts.metadata_keys = keys;
  save_opts.metadata_values = vals;
  ckpt_request_t* request = nullptr;
  ASSERT_EQ(ckpt_save(ctx, state, path.c_str(), &save_opts, &request, err_), CKPT_OK) << message();
  EXPECT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK);
  ckpt_request_free(request);

  ckpt_reader_t* reader = nullptr;
  ASSERT_EQ(ckpt_reader_open(path.c_str(), &reader, err_), CKPT_OK) << message();
  const char* run = nullptr;
  ASSERT_EQ(ckpt_reader_metadata(reader, "run", &run, err_), CKPT_OK);
  EXPECT_STREQ(run, "unit-test");
  const char* metadata_key = nullptr;
  const char* metadata_value = nullptr;
  ASSERT_EQ(ckpt_reader_metadata_at(reader, 0, &metadata_key, &metadata_value, err_), CKPT_OK) << message();
  EXPECT_STREQ(metadata_key, "run");
  EXPECT_STREQ(metadata_value, "unit-test");
  EXPECT_EQ(ckpt_reader_metadata_at(reader, 1, &metadata_key, &metadata_value, err_), CKPT_E_NOT_FOUND);
  const uint64_t offset[2] = {1, 1}, box[2] = {1, 2};
  double got[2] = {0, 0};
  ASSERT_EQ(ckpt_reader_read(reader, "x", 2, offset, box, got, sizeof got, err_), CKPT_OK) << message();
  EXPECT_EQ(got[0], values[4]);
  EXPECT_EQ(got[1], values[5]);
  EXPECT_EQ(ckpt_reader_read(reader, "x", 2, offset, box, got, sizeof got - 1, err_), CKPT_E_INVALID_ARGUMENT);
  EXPECT_EQ(ckpt_reader_read(reader, "y", 2, offset, box, got, sizeof got, err_), CKPT_E_NOT_FOUND);
  EXPECT_EQ(ckpt_reader_verify(reader, err_), CKPT_OK) << message();
  ckpt_reader_free(reader);
  ckpt_state_free(state);
  ckpt_context_free(ctx);
}

TEST_F(CapiTest, ReaderListsObjectsWithTheirGridAndBytes) {
  const ckpt::testing::TempDir dir("capi");
  const std::string path = dir.Path("objects");
  ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
  opts.rank = 0;
  opts.world_size = 1;
  opts.io_workers = 0;
  ckpt_context_t* ctx = nullptr;
  ASSERT_EQ(ckpt_context_create(&opts, &ctx, err_), CKPT_OK) << message();
  ckpt_state_t* state = nullptr;
  ASSERT_EQ(ckpt_state_create(&state, err_), CKPT_OK);
  // "rng" has two pieces of different sizes on a grid of 2; "config" one piece on a grid of no dimension.
  char first[5] = "abcd", second[3] = "xy", config[7] = "config";
  const uint64_t grid[1] = {2}, cell0[1] = {0}, cell1[1] = {1};
  ASSERT_EQ(ckpt_state_add_object(state, "rng", 1, grid, cell0, first, 4, err_), CKPT_OK) << message();
  ASSERT_EQ(ckpt_state_add_object(state, "rng", 1, grid, cell1, second, 2, err_), CKPT_OK) << message();
  ASSERT_EQ(ckpt_state_add_object(state, "config", 0, nullptr, nullptr, config, 6, err_), CKPT_OK) << message();
  ckpt_request_t* request = nullptr;
  ASSERT_EQ(ckpt_save(ctx, state, path.c_str(), nullptr, &request, err_), CKPT_OK) << message();
  ASSERT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
  ckpt_request_free(request);

  ckpt_reader_t* reader = nullptr;
  ASSERT_EQ(ckpt_reader_open(path.c_str(), &reader, err_), CKPT_OK) << message();
  const char* key = nullptr;
  uint32_t grid_ndim = 99;
  const uint64_t* grid_shape = grid;
  uint64_t bytes = 0;
  ASSERT_EQ(ckpt_reader_object_at(reader, 0, &key, &grid_ndim, &grid_shape, &bytes, err_), CKPT_OK) << message();
  EXPECT_STREQ(key, "config");
  EXPECT_EQ(grid_ndim, 0u);
  EXPECT_EQ(grid_shape, nullptr);
  EXPECT_EQ(bytes, 6u);
  ASSERT_EQ(ckpt_reader_object_at(reader, 1, &key, &grid_ndim, &grid_shape, &bytes, err_), CKPT_OK) << message();
  EXPECT_STREQ(key, "rng");
  ASSERT_EQ(grid_ndim, 1u);
  EXPECT_EQ(grid_shape[0], 2u);
  EXPECT_EQ(bytes, 6u);
  EXPECT_EQ(ckpt_reader_object_at(reader, 2, &key, &grid_ndim, &grid_shape, &bytes, err_), CKPT_E_NOT_FOUND);
  EXPECT_NE(message().find("object index 2"), std::string::npos) << message();
  EXPECT_EQ(ckpt_reader_object_at(reader, 0, nullptr, &grid_ndim, &grid_shape, &bytes, err_), CKPT_E_INVALID_ARGUMENT);
  ckpt_reader_free(reader);
  ckpt_state_free(state);
  ckpt_context_free(ctx);
}

TEST_F(CapiTest, ManagerListsItsCommittedStepsInOrder) {
  const ckpt::testing::TempDir dir("capi");
  ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
  opts.rank = 0;
  opts.world_size = 1;
  opts.io_workers = 0;
  ckpt_context_t* ctx = nullptr;
  ASSERT_EQ(ckpt_context_create(&opts, &ctx, err_), CKPT_OK) << message();
  ckpt_manager_t* manager = nullptr;
  ASSERT_EQ(ckpt_manager_open(ctx, dir.path().c_str(), nullptr, &manager, err_), CKPT_OK) << message();
  ckpt_state_t* state = nullptr;
  ASSERT_EQ(ckpt_state_create(&state, err_), CKPT_OK);
  const char step_text[] = "step";
  ASSERT_EQ(ckpt_state_add_common(state, "step", step_text, sizeof step_text, err_), CKPT_OK);
  uint64_t count = 99;
  ASSERT_EQ(ckpt_manager_steps(manager, nullptr, 0, &count, err_), CKPT_OK) << message();
  EXPECT_EQ(count, 0u);
  for (uint64_t step : {30u, 4u, 200u}) {
    ckpt_request_t* request = nullptr;
    ASSERT_EQ(ckpt_manager_save(manager, state, step, nullptr, &request, err_), CKPT_OK) << message();
    ASSERT_EQ(ckpt_request_wait(request, 0, err_), CKPT_OK) << message();
    ckpt_request_free(request);
  }
  std::vector<uint64_t> steps(2, 0);
  ASSERT_EQ(ckpt_manager_steps(manager, steps.data(), steps.size(), &count, err_), CKPT_OK) << message();
  EXPECT_EQ(count, 3u);  // the full count, though only two fit
  EXPECT_EQ(steps, (std::vector<uint64_t>{4, 30}));
  steps.resize(count);
  ASSERT_EQ(ckpt_manager_steps(manager, steps.data(), steps.size(), &count, err_), CKPT_OK) << message();
  EXPECT_EQ(steps, (std::vector<uint64_t>{4, 30, 200}));
  EXPECT_EQ(ckpt_manager_steps(manager, nullptr, 1, &count, err_), CKPT_E_INVALID_ARGUMENT);
  ckpt_state_free(state);
  ckpt_manager_free(manager);
  ckpt_context_free(ctx);
}

// ---- Keys are valid UTF-8 without NUL (common/key_text.h) ------------------------------------------------------

// Whether `text` holds a byte of 0x80 or above: the messages below are ASCII when the keys in them are escaped.
bool HoldsNonAscii(const std::string& text) {
  for (unsigned char c : text) {
    if (c >= 0x80) return true;
  }
  return false;
}

TEST_F(CapiShardTest, RefusesATensorKeyThatIsNotUtf8NamingItEscaped) {
  shard_.key = "w\xff\xfe";
  EXPECT_EQ(Add(), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("tensor key 'w\\xff\\xfe' is not valid UTF-8 (byte 0xff at offset 1)"), std::string::npos)
      << message();
  EXPECT_FALSE(HoldsNonAscii(message())) << message();
}

TEST_F(CapiShardTest, RefusesOverlongFormsSurrogatesAndCodePointsAboveTheLastInATensorKey) {
  for (const char* key : {"\xc0\xaf", "a\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"}) {
    shard_.key = key;
    EXPECT_EQ(Add(), CKPT_E_INVALID_ARGUMENT) << message();
    EXPECT_NE(message().find("not valid UTF-8"), std::string::npos) << message();
  }
}

TEST_F(CapiShardTest, AcceptsKeysOfAnyValidUtf8AndControlCharacters) {
  for (const char* key : {"caf\xc3\xa9.w", "\xe6\x97\xa5\xf0\x9f\x98\x80", "tab\tand\nnewline", "q\"uote\\"}) {
    shard_.key = key;
    EXPECT_EQ(Add(), CKPT_OK) << message();
  }
}

TEST_F(CapiShardTest, AnotherMistakeInAShardWithABadKeyShowsTheKeyEscaped) {
  shard_.key = "w\xff";
  shard_.ndim = 9;
  EXPECT_EQ(Add(), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("tensor 'w\\xff': ndim 9 exceeds 8"), std::string::npos) << message();
  EXPECT_FALSE(HoldsNonAscii(message())) << message();
}

TEST_F(CapiShardTest, RefusesObjectAndCommonKeysThatAreNotUtf8) {
  char bytes[] = "abc";
  EXPECT_EQ(ckpt_state_add_object(state_, "rng\xc3", 0, nullptr, nullptr, bytes, 3, err_), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("object key 'rng\\xc3' is not valid UTF-8"), std::string::npos) << message();
  EXPECT_EQ(ckpt_state_add_common(state_, "\xed\xb0\x80step", bytes, 3, err_), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("common key '\\xed\\xb0\\x80step' is not valid UTF-8"), std::string::npos) << message();
}

TEST_F(CapiTest, SaveRefusesMetadataKeysAndValuesThatAreNotUtf8AndWritesNothing) {
  const ckpt::testing::TempDir dir("capi");
  const std::string path = dir.Path("step-1");
  ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
  opts.rank = 0;
  opts.world_size = 1;
  opts.io_workers = 0;
  ckpt_context_t* ctx = nullptr;
  ASSERT_EQ(ckpt_context_create(&opts, &ctx, err_), CKPT_OK) << message();
  ckpt_state_t* state = nullptr;
  ASSERT_EQ(ckpt_state_create(&state, err_), CKPT_OK);
  ASSERT_EQ(ckpt_state_add_common(state, "step", "7", 1, err_), CKPT_OK) << message();
  const char* keys[] = {"run", "bad\xff"};
  const char* values[] = {"latin-1 caf\xe9", "x"};
  ckpt_save_options save = CKPT_SAVE_OPTIONS_INIT;
  save.metadata_count = 2;
  save.metadata_keys = keys;
  save.metadata_values = values;
  ckpt_request_t* request = nullptr;
  EXPECT_EQ(ckpt_save(ctx, state, path.c_str(), &save, &request, err_), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("metadata 'run': value 'latin-1 caf\\xe9' is not valid UTF-8"), std::string::npos)
      << message();
  values[0] = "ok";
  EXPECT_EQ(ckpt_save(ctx, state, path.c_str(), &save, &request, err_), CKPT_E_INVALID_ARGUMENT);
  EXPECT_NE(message().find("metadata key 'bad\\xff' is not valid UTF-8"), std::string::npos) << message();
  EXPECT_EQ(request, nullptr);
  EXPECT_EQ(access(path.c_str(), F_OK), -1) << "nothing is written";
  ckpt_state_free(state);
  ckpt_context_free(ctx);
}

}  // namespace

/*
 * reshard: save a tensor-parallel x data-parallel layout, then load it on any number of ranks with a different
 * split of every tensor. Each loading rank asks for the boxes it wants; ckpt finds them in the stored chunks.
 *
 *   ckpt-launch -n 4 -- ./reshard save DIR    TP = 2, DP = ranks / 2: any even number of ranks
 *   ckpt-launch -n 3 -- ./reshard load DIR    any number of ranks
 *
 * Saved layout, rank = dp * 2 + tp, every box replicated over DP (replica id = dp):
 *   attn.qkv  F32 [8, 6]   rows split over TP (4 + 4)
 *   mlp.out   F64 [6, 10]  columns split over TP (5 + 5)
 *   embed     I32 [8, 4]   rows split unevenly over TP (5 + 3)
 * Loaded layout on M ranks: attn.qkv split by columns and mlp.out by rows, both as evenly as possible, and embed
 * by rows in proportions 1 : 2 : ... : M. A rank whose share of a tensor is empty does not ask for it.
 */
#include "common.h"

#define TP 2
#define TENSOR_COUNT 3
#define STEP 300

enum { QKV, MLP_OUT, EMBED };

static const char* const keys[TENSOR_COUNT] = {"attn.qkv", "mlp.out", "embed"};
static const int32_t dtypes[TENSOR_COUNT] = {CKPT_DTYPE_F32, CKPT_DTYPE_F64, CKPT_DTYPE_I32};
static const uint64_t shapes[TENSOR_COUNT][2] = {{8, 6}, {6, 10}, {8, 4}};
static const uint64_t embed_rows_per_tp[TP] = {5, 3};

/* Describes rows [row_begin, row_end) x columns [col_begin, col_end) of tensor t over a zeroed buffer. */
static void describe_box(example_shard* s, int t, uint64_t row_begin, uint64_t row_end, uint64_t col_begin,
                         uint64_t col_end) {
  const uint64_t offset[2] = {row_begin, col_begin};
  const uint64_t shape[2] = {row_end - row_begin, col_end - col_begin};
  example_shard_box(s, keys[t], dtypes[t], 2, shapes[t], offset, shape);
}

/* The boxes that rank (tp, dp) holds in the training layout. */
static void describe_saved(example_shard shards[TENSOR_COUNT], int rank) {
  const uint32_t tp = (uint32_t)rank % TP;
  const uint32_t dp = (uint32_t)rank / TP;
  const uint64_t embed_begin = tp == 0 ? 0 : embed_rows_per_tp[0];
  uint64_t begin, end;
  int t;

  example_even_split(shapes[QKV][0], TP, tp, &begin, &end);
  describe_box(&shards[QKV], QKV, begin, end, 0, shapes[QKV][1]);
  example_even_split(shapes[MLP_OUT][1], TP, tp, &begin, &end);
  describe_box(&shards[MLP_OUT], MLP_OUT, 0, shapes[MLP_OUT][0], begin, end);
  describe_box(&shards[EMBED], EMBED, embed_begin, embed_begin + embed_rows_per_tp[tp], 0, shapes[EMBED][1]);
  for (t = 0; t < TENSOR_COUNT; ++t) example_shard_set_replica(&shards[t], dp);
}

/* The boxes that rank `rank` of `world_size` asks for when loading. */
static void describe_loaded(example_shard shards[TENSOR_COUNT], int rank, int world_size) {
  uint64_t begin, end;

  example_even_split(shapes[QKV][1], (uint32_t)world_size, (uint32_t)rank, &begin, &end);
  describe_box(&shards[QKV], QKV, 0, shapes[QKV][0], begin, end);
  example_even_split(shapes[MLP_OUT][0], (uint32_t)world_size, (uint32_t)rank, &begin, &end);
  describe_box(&shards[MLP_OUT], MLP_OUT, begin, end, 0, shapes[MLP_OUT][1]);
  example_ramp_split(shapes[EMBED][0], (uint32_t)world_size, (uint32_t)rank, &begin, &end);
  describe_box(&shards[EMBED], EMBED, begin, end, 0, shapes[EMBED][1]);
}

static void save(ckpt_context_t* ctx, example_shard shards[TENSOR_COUNT], const char* dir, ckpt_error_t* err) {
  const uint64_t step = STEP;
  const char* metadata_keys[1] = {"layout"};
  const char* metadata_values[1] = {"tp2-dp"};
  ckpt_save_options options = CKPT_SAVE_OPTIONS_INIT;
  ckpt_state_t* state = NULL;
  ckpt_request_t* request = NULL;
  int t;

  options.metadata_count = 1;
  options.metadata_keys = metadata_keys;
  options.metadata_values = metadata_values;
  CHECK(ckpt_state_create(&state, err));
  for (t = 0; t < TENSOR_COUNT; ++t) {
    example_fill(&shards[t].shard);
    CHECK(ckpt_state_add_tensor(state, &shards[t].shard, err));
  }
  CHECK(ckpt_state_add_common(state, "step", &step, sizeof(step), err));
  CHECK(ckpt_save(ctx, state, dir, &options, &request, err));
  CHECK(ckpt_request_wait(request, 0, err));
  ckpt_request_free(request);
  ckpt_state_free(state);
}

/* Loads the non-empty boxes of `shards`, checks every element, and returns how many elements are wrong. */
static uint64_t load_and_check(ckpt_context_t* ctx, example_shard shards[TENSOR_COUNT], const char* dir,
                               uint64_t* checked, ckpt_error_t* err) {
  ckpt_state_t* state = NULL;
  const void* step_bytes = NULL;
  uint64_t step_size = 0;
  uint64_t step = 0;
  uint64_t wrong = 0;
  int t;

  CHECK(ckpt_state_create(&state, err));
  for (t = 0; t < TENSOR_COUNT; ++t) {
    if (example_shard_elements(&shards[t].shard) > 0) CHECK(ckpt_state_add_tensor(state, &shards[t].shard, err));
  }
  CHECK(ckpt_load(ctx, state, dir, NULL, err));
  for (t = 0; t < TENSOR_COUNT; ++t) {
    wrong += example_count_mismatches(&shards[t].shard);
    *checked += example_shard_elements(&shards[t].shard);
  }
  CHECK(ckpt_state_common(state, "step", &step_bytes, &step_size, err));
  if (step_size == sizeof(step)) memcpy(&step, step_bytes, sizeof(step));
  if (step != STEP) {
    fprintf(stderr, "rank %d: common 'step' reads %" PRIu64 ", expected %d\n", example_rank, step, STEP);
    ++wrong;
  }
  ckpt_state_free(state);
  return wrong;
}

int main(int argc, char** argv) {
  ckpt_error_t* err = NULL;
  ckpt_context_t* ctx = NULL;
  example_shard shards[TENSOR_COUNT];
  uint64_t wrong = 0;
  uint64_t checked = 0;
  int rank, world_size, t;
  int saving;

  if (argc != 3 || (strcmp(argv[1], "save") != 0 && strcmp(argv[1], "load") != 0)) {
    fprintf(stderr, "usage: %s save DIR   (on an even number of ranks)\n       %s load DIR   (on any number)\n",
            argv[0], argv[0]);
    return 2;
  }
  saving = strcmp(argv[1], "save") == 0;
  if (ckpt_error_create(&err) != CKPT_OK) return 1;
  ctx = example_context_create(err);
  rank = ckpt_context_rank(ctx);
  world_size = ckpt_context_world_size(ctx);

  if (saving) {
    if (world_size % TP != 0) {
      fprintf(stderr, "rank %d: reshard save needs an even number of ranks (TP = 2), not %d\n", rank, world_size);
      return 2;
    }
    describe_saved(shards, rank);
    save(ctx, shards, argv[2], err);
    if (rank == 0) {
      printf(
          "reshard save: %d ranks (TP=2 x DP=%d) saved attn.qkv F32[8,6] by rows, mlp.out F64[6,10] by columns "
          "and embed I32[8,4] as rows 5+3 in %s\n",
          world_size, world_size / TP, argv[2]);
    }
  } else {
    describe_loaded(shards, rank, world_size);
    wrong = load_and_check(ctx, shards, argv[2], &checked, err);
    if (rank == 0 && wrong == 0) {
      printf(
          "reshard load: %d rank(s) loaded attn.qkv by columns, mlp.out by rows and embed by rows 1:..:%d "
          "from %s; rank 0 checked %" PRIu64 " elements: all match\n",
          world_size, world_size, argv[2], checked);
    }
  }
  for (t = 0; t < TENSOR_COUNT; ++t) example_shard_free(&shards[t]);
  ckpt_context_free(ctx);
  ckpt_error_free(err);
  return wrong == 0 ? 0 : 1;
}

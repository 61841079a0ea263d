/*
 * basic: the smallest complete use of ckpt. Every rank holds a slab of rows of a 2-D F32 tensor, a full copy of a
 * 1-D I64 tensor, and the training step as common bytes. The ranks save them, then load them back into fresh,
 * zeroed buffers of the same layout and check every element.
 *
 *   ckpt-launch -n 4 -- ./basic [DIR]
 *
 * DIR must not exist yet; without it, the checkpoint goes to a new directory under /tmp.
 */
#include "common.h"

#define WEIGHT_ROWS 10
#define WEIGHT_COLS 6
#define BIAS_LENGTH 7
#define STEP 1200

static const uint64_t weight_shape[2] = {WEIGHT_ROWS, WEIGHT_COLS};
static const uint64_t bias_shape[1] = {BIAS_LENGTH};
static const uint64_t bias_offset[1] = {0};

/* What one rank holds: its rows of "weight" and its replica of "bias". */
typedef struct rank_tensors {
  uint64_t weight_offset[2];
  uint64_t weight_local_shape[2];
  uint32_t bias_replica[1];
  float weight[WEIGHT_ROWS * WEIGHT_COLS];
  int64_t bias[BIAS_LENGTH];
  ckpt_tensor_shard weight_shard;
  ckpt_tensor_shard bias_shard;
} rank_tensors;

/* Describes this rank's shards over zeroed buffers. Rows are split as evenly as possible; every rank holds all of
 * "bias", and its rank number tells the replicas apart, so "bias" is written once (by the replica 0 rank). */
static void describe(rank_tensors* t, int rank, int world_size) {
  uint64_t first_row, end_row;
  example_even_split(WEIGHT_ROWS, (uint32_t)world_size, (uint32_t)rank, &first_row, &end_row);
  memset(t, 0, sizeof(*t));
  t->weight_offset[0] = first_row;
  t->weight_local_shape[0] = end_row - first_row;
  t->weight_local_shape[1] = WEIGHT_COLS;

  ckpt_tensor_shard_init(&t->weight_shard, sizeof t->weight_shard);
  t->weight_shard.key = "weight";
  t->weight_shard.dtype = CKPT_DTYPE_F32;
  t->weight_shard.ndim = 2;
  t->weight_shard.global_shape = weight_shape;
  t->weight_shard.local_shape = t->weight_local_shape;
  t->weight_shard.global_offset = t->weight_offset;
  t->weight_shard.data = t->weight;
  t->weight_shard.data_size = (end_row - first_row) * WEIGHT_COLS * sizeof(float);

  t->bias_replica[0] = (uint32_t)rank;
  ckpt_tensor_shard_init(&t->bias_shard, sizeof t->bias_shard);
  t->bias_shard.key = "bias";
  t->bias_shard.dtype = CKPT_DTYPE_I64;
  t->bias_shard.ndim = 1;
  t->bias_shard.global_shape = bias_shape;
  t->bias_shard.local_shape = bias_shape;
  t->bias_shard.global_offset = bias_offset;
  t->bias_shard.replica_ndim = 1;
  t->bias_shard.replica_id = t->bias_replica;
  t->bias_shard.data = t->bias;
  t->bias_shard.data_size = sizeof(t->bias);
}

static void save(ckpt_context_t* ctx, rank_tensors* t, const char* dir, ckpt_error_t* err) {
  const uint64_t step = STEP;
  const char* metadata_keys[1] = {"example"};
  const char* metadata_values[1] = {"basic"};
  ckpt_save_options options = CKPT_SAVE_OPTIONS_INIT;
  ckpt_request_stats stats = CKPT_REQUEST_STATS_INIT;
  ckpt_state_t* state = NULL;
  ckpt_request_t* request = NULL;

  options.metadata_count = 1;
  options.metadata_keys = metadata_keys;
  options.metadata_values = metadata_values;
  CHECK(ckpt_state_create(&state, err));
  CHECK(ckpt_state_add_tensor(state, &t->weight_shard, err));
  CHECK(ckpt_state_add_tensor(state, &t->bias_shard, err));
  CHECK(ckpt_state_add_common(state, "step", &step, sizeof(step), err));
  CHECK(ckpt_save(ctx, state, dir, &options, &request, err));
  /* The buffers could be modified again from here on; the wait makes the checkpoint durable. */
  CHECK(ckpt_request_wait(request, 0, err));
  CHECK(ckpt_request_stats_get(request, &stats, err));
  printf("rank %d: wrote %" PRIu64 " of its %" PRIu64 " bytes; ckpt_save blocked %.3f ms, committed after %.3f ms\n",
         ckpt_context_rank(ctx), stats.bytes_written, stats.state_bytes, stats.blocking_ns / 1e6,
         stats.total_ns / 1e6);
  ckpt_request_free(request);
  ckpt_state_free(state);
}

/* Loads into `t` (zeroed) and returns the step read back from the common bytes. */
static uint64_t load(ckpt_context_t* ctx, rank_tensors* t, const char* dir, ckpt_error_t* err) {
  ckpt_state_t* state = NULL;
  const void* step_bytes = NULL;
  uint64_t step_size = 0;
  uint64_t step = 0;

  CHECK(ckpt_state_create(&state, err));
  CHECK(ckpt_state_add_tensor(state, &t->weight_shard, err));
  CHECK(ckpt_state_add_tensor(state, &t->bias_shard, err));
  CHECK(ckpt_load(ctx, state, dir, NULL, err));
  CHECK(ckpt_state_common(state, "step", &step_bytes, &step_size, err));
  if (step_size == sizeof(step)) memcpy(&step, step_bytes, sizeof(step));
  ckpt_state_free(state);
  return step;
}

int main(int argc, char** argv) {
  ckpt_error_t* err = NULL;
  ckpt_context_t* ctx = NULL;
  rank_tensors* saved = example_calloc(1, sizeof(rank_tensors));
  rank_tensors* loaded = example_calloc(1, sizeof(rank_tensors));
  char dir[512];
  uint64_t wrong = 0;
  uint64_t step;
  int rank, world_size;

  if (argc > 2) {
    fprintf(stderr, "usage: %s [DIR]\n", argv[0]);
    return 2;
  }
  if (ckpt_error_create(&err) != CKPT_OK) return 1;
  ctx = example_context_create(err);
  rank = ckpt_context_rank(ctx);
  world_size = ckpt_context_world_size(ctx);
  if (argc == 2) {
    snprintf(dir, sizeof(dir), "%s", argv[1]);
  } else {
    example_default_dir("basic", world_size, dir, sizeof(dir));
  }

  describe(saved, rank, world_size);
  example_fill(&saved->weight_shard);
  example_fill(&saved->bias_shard);
  save(ctx, saved, dir, err);

  describe(loaded, rank, world_size);
  step = load(ctx, loaded, dir, err);
  wrong += example_count_mismatches(&loaded->weight_shard);
  wrong += example_count_mismatches(&loaded->bias_shard);
  if (step != STEP) {
    fprintf(stderr, "rank %d: common 'step' reads %" PRIu64 ", expected %d\n", rank, step, STEP);
    ++wrong;
  }

  if (rank == 0 && wrong == 0) {
    printf(
        "basic: %d rank(s) saved and loaded weight F32[%d,%d], bias I64[%d], step %d in %s; "
        "rank 0 checked %" PRIu64 " elements: all match\n",
        world_size, WEIGHT_ROWS, WEIGHT_COLS, BIAS_LENGTH, STEP, dir,
        example_shard_elements(&loaded->weight_shard) + example_shard_elements(&loaded->bias_shard));
  }
  ckpt_context_free(ctx);
  ckpt_error_free(err);
  free(saved);
  free(loaded);
  return wrong == 0 ? 0 : 1;
}

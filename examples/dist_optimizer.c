/*
 * dist_optimizer: the state of a distributed optimizer (ZeRO-1 style), where each data-parallel rank holds a
 * contiguous range of every parameter's flattened optimizer state rather than a box of it.
 *
 *   ckpt-launch -n 3 -- ./dist_optimizer save DIR       each rank holds an uneven flattened range (1 : 2 : 3)
 *   ckpt-launch -n 2 -- ./dist_optimizer load-dp DIR    flattened ranges split evenly over the new ranks
 *   ckpt-launch -n 1 -- ./dist_optimizer load-full DIR  the whole, unflattened tensors (on every rank)
 *
 * Any number of ranks works for each mode. A flattened shard describes the whole tensor as its box (offset 0,
 * local shape = global shape) plus the range [flat_start, flat_end) of its row-major elements that `data` holds.
 */
#include "common.h"

#define TENSOR_COUNT 2
#define STEP 77

static const char* const keys[TENSOR_COUNT] = {"exp_avg.weight", "exp_avg.bias"};
static const int32_t dtypes[TENSOR_COUNT] = {CKPT_DTYPE_F32, CKPT_DTYPE_F64};
static const uint32_t ndims[TENSOR_COUNT] = {2, 1};
static const uint64_t shapes[TENSOR_COUNT][2] = {{7, 5}, {13, 0}};

enum mode { SAVE, LOAD_DP, LOAD_FULL };

static uint64_t tensor_elements(int t) { return ndims[t] == 2 ? shapes[t][0] * shapes[t][1] : shapes[t][0]; }

/* This rank's shard of tensor t in the given mode, over a zeroed buffer. */
static void describe(example_shard* s, int t, enum mode mode, int rank, int world_size) {
  uint64_t begin, end;
  if (mode == LOAD_FULL) {
    const uint64_t origin[2] = {0, 0};
    example_shard_box(s, keys[t], dtypes[t], ndims[t], shapes[t], origin, shapes[t]);
    return;
  }
  if (mode == SAVE) {
    example_ramp_split(tensor_elements(t), (uint32_t)world_size, (uint32_t)rank, &begin, &end);
  } else {
    example_even_split(tensor_elements(t), (uint32_t)world_size, (uint32_t)rank, &begin, &end);
  }
  example_shard_flat(s, keys[t], dtypes[t], ndims[t], shapes[t], begin, end);
}

static void save(ckpt_context_t* ctx, example_shard shards[TENSOR_COUNT], const char* dir, ckpt_error_t* err) {
  const uint64_t step = STEP;
  ckpt_state_t* state = NULL;
  ckpt_request_t* request = NULL;
  int t;

  CHECK(ckpt_state_create(&state, err));
  for (t = 0; t < TENSOR_COUNT; ++t) {
    if (example_shard_elements(&shards[t].shard) == 0) continue;
    example_fill(&shards[t].shard);
    CHECK(ckpt_state_add_tensor(state, &shards[t].shard, err));
  }
  CHECK(ckpt_state_add_common(state, "step", &step, sizeof(step), err));
  CHECK(ckpt_save(ctx, state, dir, NULL, &request, err));
  CHECK(ckpt_request_wait(request, 0, err));
  ckpt_request_free(request);
  ckpt_state_free(state);
}

/* Loads the non-empty shards, checks every element, and returns how many elements are wrong. */
static uint64_t load_and_check(ckpt_context_t* ctx, example_shard shards[TENSOR_COUNT], const char* dir,
                               uint64_t* checked, ckpt_error_t* err) {
  ckpt_state_t* state = NULL;
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
  ckpt_state_free(state);
  return wrong;
}

static int parse_mode(const char* text, enum mode* mode) {
  if (strcmp(text, "save") == 0) {
    *mode = SAVE;
  } else if (strcmp(text, "load-dp") == 0) {
    *mode = LOAD_DP;
  } else if (strcmp(text, "load-full") == 0) {
    *mode = LOAD_FULL;
  } else {
    return 0;
  }
  return 1;
}

int main(int argc, char** argv) {
  static const char* const mode_names[3] = {"save", "load-dp", "load-full"};
  ckpt_error_t* err = NULL;
  ckpt_context_t* ctx = NULL;
  example_shard shards[TENSOR_COUNT];
  enum mode mode;
  uint64_t wrong = 0;
  uint64_t checked = 0;
  int rank, world_size, t;

  if (argc != 3 || !parse_mode(argv[1], &mode)) {
    fprintf(stderr, "usage: %s save|load-dp|load-full DIR\n", argv[0]);
    return 2;
  }
  if (ckpt_error_create(&err) != CKPT_OK) return 1;
  ctx = example_context_create(err);
  rank = ckpt_context_rank(ctx);
  world_size = ckpt_context_world_size(ctx);

  for (t = 0; t < TENSOR_COUNT; ++t) describe(&shards[t], t, mode, rank, world_size);
  if (mode == SAVE) {
    save(ctx, shards, argv[2], err);
  } else {
    wrong = load_and_check(ctx, shards, argv[2], &checked, err);
  }
  if (rank == 0 && wrong == 0) {
    printf("dist_optimizer %s: %d rank(s), exp_avg.weight F32[7,5] and exp_avg.bias F64[13] %s %s", mode_names[mode],
           world_size, mode == SAVE ? "saved as flattened ranges 1:..:N to" : "loaded from", argv[2]);
    if (mode != SAVE) printf("; rank 0 checked %" PRIu64 " elements: all match", checked);
    printf("\n");
  }
  for (t = 0; t < TENSOR_COUNT; ++t) example_shard_free(&shards[t]);
  ckpt_context_free(ctx);
  ckpt_error_free(err);
  return wrong == 0 ? 0 : 1;
}

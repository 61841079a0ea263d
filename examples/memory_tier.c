/*
 * memory_tier: a training loop that checkpoints every step into the node's memory (the ckpt-agent, which outlives
 * the trainers) and every 5th step to storage as well, and resumes from the newest checkpoint wherever it is: after
 * a crash that is the agent's memory, which it has also written to storage by then.
 *
 *   CKPT_JOB_ID=run-7 ckpt-launch -n 2 -- ./memory_tier ROOT LAST_STEP [crash]
 *
 * Each rank holds rows of a 16 x 8 F32 tensor whose values depend on the step; any number of ranks resumes any
 * other's checkpoint. With "crash", every rank kills itself (SIGKILL) once LAST_STEP is complete in memory.
 */
#include <ckpt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#define ROWS 16
#define COLS 8
#define STORAGE_EVERY 5

static float value_at(uint64_t step, uint64_t flat_index) { return (float)(step * 1000 + flat_index); }

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: memory_tier ROOT LAST_STEP [crash]\n");
    return 2;
  }
  const uint64_t last_step = strtoull(argv[2], NULL, 10);
  const int crash = argc > 3;
  ckpt_error_t* err;
  ckpt_context_t* ctx;
  ckpt_manager_t* manager = NULL;
  ckpt_state_t* state;
  ckpt_request_t* request = NULL;
  ckpt_error_create(&err);
  if (ckpt_context_create(NULL, &ctx, err) != CKPT_OK) {
    fprintf(stderr, "%s\n", ckpt_error_message(err));
    return 1;
  }
  const int rank = ckpt_context_rank(ctx), world = ckpt_context_world_size(ctx);

  /* This rank's rows [first, end) of the tensor. */
  const uint64_t first = (uint64_t)rank * ROWS / world, end = (uint64_t)(rank + 1) * ROWS / world;
  float* rows = calloc((end - first) * COLS, sizeof(float));
  uint64_t global[2] = {ROWS, COLS}, local[2] = {end - first, COLS}, offset[2] = {first, 0};
  ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
  shard.key = "weight";
  shard.dtype = CKPT_DTYPE_F32;
  shard.ndim = 2;
  shard.global_shape = global;
  shard.local_shape = local;
  shard.global_offset = offset;
  shard.data = rows;
  shard.data_size = (end - first) * COLS * sizeof(float);
  ckpt_state_create(&state, err);
  ckpt_state_add_tensor(state, &shard, err);

  /* The policy: memory every step, storage every STORAGE_EVERY steps (written by the agent, not by this loop). */
  ckpt_manager_options opts = CKPT_MANAGER_OPTIONS_INIT;
  opts.memory_tier = 1;
  opts.storage_every = STORAGE_EVERY;
  int32_t status = ckpt_manager_open(ctx, argv[1], &opts, &manager, err);
  uint64_t step = 0;
  if (status == CKPT_OK) {
    status = ckpt_manager_load_latest(manager, state, NULL, &step, err); /* memory if at least as new */
    if (status == CKPT_E_NOT_FOUND) status = CKPT_OK;                    /* a fresh start: step 0 */
  }
  for (uint64_t i = 0; status == CKPT_OK && i < (end - first) * COLS; ++i) {
    if (step > 0 && rows[i] != value_at(step, first * COLS + i)) {
      fprintf(stderr, "rank %d: element %llu of step %llu is wrong\n", rank, (unsigned long long)i,
              (unsigned long long)step);
      status = CKPT_E_CORRUPT;
    }
  }
  if (status == CKPT_OK && rank == 0) printf("resumed at step %llu on %d ranks\n", (unsigned long long)step, world);

  while (status == CKPT_OK && step < last_step) {
    ++step;
    for (uint64_t i = 0; i < (end - first) * COLS; ++i) rows[i] = value_at(step, first * COLS + i); /* "training" */
    ckpt_request_free(request); /* waits for the previous save, if still running */
    request = NULL;
    status = ckpt_manager_save(manager, state, step, NULL, &request, err); /* returns after staging */
  }
  if (status == CKPT_OK && request != NULL) status = ckpt_request_wait(request, 0, err);
  if (status != CKPT_OK) fprintf(stderr, "rank %d: %s\n", rank, ckpt_error_message(err));
  if (status == CKPT_OK && crash) {
    if (rank == 0) printf("step %llu is complete in memory; every rank now dies\n", (unsigned long long)step);
    fflush(stdout);
    raise(SIGKILL);
  }
  ckpt_request_free(request);
  ckpt_manager_free(manager);
  ckpt_state_free(state);
  ckpt_context_free(ctx);
  ckpt_error_free(err);
  free(rows);
  return status == CKPT_OK ? 0 : 1;
}

/* Links the installed libckpt.a and saves through the I/O worker processes, which libckpt must find on its own:
 * no CKPT_WORKER_PATH, and no worker beside this program. Usage: static_consumer CHECKPOINT_DIR */
#include <ckpt.h>
#include <stdio.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: static_consumer CHECKPOINT_DIR\n");
    return 2;
  }
  ckpt_error_t* err = NULL;
  ckpt_context_t* ctx = NULL;
  ckpt_state_t* state = NULL;
  ckpt_request_t* req = NULL;
  ckpt_error_create(&err);
  int32_t status = ckpt_context_create(NULL, &ctx, err);
  float values[4] = {1, 2, 3, 4};
  uint64_t shape[1] = {4}, offset[1] = {0};
  ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
  shard.key = "w";
  shard.dtype = CKPT_DTYPE_F32;
  shard.ndim = 1;
  shard.global_shape = shape;
  shard.local_shape = shape;
  shard.global_offset = offset;
  shard.data = values;
  shard.data_size = sizeof values;
  if (status == CKPT_OK) status = ckpt_state_create(&state, err);
  if (status == CKPT_OK) status = ckpt_state_add_tensor(state, &shard, err);
  if (status == CKPT_OK) status = ckpt_save(ctx, state, argv[1], NULL, &req, err);
  if (status == CKPT_OK) status = ckpt_request_wait(req, 0, err);
  if (status == CKPT_OK) {
    printf("static consumer saved %s through the installed I/O worker\n", argv[1]);
  } else {
    fprintf(stderr, "static consumer: %s: %s\n", ckpt_status_string(status), ckpt_error_message(err));
  }
  ckpt_request_free(req);
  ckpt_state_free(state);
  ckpt_context_free(ctx);
  ckpt_error_free(err);
  return status == CKPT_OK ? 0 : 1;
}

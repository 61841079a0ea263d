/* The user-allgather bootstrap: an MPI job hands ckpt its MPI_Allgather, sets no MASTER_ADDR/PORT, saves on every
 * rank and reads the checkpoint back. Run under mpirun by ctest. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "ckpt.h"

static int32_t MpiAllgather(void* user, const void* send, uint64_t size, void* recv) {
  (void)user;
  return MPI_Allgather(send, (int)size, MPI_BYTE, recv, (int)size, MPI_BYTE, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : 1;
}

static int Fail(int rank, const char* what, ckpt_error_t* err) {
  fprintf(stderr, "mpi_bootstrap rank %d: %s: %s\n", rank, what, ckpt_error_message(err));
  MPI_Abort(MPI_COMM_WORLD, 1);
  return 1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (argc != 2) return Fail(rank, "usage", NULL);

  ckpt_error_t* err = NULL;
  ckpt_error_create(&err);
  ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
  opts.rank = rank;
  opts.world_size = world;
  opts.allgather = MpiAllgather;
  opts.timeout_ms = 30000;
  ckpt_context_t* ctx = NULL;
  if (ckpt_context_create(&opts, &ctx, err) != CKPT_OK) return Fail(rank, "context", err);

  double values[4];
  for (int i = 0; i < 4; ++i) values[i] = rank * 4 + i;
  uint64_t global = 4 * (uint64_t)world, local = 4, offset = 4 * (uint64_t)rank;
  ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
  shard.key = "x";
  shard.dtype = CKPT_DTYPE_F64;
  shard.ndim = 1;
  shard.global_shape = &global;
  shard.local_shape = &local;
  shard.global_offset = &offset;
  shard.data = values;
  shard.data_size = sizeof values;
  ckpt_state_t* state = NULL;
  ckpt_state_create(&state, err);
  if (ckpt_state_add_tensor(state, &shard, err) != CKPT_OK) return Fail(rank, "add", err);
  ckpt_request_t* request = NULL;
  if (ckpt_save(ctx, state, argv[1], NULL, &request, err) != CKPT_OK) return Fail(rank, "save", err);
  if (ckpt_request_wait(request, 0, err) != CKPT_OK) return Fail(rank, "save wait", err);
  ckpt_request_free(request);
  for (int i = 0; i < 4; ++i) values[i] = -1;
  if (ckpt_load(ctx, state, argv[1], NULL, err) != CKPT_OK) return Fail(rank, "load", err);
  for (int i = 0; i < 4; ++i) {
    if (values[i] != rank * 4 + i) return Fail(rank, "wrong value after load", err);
  }
  if (rank == 0) printf("mpi bootstrap: %d ranks saved and loaded over the user's allgather\n", world);
  ckpt_state_free(state);
  ckpt_context_free(ctx);
  ckpt_error_free(err);
  MPI_Finalize();
  return 0;
}

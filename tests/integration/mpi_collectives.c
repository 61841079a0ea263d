/* The job's own collectives: an MPI job hands ckpt a table of MPI_Allgatherv, MPI_Alltoallv, MPI_Bcast and
 * MPI_Barrier. Every rank saves its row block of a matrix (plus a replicated vector), the checkpoint is loaded back
 * by column blocks, every element checked, and a second save reuses the plan. Then the checks that the metadata
 * went over MPI: ckpt's TCP store ran no collective on any rank, and ckpt's own counters saw the bytes go over the
 * table. Last, the failures a user can make: a table with a function missing, a table given with an allgather
 * callback, and a collective that fails on every rank. Run under mpirun by ctest. */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"

enum { kRows = 12, kCols = 10, kVector = 6 };

/* MPI counts are ints: a larger message is refused rather than truncated. */
static int ToCounts(const uint64_t* sizes, const uint64_t* offsets, int world, int* counts, int* displs) {
  for (int r = 0; r < world; ++r) {
    if (sizes[r] > INT_MAX || offsets[r] > INT_MAX) return 0;
    counts[r] = (int)sizes[r];
    displs[r] = (int)offsets[r];
  }
  return 1;
}

/* The number of alltoallv calls still to succeed before one fails (-1: never), to show a failing engine. */
static int alltoallv_until_failure = -1;

static int32_t MpiAllgatherv(void* user, const void* send, uint64_t send_size, void* recv, const uint64_t* recv_sizes,
                             const uint64_t* recv_offsets) {
  int world = *(const int*)user;
  int counts[64], displs[64];
  if (world > 64 || send_size > INT_MAX || !ToCounts(recv_sizes, recv_offsets, world, counts, displs)) return 2;
  return MPI_Allgatherv(send, (int)send_size, MPI_BYTE, recv, counts, displs, MPI_BYTE, MPI_COMM_WORLD) == MPI_SUCCESS
             ? 0
             : 1;
}

static int32_t MpiAlltoallv(void* user, const void* send, const uint64_t* send_sizes, const uint64_t* send_offsets,
                            void* recv, const uint64_t* recv_sizes, const uint64_t* recv_offsets) {
  int world = *(const int*)user;
  if (alltoallv_until_failure == 0) return 7;
  if (alltoallv_until_failure > 0) --alltoallv_until_failure;
  int send_counts[64], send_displs[64], recv_counts[64], recv_displs[64];
  if (world > 64 || !ToCounts(send_sizes, send_offsets, world, send_counts, send_displs) ||
      !ToCounts(recv_sizes, recv_offsets, world, recv_counts, recv_displs)) {
    return 2;
  }
  return MPI_Alltoallv(send, send_counts, send_displs, MPI_BYTE, recv, recv_counts, recv_displs, MPI_BYTE,
                       MPI_COMM_WORLD) == MPI_SUCCESS
             ? 0
             : 1;
}

static int32_t MpiBroadcast(void* user, void* buffer, uint64_t size, int32_t root) {
  (void)user;
  if (size > INT_MAX) return 2;
  return MPI_Bcast(buffer, (int)size, MPI_BYTE, root, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : 1;
}

static int32_t MpiBarrier(void* user) {
  (void)user;
  return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : 1;
}

static int32_t MpiAllgather(void* user, const void* send, uint64_t size, void* recv) {
  (void)user;
  return MPI_Allgather(send, (int)size, MPI_BYTE, recv, (int)size, MPI_BYTE, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : 1;
}

static int rank = 0, world = 1;

static void Fail(const char* what, ckpt_error_t* err) {
  fprintf(stderr, "mpi_collectives rank %d: %s: %s\n", rank, what, err ? ckpt_error_message(err) : "");
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

static double Value(uint64_t row, uint64_t col) { return (double)(row * 1000 + col); }

/* Registers a box of the matrix (rows [r0, r0+nr), columns [c0, c0+nc)) and the vector, which every rank holds. */
static ckpt_state_t* MakeState(double* matrix, uint64_t r0, uint64_t nr, uint64_t c0, uint64_t nc, double* vector,
                               ckpt_error_t* err) {
  static uint64_t global[2], local[2], offset[2], vglobal, vlocal, voffset;
  global[0] = kRows, global[1] = kCols, local[0] = nr, local[1] = nc, offset[0] = r0, offset[1] = c0;
  vglobal = kVector, vlocal = kVector, voffset = 0;
  ckpt_state_t* state = NULL;
  ckpt_state_create(&state, err);
  ckpt_tensor_shard m = CKPT_TENSOR_SHARD_INIT;
  m.key = "matrix";
  m.dtype = CKPT_DTYPE_F64;
  m.ndim = 2;
  m.global_shape = global;
  m.local_shape = local;
  m.global_offset = offset;
  m.data = matrix;
  m.data_size = nr * nc * sizeof(double);
  if (ckpt_state_add_tensor(state, &m, err) != CKPT_OK) Fail("add matrix", err);
  ckpt_tensor_shard v = CKPT_TENSOR_SHARD_INIT;
  v.key = "vector";
  v.dtype = CKPT_DTYPE_F64;
  v.ndim = 1;
  v.global_shape = &vglobal;
  v.local_shape = &vlocal;
  v.global_offset = &voffset;
  v.data = vector;
  v.data_size = sizeof(double) * kVector;
  if (ckpt_state_add_tensor(state, &v, err) != CKPT_OK) Fail("add vector", err);
  return state;
}

static void Save(ckpt_context_t* ctx, ckpt_state_t* state, const char* path, ckpt_error_t* err) {
  ckpt_request_t* request = NULL;
  if (ckpt_save(ctx, state, path, NULL, &request, err) != CKPT_OK) Fail("save", err);
  if (ckpt_request_wait(request, 0, err) != CKPT_OK) Fail("save wait", err);
  ckpt_request_free(request);
}

/* Rows split over the ranks as evenly as can be (the first ranks one more). */
static void Block(uint64_t total, uint64_t* begin, uint64_t* count) {
  uint64_t base = total / (uint64_t)world, extra = total % (uint64_t)world;
  *count = base + ((uint64_t)rank < extra);
  *begin = (uint64_t)rank * base + ((uint64_t)rank < extra ? (uint64_t)rank : extra);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (argc != 2) Fail("usage: mpi_collectives DIR", NULL);
  char first[4096], second[4096];
  snprintf(first, sizeof first, "%s/first", argv[1]);
  snprintf(second, sizeof second, "%s/second", argv[1]);

  ckpt_error_t* err = NULL;
  ckpt_error_create(&err);
  ckpt_collectives table = CKPT_COLLECTIVES_INIT;
  table.user = &world;
  table.allgatherv = MpiAllgatherv;
  table.alltoallv = MpiAlltoallv;
  table.broadcast = MpiBroadcast;
  table.barrier = MpiBarrier;
  ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
  opts.rank = rank;
  opts.world_size = world;
  opts.collectives = &table;
  opts.timeout_ms = 30000;
  ckpt_context_t* ctx = NULL;
  if (ckpt_context_create(&opts, &ctx, err) != CKPT_OK) Fail("context", err);

  /* Save by row blocks, load by column blocks. */
  uint64_t r0 = 0, nr = 0, c0 = 0, nc = 0;
  Block(kRows, &r0, &nr);
  double* rows = malloc(sizeof(double) * nr * kCols + 1);
  for (uint64_t i = 0; i < nr; ++i)
    for (uint64_t j = 0; j < kCols; ++j) rows[i * kCols + j] = Value(r0 + i, j);
  double vector[kVector];
  for (int i = 0; i < kVector; ++i) vector[i] = 0.5 * i;
  ckpt_state_t* saved = MakeState(rows, r0, nr, 0, kCols, vector, err);
  Save(ctx, saved, first, err);
  Save(ctx, saved, second, err);

  Block(kCols, &c0, &nc);
  double* cols = malloc(sizeof(double) * kRows * nc + 1);
  double loaded_vector[kVector] = {0};
  ckpt_state_t* wanted = MakeState(cols, 0, kRows, c0, nc, loaded_vector, err);
  if (ckpt_load(ctx, wanted, second, NULL, err) != CKPT_OK) Fail("load", err);
  for (uint64_t i = 0; i < kRows; ++i)
    for (uint64_t j = 0; j < nc; ++j)
      if (cols[i * nc + j] != Value(i, c0 + j)) Fail("wrong matrix element after the load", NULL);
  for (int i = 0; i < kVector; ++i)
    if (loaded_vector[i] != 0.5 * i) Fail("wrong vector element after the load", NULL);

  ckpt_context_stats stats = CKPT_CONTEXT_STATS_INIT;
  if (ckpt_context_stats_get(ctx, &stats, err) != CKPT_OK) Fail("stats", err);
  if (stats.store_collectives != 0) Fail("the TCP store ran collectives although the job's were given", NULL);
  if (stats.control_bytes_sent == 0 || stats.control_bytes_received == 0) Fail("no metadata went over MPI", NULL);
  if (stats.plans_computed != 1 || stats.plans_reused != 1) Fail("the second save did not reuse the plan", NULL);

  /* A collective that fails on every rank fails the save on every rank, naming it; nothing is committed. */
  char failed[4096];
  snprintf(failed, sizeof failed, "%s/failed", argv[1]);
  alltoallv_until_failure = 0;
  ckpt_request_t* request = NULL;
  int32_t status = ckpt_save(ctx, wanted, failed, NULL, &request, err);
  alltoallv_until_failure = -1;
  if (status != CKPT_E_PEER_FAILED || strstr(ckpt_error_message(err), "alltoallv failed with 7") == NULL) {
    Fail("a failing alltoallv did not fail the save clearly", err);
  }
  FILE* committed = fopen(failed, "r");
  if (committed != NULL) Fail("a failed save left a checkpoint", NULL);
  ckpt_context_free(ctx);

  /* Tables a context refuses before any collective runs: the same answer on every rank. */
  table.barrier = NULL;
  if (ckpt_context_create(&opts, &ctx, err) != CKPT_E_INVALID_ARGUMENT ||
      strstr(ckpt_error_message(err), "ckpt_collectives.barrier is NULL") == NULL) {
    Fail("a table without a barrier was not refused", err);
  }
  table.barrier = MpiBarrier;
  opts.allgather = MpiAllgather;
  if (ckpt_context_create(&opts, &ctx, err) != CKPT_E_INVALID_ARGUMENT) {
    Fail("an allgather callback beside the table was not refused", err);
  }

  if (rank == 0) {
    printf(
        "mpi collectives: %d ranks saved twice and loaded by columns over MPI; store collectives 0; rank 0 sent "
        "%llu and received %llu metadata bytes over MPI\n",
        world, (unsigned long long)stats.control_bytes_sent, (unsigned long long)stats.control_bytes_received);
  }
  ckpt_state_free(saved);
  ckpt_state_free(wanted);
  free(rows);
  free(cols);
  ckpt_error_free(err);
  MPI_Finalize();
  return 0;
}

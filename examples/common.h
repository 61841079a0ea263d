/*
 * Helpers shared by the examples: stopping on the first error, choosing a checkpoint directory, splitting a
 * dimension between ranks, and the element values that let any rank check any element of any tensor.
 *
 * Every element of every tensor has a value computed from the tensor's key and the element's global index, so
 * whatever layout saved a tensor and whatever layout loads it, each rank can check what it received.
 */
#ifndef CKPT_EXAMPLES_COMMON_H
#define CKPT_EXAMPLES_COMMON_H

#define _POSIX_C_SOURCE 200809L

#include <ckpt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* This process's rank, for messages; -1 until the context exists. */
static int example_rank = -1;

/* "rank 3: " once the context exists, "" before: a context that cannot be created has no rank to name (its error
 * message says which rank the launcher's environment gave). */
static inline void example_print_rank(void) {
  if (example_rank >= 0) fprintf(stderr, "rank %d: ", example_rank);
}

/* Stops the program when a ckpt call fails, printing the call, the status and the library's message. Examples
 * stop at the first error; a real trainer would retry a save or fall back to an older checkpoint. */
static inline void example_check(int32_t status, const char* call, const ckpt_error_t* err) {
  if (status == CKPT_OK) return;
  example_print_rank();
  fprintf(stderr, "%s failed: %s\n  %s\n", call, ckpt_status_string(status), err ? ckpt_error_message(err) : "");
  exit(1);
}

/* CHECK(call) needs a `ckpt_error_t* err` in scope. */
#define CHECK(call) example_check((call), #call, err)

/* Prints every line the library logs, INFO included: one line per committed save and per load with its size, time
 * and GB/s. (Without a log callback, the library prints warnings and errors only, unless CKPT_LOG_LEVEL=info.) */
static inline void example_log(void* user, int32_t level, const char* message) {
  static const char* const names[] = {"error", "warning", "info"};
  (void)user;
  example_print_rank();
  fprintf(stderr, "ckpt %s: %s\n", level >= 0 && level <= CKPT_LOG_INFO ? names[level] : "log", message);
}

/* Creates this rank's context from the launcher's environment (ckpt-launch, torchrun, mpirun or SLURM). */
static inline ckpt_context_t* example_context_create(ckpt_error_t* err) {
  ckpt_context_options options = CKPT_CONTEXT_OPTIONS_INIT;
  ckpt_context_t* ctx = NULL;
  options.log = example_log;
  CHECK(ckpt_context_create(&options, &ctx, err));
  example_rank = ckpt_context_rank(ctx);
  return ctx;
}

/* A directory name every rank of this job computes alike, for runs that give none: the ranks of one job share
 * their parent (the launcher), and a single process uses its own id. */
static inline void example_default_dir(const char* example, int world_size, char* dir, size_t size) {
  const long job = world_size > 1 ? (long)getppid() : (long)getpid();
  snprintf(dir, size, "/tmp/ckpt-%s-%ld", example, job);
}

static inline void* example_calloc(uint64_t count, uint64_t size) {
  void* data = calloc(count ? (size_t)count : 1, size ? (size_t)size : 1);
  if (data == NULL) {
    example_print_rank();
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return data;
}

/* The range [*begin, *end) of `n` items that part `index` of `parts` gets in an even split: the first n % parts
 * parts get one item more. */
static inline void example_even_split(uint64_t n, uint32_t parts, uint32_t index, uint64_t* begin, uint64_t* end) {
  const uint64_t base = n / parts;
  const uint64_t extra = n % parts;
  *begin = index * base + (index < extra ? index : extra);
  *end = *begin + base + (index < extra ? 1 : 0);
}

/* An uneven split: part i gets a share of `n` proportional to i + 1 (so 1:2:3 over three parts); the first parts
 * may get nothing when n is small. */
static inline void example_ramp_split(uint64_t n, uint32_t parts, uint32_t index, uint64_t* begin, uint64_t* end) {
  const uint64_t total = (uint64_t)parts * (parts + 1) / 2;
  const uint64_t before = (uint64_t)index * (index + 1) / 2;
  const uint64_t through = before + index + 1;
  *begin = n * before / total;
  *end = n * through / total;
}

/* The value of element `index` (row-major over the global shape) of the tensor named `key`: never zero, so a
 * buffer left unfilled cannot pass, and exact in every dtype the examples use (below 2^24 for small tensors). */
static inline int64_t example_value(const char* key, uint64_t index) {
  uint32_t hash = 2166136261u; /* FNV-1a: a different value range per tensor */
  const unsigned char* c;
  for (c = (const unsigned char*)key; *c; ++c) hash = (hash ^ *c) * 16777619u;
  return (int64_t)(hash % 97 + 1) * 100000 + (int64_t)index + 1;
}

/* Elements in a shard's data: its whole box, or its flattened range. */
static inline uint64_t example_shard_elements(const ckpt_tensor_shard* shard) {
  uint64_t count = 1;
  uint32_t d;
  if (shard->flags & CKPT_SHARD_FLATTENED) return shard->flat_end - shard->flat_start;
  for (d = 0; d < shard->ndim; ++d) count *= shard->local_shape[d];
  return count;
}

/* The global row-major index of the i-th element of a shard's data. */
static inline uint64_t example_global_index(const ckpt_tensor_shard* shard, uint64_t i) {
  uint64_t in_box = (shard->flags & CKPT_SHARD_FLATTENED) ? shard->flat_start + i : i;
  uint64_t coordinate[CKPT_MAX_NDIM];
  uint64_t global = 0;
  uint32_t d;
  for (d = shard->ndim; d-- > 0;) {
    coordinate[d] = shard->global_offset[d] + in_box % shard->local_shape[d];
    in_box /= shard->local_shape[d];
  }
  for (d = 0; d < shard->ndim; ++d) global = global * shard->global_shape[d] + coordinate[d];
  return global;
}

/* Stores `value` as element i of `data` in the given dtype (the dtypes the examples use). */
static inline void example_store(int32_t dtype, void* data, uint64_t i, int64_t value) {
  switch (dtype) {
    case CKPT_DTYPE_F32:
      ((float*)data)[i] = (float)value;
      break;
    case CKPT_DTYPE_F64:
      ((double*)data)[i] = (double)value;
      break;
    case CKPT_DTYPE_I32:
      ((int32_t*)data)[i] = (int32_t)value;
      break;
    case CKPT_DTYPE_I64:
      ((int64_t*)data)[i] = value;
      break;
    default:
      fprintf(stderr, "examples do not use dtype %s\n", ckpt_dtype_name(dtype));
      exit(1);
  }
}

/* Element i of `data` in the given dtype, as an integer (the examples store integers only). */
static inline int64_t example_load(int32_t dtype, const void* data, uint64_t i) {
  switch (dtype) {
    case CKPT_DTYPE_F32:
      return (int64_t)((const float*)data)[i];
    case CKPT_DTYPE_F64:
      return (int64_t)((const double*)data)[i];
    case CKPT_DTYPE_I32:
      return ((const int32_t*)data)[i];
    case CKPT_DTYPE_I64:
      return ((const int64_t*)data)[i];
    default:
      fprintf(stderr, "examples do not use dtype %s\n", ckpt_dtype_name(dtype));
      exit(1);
  }
}

/* Writes the expected value into every element of the shard's data. */
static inline void example_fill(const ckpt_tensor_shard* shard) {
  const uint64_t count = example_shard_elements(shard);
  uint64_t i;
  for (i = 0; i < count; ++i) {
    example_store(shard->dtype, shard->data, i, example_value(shard->key, example_global_index(shard, i)));
  }
}

/* Checks every element of the shard's data; prints the first wrong one and returns how many are wrong. */
static inline uint64_t example_count_mismatches(const ckpt_tensor_shard* shard) {
  const uint64_t count = example_shard_elements(shard);
  uint64_t wrong = 0;
  uint64_t i;
  for (i = 0; i < count; ++i) {
    const uint64_t global = example_global_index(shard, i);
    const int64_t expected = example_value(shard->key, global);
    const int64_t actual = example_load(shard->dtype, shard->data, i);
    if (actual == expected) continue;
    if (wrong++ == 0) {
      fprintf(stderr, "rank %d: '%s' element %" PRIu64 " is %" PRId64 ", expected %" PRId64 "\n", example_rank,
              shard->key, global, actual, expected);
    }
  }
  if (wrong)
    fprintf(stderr, "rank %d: '%s': %" PRIu64 " of %" PRIu64 " elements wrong\n", example_rank, shard->key, wrong,
            count);
  return wrong;
}

/* A tensor shard together with the arrays it points to. Do not copy one: the shard points into itself. */
typedef struct example_shard {
  ckpt_tensor_shard shard;
  uint64_t global_shape[CKPT_MAX_NDIM];
  uint64_t local_shape[CKPT_MAX_NDIM];
  uint64_t global_offset[CKPT_MAX_NDIM];
  uint32_t replica_id[1];
} example_shard;

/* Describes the box (offset, shape) of tensor `key` and gives it a zeroed buffer. */
static inline void example_shard_box(example_shard* s, const char* key, int32_t dtype, uint32_t ndim,
                                     const uint64_t* global_shape, const uint64_t* offset, const uint64_t* shape) {
  ckpt_tensor_shard_init(&s->shard, sizeof s->shard);
  memcpy(s->global_shape, global_shape, ndim * sizeof(uint64_t));
  memcpy(s->global_offset, offset, ndim * sizeof(uint64_t));
  memcpy(s->local_shape, shape, ndim * sizeof(uint64_t));
  s->shard.key = key;
  s->shard.dtype = dtype;
  s->shard.ndim = ndim;
  s->shard.global_shape = s->global_shape;
  s->shard.local_shape = s->local_shape;
  s->shard.global_offset = s->global_offset;
  s->shard.data_size = example_shard_elements(&s->shard) * ckpt_dtype_size(dtype);
  s->shard.data = example_calloc(example_shard_elements(&s->shard), ckpt_dtype_size(dtype));
}

/* Describes the flattened range [flat_start, flat_end) of the whole tensor `key`, as a distributed optimizer holds
 * it, and gives it a zeroed buffer of just that range. */
static inline void example_shard_flat(example_shard* s, const char* key, int32_t dtype, uint32_t ndim,
                                      const uint64_t* global_shape, uint64_t flat_start, uint64_t flat_end) {
  const uint64_t origin[CKPT_MAX_NDIM] = {0};
  example_shard_box(s, key, dtype, ndim, global_shape, origin, global_shape);
  free(s->shard.data);
  s->shard.flags |= CKPT_SHARD_FLATTENED;
  s->shard.flat_start = flat_start;
  s->shard.flat_end = flat_end;
  s->shard.data_size = (flat_end - flat_start) * ckpt_dtype_size(dtype);
  s->shard.data = example_calloc(flat_end - flat_start, ckpt_dtype_size(dtype));
}

/* Marks the shard as data-parallel replica `replica` of its box; replica 0 is the main one. */
static inline void example_shard_set_replica(example_shard* s, uint32_t replica) {
  s->replica_id[0] = replica;
  s->shard.replica_ndim = 1;
  s->shard.replica_id = s->replica_id;
}

static inline void example_shard_free(example_shard* s) {
  free(s->shard.data);
  s->shard.data = NULL;
}

#endif /* CKPT_EXAMPLES_COMMON_H */

/*
 * make_checkpoints: what the ckpt tool's tests (tests/cli.cmake) inspect, saved on one rank through the C API.
 *
 *   make_checkpoints DIR
 *
 * DIR/rows and DIR/columns hold the same values, each 1-D and 2-D tensor saved as two shards cut along a different
 * dimension (or at a different point); DIR/flipped is DIR/rows with weights[3][7] raised by 0.25. Each also holds
 * two objects, two common entries and two metadata entries. DIR/tensors holds the tensors of DIR/rows alone (what
 * import copies). DIR/hostile holds keys and metadata that would drive a terminal if printed as they are: escape
 * sequences, line breaks, C1 controls (U+0085, U+009B), DEL, a tab, a carriage return and a backslash; its
 * common entry "screen" holds such bytes too.
 * DIR/root is a manager's root with steps 10 and 20. DIR must not exist yet.
 */
#include <ckpt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SHARDS 64

typedef struct tensor {
  const char* key;
  int32_t dtype;
  uint32_t ndim;
  uint64_t shape[2];
  unsigned char* data; /* row-major, whole */
} tensor;

/* Every shard's copy of its data, freed once the save has finished. */
typedef struct buffers {
  void* data[MAX_SHARDS];
  int count;
} buffers;

static void check(int32_t status, ckpt_error_t* err, const char* what) {
  if (status == CKPT_OK) return;
  fprintf(stderr, "make_checkpoints: %s: %s: %s\n", what, ckpt_status_string(status), ckpt_error_message(err));
  exit(1);
}

/* Registers the box [r0, r1) x [c0, c1) of `t` seen as rows x cols (a 1-D tensor is one row), copied. */
static void add_box(ckpt_state_t* state, const tensor* t, uint64_t r0, uint64_t r1, uint64_t c0, uint64_t c1,
                    buffers* kept, ckpt_error_t* err) {
  const uint64_t cols = t->ndim == 0 ? 1 : t->shape[t->ndim - 1];
  const uint64_t size = ckpt_dtype_size(t->dtype);
  const uint64_t row_bytes = (c1 - c0) * size;
  unsigned char* copy = malloc((r1 - r0) * row_bytes + 1);
  for (uint64_t r = r0; r < r1; ++r) memcpy(copy + (r - r0) * row_bytes, t->data + (r * cols + c0) * size, row_bytes);
  kept->data[kept->count++] = copy;
  const uint64_t offset[2] = {t->ndim == 2 ? r0 : c0, c0};
  const uint64_t local[2] = {t->ndim == 2 ? r1 - r0 : c1 - c0, c1 - c0};
  ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
  shard.key = t->key;
  shard.dtype = t->dtype;
  shard.ndim = t->ndim;
  shard.global_shape = t->shape;
  shard.local_shape = local;
  shard.global_offset = offset;
  shard.data = copy;
  shard.data_size = (r1 - r0) * row_bytes;
  check(ckpt_state_add_tensor(state, &shard, err), err, t->key);
}

/* Registers `t` as two shards: cut across its rows (by_rows) or its columns, a 1-D tensor at a third of its length
 * or at two thirds; a 0-D tensor whole. */
static void add_split(ckpt_state_t* state, const tensor* t, int by_rows, buffers* kept, ckpt_error_t* err) {
  const uint64_t rows = t->ndim == 2 ? t->shape[0] : 1;
  const uint64_t cols = t->ndim == 0 ? 1 : t->shape[t->ndim - 1];
  if (t->ndim == 0) {
    add_box(state, t, 0, 1, 0, 1, kept, err);
  } else if (by_rows && t->ndim == 2) {
    add_box(state, t, 0, rows / 3, 0, cols, kept, err);
    add_box(state, t, rows / 3, rows, 0, cols, kept, err);
  } else {
    const uint64_t cut = by_rows ? cols / 3 : 2 * cols / 3;
    add_box(state, t, 0, rows, 0, cut, kept, err);
    add_box(state, t, 0, rows, cut, cols, kept, err);
  }
}

static uint16_t bf16_of(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return (uint16_t)(bits >> 16); /* exact: the values below have at most 8 significant bits */
}

/* IEEE binary16 of a whole number below 2048, exactly. */
static uint16_t f16_of_integer(unsigned k) {
  if (k == 0) return 0;
  unsigned exponent = 0;
  while ((k >> (exponent + 1)) != 0) ++exponent;
  return (uint16_t)(((exponent + 15) << 10) | ((k << (10 - exponent)) & 0x3ff));
}

/* The tensors every checkpoint holds; `flip` raises weights[3][7] by 0.25. */
static int make_tensors(tensor* out, int flip) {
  static float weights[37 * 24];
  static uint16_t half[16 * 8], f16[6 * 5];
  static int64_t steps[5] = {INT64_MIN, -1, 0, 1, INT64_MAX};
  static double scalar = 3.25;
  static unsigned char mask[7], every_byte[256];
  static float c64[6];
  for (int i = 0; i < 37 * 24; ++i) weights[i] = (float)i * 0.5f - 100.0f;
  if (flip) weights[3 * 24 + 7] += 0.25f;
  for (int i = 0; i < 16 * 8; ++i) half[i] = bf16_of((float)(i - 64) * 0.25f);
  for (unsigned i = 0; i < 6 * 5; ++i) f16[i] = f16_of_integer(3 * i);
  for (int i = 0; i < 7; ++i) mask[i] = i % 3 == 0;
  for (int i = 0; i < 256; ++i) every_byte[i] = (unsigned char)i;
  for (int i = 0; i < 3; ++i) c64[2 * i] = (float)i, c64[2 * i + 1] = -0.5f * (float)i;
  int n = 0;
  out[n++] = (tensor){"weights", CKPT_DTYPE_F32, 2, {37, 24}, (unsigned char*)weights};
  out[n++] = (tensor){"half", CKPT_DTYPE_BF16, 2, {16, 8}, (unsigned char*)half};
  out[n++] = (tensor){"f16", CKPT_DTYPE_F16, 2, {6, 5}, (unsigned char*)f16};
  out[n++] = (tensor){"steps", CKPT_DTYPE_I64, 1, {5, 0}, (unsigned char*)steps};
  out[n++] = (tensor){"scalar", CKPT_DTYPE_F64, 0, {0, 0}, (unsigned char*)&scalar};
  out[n++] = (tensor){"mask", CKPT_DTYPE_BOOL, 1, {7, 0}, mask};
  out[n++] = (tensor){"c64", CKPT_DTYPE_C64, 1, {3, 0}, (unsigned char*)c64};
  /* Every code of each 8-bit float format, and of the 4-bit one, for `cat` to print as ml_dtypes reads them. */
  static const struct {
    const char* key;
    int32_t dtype;
  } formats[] = {{"f8.e4m3", CKPT_DTYPE_F8_E4M3},
                 {"f8.e5m2", CKPT_DTYPE_F8_E5M2},
                 {"f8.e4m3fnuz", CKPT_DTYPE_F8_E4M3FNUZ},
                 {"f8.e5m2fnuz", CKPT_DTYPE_F8_E5M2FNUZ},
                 {"f8.e4m3b11fnuz", CKPT_DTYPE_F8_E4M3B11FNUZ},
                 {"f8.e3m4", CKPT_DTYPE_F8_E3M4},
                 {"f8.e4m3_ieee", CKPT_DTYPE_F8_E4M3_IEEE},
                 {"f8.e8m0", CKPT_DTYPE_F8_E8M0}};
  for (size_t f = 0; f < sizeof formats / sizeof formats[0]; ++f) {
    out[n++] = (tensor){formats[f].key, formats[f].dtype, 1, {256, 0}, every_byte};
  }
  out[n++] = (tensor){"f4.e2m1", CKPT_DTYPE_F4_E2M1, 1, {16, 0}, every_byte};
  return n;
}

static void add_rest(ckpt_state_t* state, ckpt_error_t* err) {
  static char first[] = "generator state 0", second[] = "state 1", config[] = "lr=0.1\n";
  static const unsigned char seed[8] = {0x2a, 0, 0, 0, 0xff, 0, 0x10, 0};
  const uint64_t grid[1] = {2}, cell0[1] = {0}, cell1[1] = {1};
  check(ckpt_state_add_object(state, "rng", 1, grid, cell0, first, sizeof first - 1, err), err, "rng");
  check(ckpt_state_add_object(state, "rng", 1, grid, cell1, second, sizeof second - 1, err), err, "rng");
  check(ckpt_state_add_object(state, "tokenizer", 0, NULL, NULL, config, sizeof config - 1, err), err, "tokenizer");
  check(ckpt_state_add_common(state, "config", config, sizeof config - 1, err), err, "config");
  check(ckpt_state_add_common(state, "seed", seed, sizeof seed, err), err, "seed");
}

static void save(ckpt_context_t* ctx, const char* path, const char* layout, int by_rows, int flip, int with_rest,
                 ckpt_error_t* err) {
  tensor tensors[32];
  const int count = make_tensors(tensors, flip);
  ckpt_state_t* state = NULL;
  check(ckpt_state_create(&state, err), err, "creating a state");
  buffers kept = {{0}, 0};
  for (int t = 0; t < count; ++t) add_split(state, &tensors[t], by_rows, &kept, err);
  if (with_rest) add_rest(state, err);
  const char* keys[] = {"run", "layout"};
  const char* values[] = {"cli-test", layout};
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.metadata_count = 2;
  opts.metadata_keys = keys;
  opts.metadata_values = values;
  ckpt_request_t* request = NULL;
  check(ckpt_save(ctx, state, path, &opts, &request, err), err, path);
  check(ckpt_request_wait(request, 0, err), err, path);
  ckpt_request_free(request);
  ckpt_state_free(state);
  for (int i = 0; i < kept.count; ++i) free(kept.data[i]);
}

/* The keys of DIR/hostile: each is a tensor's and a metadata key, the first also a common entry's. The C1 controls
 * are written in octal (\302\205 is U+0085), which, unlike \x, stops after three digits. */
static const char* const hostile_keys[] = {"esc\x1b[31mred\x1b[0m", "line\n  fake  F32  [1]  1  4",
                                           "c1\302\205nel\302\2332J", "del\x7f back\\slash tab\t cr\r"};
static const char* const hostile_values[] = {"\x1b]0;title\x07", "two\nlines", "\302\23331m", "plain"};

static void save_hostile(ckpt_context_t* ctx, const char* path, ckpt_error_t* err) {
  static float values[4] = {1, 2, 3, 4};
  static const uint64_t shape[1] = {1}, offset[1] = {0};
  ckpt_state_t* state = NULL;
  check(ckpt_state_create(&state, err), err, "creating a state");
  for (int i = 0; i < 4; ++i) {
    ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
    shard.key = hostile_keys[i];
    shard.dtype = CKPT_DTYPE_F32;
    shard.ndim = 1;
    shard.global_shape = shape;
    shard.local_shape = shape;
    shard.global_offset = offset;
    shard.data = &values[i];
    shard.data_size = sizeof values[i];
    check(ckpt_state_add_tensor(state, &shard, err), err, "a hostile key");
  }
  check(ckpt_state_add_common(state, hostile_keys[0], "\x1b[2J", 4, err), err, "a hostile common entry");
  check(ckpt_state_add_common(state, "screen", "clear\r\302\2332J", 10, err), err, "a hostile common entry");
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.metadata_count = 4;
  opts.metadata_keys = hostile_keys;
  opts.metadata_values = hostile_values;
  ckpt_request_t* request = NULL;
  check(ckpt_save(ctx, state, path, &opts, &request, err), err, path);
  check(ckpt_request_wait(request, 0, err), err, path);
  ckpt_request_free(request);
  ckpt_state_free(state);
}

static void save_steps(ckpt_context_t* ctx, const char* root, ckpt_error_t* err) {
  ckpt_manager_t* manager = NULL;
  check(ckpt_manager_open(ctx, root, NULL, &manager, err), err, root);
  ckpt_state_t* state = NULL;
  check(ckpt_state_create(&state, err), err, "creating a state");
  for (uint64_t step = 10; step <= 20; step += 10) {
    check(ckpt_state_add_common(state, step == 10 ? "ten" : "twenty", "x", 1, err), err, "step");
    ckpt_request_t* request = NULL;
    check(ckpt_manager_save(manager, state, step, NULL, &request, err), err, root);
    check(ckpt_request_wait(request, 0, err), err, root);
    ckpt_request_free(request);
  }
  ckpt_state_free(state);
  ckpt_manager_free(manager);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make_checkpoints DIR\n");
    return 2;
  }
  ckpt_error_t* err = NULL;
  if (ckpt_error_create(&err) != CKPT_OK) return 1;
  ckpt_context_options opts = CKPT_CONTEXT_OPTIONS_INIT;
  opts.rank = 0;
  opts.world_size = 1;
  opts.io_workers = 0; /* I/O threads: nothing else to launch */
  ckpt_context_t* ctx = NULL;
  check(ckpt_context_create(&opts, &ctx, err), err, "creating a context");
  char path[4096];
  const struct {
    const char* name;
    int by_rows, flip, with_rest;
  } layouts[] = {{"rows", 1, 0, 1}, {"columns", 0, 0, 1}, {"flipped", 1, 1, 1}, {"tensors", 1, 0, 0}};
  for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; ++l) {
    snprintf(path, sizeof path, "%s/%s", argv[1], layouts[l].name);
    save(ctx, path, layouts[l].name, layouts[l].by_rows, layouts[l].flip, layouts[l].with_rest, err);
  }
  snprintf(path, sizeof path, "%s/hostile", argv[1]);
  save_hostile(ctx, path, err);
  snprintf(path, sizeof path, "%s/root", argv[1]);
  save_steps(ctx, path, err);
  ckpt_context_free(ctx);
  ckpt_error_free(err);
  return 0;
}

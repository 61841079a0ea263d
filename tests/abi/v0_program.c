/* A program written against the CKPT_0 header (abi/v0/ckpt.h, as ckpt 0.1.0 shipped it) and linked against a
 * library that exports only CKPT_0, as such a program was: run with the current libckpt, it must work unchanged.
 * Every struct it hands the library is followed by guard bytes that must come back untouched, so a library that
 * writes its own, larger sizeof fails here. Usage: abi_v0_program SCRATCH_DIR (empty, writable). */
#include <ckpt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD_BYTE 0xA5
#define GUARD_SIZE 64

static int failures = 0;

#define EXPECT(condition)                                                     \
  do {                                                                        \
    if (!(condition)) {                                                       \
      fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #condition); \
      ++failures;                                                             \
    }                                                                         \
  } while (0)

/* Each struct the program owns, followed by bytes that belong to nothing the library may write. */
#define GUARDED(type)                \
  struct {                           \
    type value;                      \
    unsigned char guard[GUARD_SIZE]; \
  }

static int guard_intact(const unsigned char* guard) {
  int i;
  for (i = 0; i < GUARD_SIZE; ++i) {
    if (guard[i] != GUARD_BYTE) return 0;
  }
  return 1;
}

static void check_status(int32_t status, ckpt_error_t* err, const char* call) {
  if (status != CKPT_OK) {
    fprintf(stderr, "%s: %s (%s)\n", call, ckpt_status_string(status), ckpt_error_message(err));
    ++failures;
  }
}

int main(int argc, char** argv) {
  GUARDED(ckpt_context_options) context_options;
  GUARDED(ckpt_tensor_shard) shard;
  GUARDED(ckpt_save_options) save_options;
  GUARDED(ckpt_load_options) load_options;
  GUARDED(ckpt_manager_options) manager_options;
  GUARDED(ckpt_context_stats) stats;
  GUARDED(ckpt_checkpoint_info) info;
  const char* metadata_keys[1] = {"written_by"};
  const char* metadata_values[1] = {"a CKPT_0 program"};
  const uint64_t shape[1] = {4};
  const uint64_t offset[1] = {0};
  float saved[4] = {1.5f, 2.5f, 3.5f, 4.5f};
  float loaded[4] = {0};
  char path[4096];
  uint64_t latest = 0;
  ckpt_error_t* err = NULL;
  ckpt_context_t* ctx = NULL;
  ckpt_state_t* save_state = NULL;
  ckpt_state_t* load_state = NULL;
  ckpt_request_t* request = NULL;
  ckpt_manager_t* manager = NULL;
  ckpt_reader_t* reader = NULL;

  if (argc != 2) {
    fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
    return 2;
  }
  memset(&context_options, GUARD_BYTE, sizeof context_options);
  memset(&shard, GUARD_BYTE, sizeof shard);
  memset(&save_options, GUARD_BYTE, sizeof save_options);
  memset(&load_options, GUARD_BYTE, sizeof load_options);
  memset(&manager_options, GUARD_BYTE, sizeof manager_options);
  memset(&stats, GUARD_BYTE, sizeof stats);
  memset(&info, GUARD_BYTE, sizeof info);

  /* The one-argument init functions of CKPT_0 write the CKPT_0 struct, defaults up to its last field. */
  ckpt_context_options_init(&context_options.value);
  ckpt_tensor_shard_init(&shard.value);
  ckpt_save_options_init(&save_options.value);
  ckpt_load_options_init(&load_options.value);
  ckpt_manager_options_init(&manager_options.value);
  EXPECT(context_options.value.struct_size == sizeof(ckpt_context_options));
  EXPECT(context_options.value.transport == CKPT_TRANSPORT_DEFAULT);
  EXPECT(guard_intact(context_options.guard));
  EXPECT(shard.value.struct_size == sizeof(ckpt_tensor_shard));
  EXPECT(shard.value.data == NULL && shard.value.data_size == 0);
  EXPECT(guard_intact(shard.guard));
  EXPECT(save_options.value.struct_size == sizeof(ckpt_save_options));
  EXPECT(save_options.value.metadata_values == NULL);
  EXPECT(guard_intact(save_options.guard));
  EXPECT(load_options.value.struct_size == sizeof(ckpt_load_options));
  EXPECT(load_options.value.unexpected_keys == CKPT_STRICT_LOG);
  EXPECT(guard_intact(load_options.guard));
  EXPECT(manager_options.value.struct_size == sizeof(ckpt_manager_options));
  EXPECT(manager_options.value.keep_every == 0);
  EXPECT(guard_intact(manager_options.guard));

  check_status(ckpt_error_create(&err), err, "ckpt_error_create");
  context_options.value.io_workers = 0;
  check_status(ckpt_context_create(&context_options.value, &ctx, err), err, "ckpt_context_create");
  check_status(ckpt_state_create(&save_state, err), err, "ckpt_state_create");
  check_status(ckpt_state_create(&load_state, err), err, "ckpt_state_create");
  if (failures > 0) return 1;

  shard.value.key = "weights";
  shard.value.dtype = CKPT_DTYPE_F32;
  shard.value.ndim = 1;
  shard.value.global_shape = shape;
  shard.value.local_shape = shape;
  shard.value.global_offset = offset;
  shard.value.data = saved;
  shard.value.data_size = sizeof saved;
  check_status(ckpt_state_add_tensor(save_state, &shard.value, err), err, "ckpt_state_add_tensor");
  shard.value.data = loaded;
  check_status(ckpt_state_add_tensor(load_state, &shard.value, err), err, "ckpt_state_add_tensor");

  /* A plain save and load, with options that went through the CKPT_0 init functions. */
  snprintf(path, sizeof path, "%s/plain", argv[1]);
  save_options.value.metadata_count = 1;
  save_options.value.metadata_keys = metadata_keys;
  save_options.value.metadata_values = metadata_values;
  check_status(ckpt_save(ctx, save_state, path, &save_options.value, &request, err), err, "ckpt_save");
  check_status(ckpt_request_wait(request, 0, err), err, "ckpt_request_wait");
  ckpt_request_free(request);
  check_status(ckpt_load(ctx, load_state, path, &load_options.value, err), err, "ckpt_load");
  EXPECT(memcmp(saved, loaded, sizeof saved) == 0);

  /* The info structs the library fills: only the CKPT_0 size of them. */
  info.value = (ckpt_checkpoint_info)CKPT_CHECKPOINT_INFO_INIT;
  check_status(ckpt_reader_open(path, &reader, err), err, "ckpt_reader_open");
  check_status(ckpt_reader_info(reader, &info.value, err), err, "ckpt_reader_info");
  EXPECT(info.value.tensor_count == 1 && info.value.metadata_count == 1 && info.value.total_bytes == sizeof saved);
  EXPECT(guard_intact(info.guard));
  ckpt_reader_free(reader);

  stats.value = (ckpt_context_stats)CKPT_CONTEXT_STATS_INIT;
  check_status(ckpt_context_stats_get(ctx, &stats.value, err), err, "ckpt_context_stats_get");
  EXPECT(stats.value.saves_committed == 1 && stats.value.bytes_staged >= sizeof saved);
  EXPECT(guard_intact(stats.guard));

  /* The manager, with its options from the CKPT_0 init function. */
  snprintf(path, sizeof path, "%s/steps", argv[1]);
  manager_options.value.keep_last = 1;
  memset(loaded, 0, sizeof loaded);
  check_status(ckpt_manager_open(ctx, path, &manager_options.value, &manager, err), err, "ckpt_manager_open");
  check_status(ckpt_manager_save(manager, save_state, 7, NULL, &request, err), err, "ckpt_manager_save");
  check_status(ckpt_request_wait(request, 0, err), err, "ckpt_request_wait");
  ckpt_request_free(request);
  check_status(ckpt_manager_load_latest(manager, load_state, &load_options.value, &latest, err), err,
               "ckpt_manager_load_latest");
  EXPECT(latest == 7);
  EXPECT(memcmp(saved, loaded, sizeof saved) == 0);

  ckpt_manager_free(manager);
  ckpt_state_free(load_state);
  ckpt_state_free(save_state);
  ckpt_context_free(ctx);
  ckpt_error_free(err);
  if (failures > 0) return 1;
  printf("a CKPT_0 program ran unchanged against libckpt %s\n", ckpt_version_string());
  return 0;
}

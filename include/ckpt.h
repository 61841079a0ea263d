/*
 * ckpt: distributed checkpointing for training jobs, with a stable C ABI.
 *
 * Every process of a job (a rank) creates one context, registers the shards of the global tensors it holds in a
 * state, and calls ckpt_save or ckpt_load together with the other ranks. Any number of ranks, in any parallel
 * layout, can load what any other layout saved.
 *
 * Reading order: version, status and errors, context, state, save, load, reader.
 *
 * Conventions
 * - Every function that can fail returns an int32_t status (CKPT_OK or a CKPT_E_* code) and, when `err` is not
 *   NULL, fills it with a message naming what is wrong (which key, rank, file, offset).
 * - Options and info structs start with `struct_size`; initialise them with their *_INIT macro or *_init function,
 *   both of which record the caller's sizeof, so that fields appended later keep their defaults and the library
 *   never writes past the caller's struct. A NULL options pointer means defaults.
 * - A program built against an older ckpt.h runs unchanged with a newer libckpt of the same major version. The
 *   exported symbols carry ELF versions (CKPT_0, CKPT_1, ...: runtime/capi/libckpt.map); a program built against this
 *   header needs a library that provides CKPT_1, and the dynamic loader refuses to start it otherwise.
 * - Handles are opaque; every *_free accepts NULL.
 * - "Collective" means every rank of the context must make the same call, in the same order.
 * - Paths: every checkpoint path (save, load, reader, export, the manager's root) is a POSIX directory or an
 *   object storage URL, "s3://bucket/prefix" (AWS S3, GCS's XML API, Ceph, ...), configured as AWS tools are: the
 *   AWS_* environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION,
 *   AWS_PROFILE) and ~/.aws/credentials and ~/.aws/config. On S3 a save uploads its data objects under
 *   <path>/data/<save id>/ and commits by creating <path>/MANIFEST only if absent; nothing is renamed.
 * - Thread safety: distinct handles may be used from distinct threads; one handle must not be used by two
 *   threads at once. Error objects and readers may move between threads.
 */
#ifndef CKPT_H
#define CKPT_H

#include <stddef.h>
#include <stdint.h>

#if defined(CKPT_BUILDING_LIBRARY) && defined(__GNUC__)
#define CKPT_API __attribute__((visibility("default")))
#else
#define CKPT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------------------------ */
/* Version                                                                                                        */
/* ------------------------------------------------------------------------------------------------------------ */

#define CKPT_VERSION_MAJOR 0
#define CKPT_VERSION_MINOR 1
#define CKPT_VERSION_PATCH 0
#define CKPT_VERSION_NUMBER (CKPT_VERSION_MAJOR * 10000 + CKPT_VERSION_MINOR * 100 + CKPT_VERSION_PATCH)

/* The version of the library actually loaded, as CKPT_VERSION_NUMBER computes it. */
CKPT_API uint32_t ckpt_version_number(void);
/* The same as "major.minor.patch"; static storage. */
CKPT_API const char* ckpt_version_string(void);

/* ------------------------------------------------------------------------------------------------------------ */
/* Status codes and error objects                                                                                */
/* ------------------------------------------------------------------------------------------------------------ */

/* Pinned: these numbers never change. Each code says what the caller should do next; the message in the error
 * object says which key, rank, file or offset. */
#define CKPT_OK 0
/* The call's arguments or the registered state are wrong. Fix the caller: the same call fails the same way. */
#define CKPT_E_INVALID_ARGUMENT 1
/* A checkpoint, key, step or file does not exist. Check the path or key; from ckpt_manager_load_latest it means
 * there is nothing to resume from: start fresh. */
#define CKPT_E_NOT_FOUND 2
/* The save target is already a committed checkpoint, which ckpt never overwrites: save to another path. */
#define CKPT_E_ALREADY_EXISTS 3
/* Ranks disagree, or the state disagrees with the checkpoint (dtype, shape, gaps, overlaps, missing or unexpected
 * keys). Fix the registered state or the load options (strictness, CKPT_SHARD_ALLOW_SHAPE_MISMATCH,
 * CKPT_SHARD_ALLOW_DTYPE_CAST), then call again: the context stays usable. */
#define CKPT_E_MISMATCH 4
/* A checksum failed, a file is truncated, or the manifest is malformed. The checkpoint is damaged and retrying
 * reads the same bytes: load another one (an earlier step). */
#define CKPT_E_CORRUPT 5
/* The checkpoint was written by a newer, incompatible format version: read it with a newer ckpt. */
#define CKPT_E_VERSION 6
/* The operating system refused an I/O call; the message has errno's text. Fix the path, permissions or mount;
 * a transient failure (a network file system) may pass when retried. */
#define CKPT_E_IO 7
/* The file system is full (ENOSPC, EDQUOT); the failed save left nothing behind. Free space (fewer kept steps,
 * another directory), then save again. */
#define CKPT_E_NO_SPACE 8
/* A peer or an I/O worker did not answer in time; the message names whom. After a collective call the ranks are
 * out of step: free the context on every rank and create new ones (in practice, restart the job from its last
 * committed checkpoint), with a larger timeout_ms if the peers were only slow. */
#define CKPT_E_TIMEOUT 9
/* Another rank died or failed; the message names it. The context cannot be used for collectives any more: free
 * it and restart the job (every rank creates a new context) from its last committed checkpoint. */
#define CKPT_E_PEER_FAILED 10
/* Valid, but not supported by this build or this machine (a transport, CUDA memory, a newer struct). Choose
 * another option or install what the message names; retrying does not help. */
#define CKPT_E_UNSUPPORTED 11
/* An allocation failed. Free memory (a smaller arena_bytes, fewer I/O workers), then retry. */
#define CKPT_E_NO_MEMORY 12
/* ckpt_request_test or ckpt_request_wait: the request is still running, which is no failure. Call again later. */
#define CKPT_E_IN_PROGRESS 13
/* A bug in ckpt. Report the message; free the context, as its state is unknown. */
#define CKPT_E_INTERNAL 14

/* A short constant description of a status code ("CKPT_E_CORRUPT: ..."); never NULL. */
CKPT_API const char* ckpt_status_string(int32_t status);

/* A caller-owned error object. Any call taking `ckpt_error_t* err` fills it on failure and clears it on success. */
typedef struct ckpt_error ckpt_error_t;

/* Returns CKPT_OK or CKPT_E_NO_MEMORY. */
CKPT_API int32_t ckpt_error_create(ckpt_error_t** out);
CKPT_API void ckpt_error_free(ckpt_error_t* err);
/* The status of the last failed call (CKPT_OK if it succeeded). */
CKPT_API int32_t ckpt_error_status(const ckpt_error_t* err);
/* Its message (empty string if none); valid until the next call that takes `err`, or ckpt_error_free. */
CKPT_API const char* ckpt_error_message(const ckpt_error_t* err);

/* ------------------------------------------------------------------------------------------------------------ */
/* Context: one per rank                                                                                          */
/* ------------------------------------------------------------------------------------------------------------ */

typedef struct ckpt_context ckpt_context_t;

/* A user-supplied allgather (for jobs that already have MPI, JAX or their own bootstrap): every rank calls it with
 * `size` bytes at `send`; it must write world_size * size bytes to `recv`, rank r's bytes at offset r * size.
 * `size` is the same on every rank for a given call. Return 0 on success, anything else on failure. */
typedef int32_t (*ckpt_allgather_fn)(void* user, const void* send, uint64_t size, void* recv);

/* The job's own collectives, for jobs that already run MPI, NCCL or a coordination service: handed to
 * ckpt_context_create, they carry all of ckpt's collective metadata (plans, agreements, transport addresses), so
 * that at scale it travels over the engine the cluster already runs and ckpt's TCP store only bootstraps (its
 * address is spread with `allgatherv`) and carries each rank's save report to rank 0. Each function is collective:
 * ckpt calls it on every rank in the same order, from the thread that called the ckpt function (never from a
 * thread of its own), with the sizes every rank needs already known. Byte counts and offsets are uint64_t; each
 * returns 0 on success, anything else on failure. A call may block as long as the job's engine does: ckpt cannot
 * bound it with its timeout. Since CKPT_2. */
typedef struct ckpt_collectives {
  uint32_t struct_size;
  void* user; /* passed to every function */
  /* This rank's `send_size` bytes to every rank: rank r's `recv_sizes[r]` bytes land at `recv + recv_offsets[r]`. */
  int32_t (*allgatherv)(void* user, const void* send, uint64_t send_size, void* recv, const uint64_t* recv_sizes,
                        const uint64_t* recv_offsets);
  /* `send_sizes[r]` bytes at `send + send_offsets[r]` to rank r; rank r's `recv_sizes[r]` bytes land at
   * `recv + recv_offsets[r]`. */
  int32_t (*alltoallv)(void* user, const void* send, const uint64_t* send_sizes, const uint64_t* send_offsets,
                       void* recv, const uint64_t* recv_sizes, const uint64_t* recv_offsets);
  /* Rank `root`'s `size` bytes at `buffer` into `buffer` on every rank. */
  int32_t (*broadcast)(void* user, void* buffer, uint64_t size, int32_t root);
  int32_t (*barrier)(void* user);
} ckpt_collectives;
#define CKPT_COLLECTIVES_INIT \
  { (uint32_t)sizeof(ckpt_collectives), NULL, NULL, NULL, NULL, NULL }
/* As CKPT_COLLECTIVES_INIT (see ckpt_context_options_init for the rules). Since CKPT_2. */
CKPT_API int32_t ckpt_collectives_init(ckpt_collectives* collectives, uint32_t struct_size);

#define CKPT_LOG_ERROR 0
#define CKPT_LOG_WARNING 1
#define CKPT_LOG_INFO 2 /* among them one line per committed save and per load: size, time, GB/s */
/* Receives the library's log lines of every level, from the thread of the call that logs or from the context's
 * save thread (a committed save's line). NULL in the options means standard error, up to the level CKPT_LOG_LEVEL
 * names (error, warning or info, or 0, 1 or 2; default warning). */
typedef void (*ckpt_log_fn)(void* user, int32_t level, const char* message);

/* How ranks exchange tensor data during a load, so that each stored byte is read once. */
#define CKPT_TRANSPORT_DEFAULT -1 /* CKPT_TRANSPORT (auto, none, ucx, nccl), else AUTO */
#define CKPT_TRANSPORT_AUTO 0     /* UCX where it loads, else NONE; also NCCL, as below, where it loads */
#define CKPT_TRANSPORT_NONE 1     /* no exchange: every rank reads what it needs itself */
#define CKPT_TRANSPORT_UCX 2      /* UCX (shared memory on one host, TCP across hosts); device memory via the host */
/* NCCL for loads whose destinations are, on every rank, CUDA memory of one device per rank: pieces go from device
 * to device, the communicator made by the first such load on that device. Other loads use UCX as AUTO does. */
#define CKPT_TRANSPORT_NCCL 3

typedef struct ckpt_context_options {
  uint32_t struct_size;
  /* -1: take rank, world size and local rank from the launcher's environment: torchrun (RANK, WORLD_SIZE,
   * LOCAL_RANK), OpenMPI (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK), MPICH and Intel MPI (PMI_RANK, PMI_SIZE,
   * MPI_LOCALRANKID) or SLURM (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID), in that order. With none of them set, a
   * single-rank job. */
  int32_t rank;
  int32_t world_size;
  int32_t local_rank;
  /* The TCP store's address, hosted by rank 0. NULL: MASTER_ADDR, else under SLURM the step's first node, else
   * 127.0.0.1. -1: CKPT_STORE_PORT, else MASTER_PORT + 1 (the launcher's own store holds MASTER_PORT), else under
   * SLURM 20000 + job id % 10000, else 29501. Every connection proves it knows the job's secret: CKPT_JOB_SECRET
   * (ckpt-launch sets it), else one made by rank 0 and spread by the allgather below, else one rank 0 writes in a
   * file only its user can read, which ranks on its node read (ranks on other nodes then need CKPT_JOB_SECRET). */
  const char* store_host;
  int32_t store_port;
  /* Every wait on a peer fails with CKPT_E_TIMEOUT after this long. 0: CKPT_TIMEOUT_MS or 300000. */
  uint32_t timeout_ms;
  /* When set, used once (collectively, inside ckpt_context_create) to spread the address of the store rank 0
   * starts on a free port, so that no MASTER_ADDR/MASTER_PORT is needed; store_host, if set, is the address rank 0
   * binds and the others connect to. */
  ckpt_allgather_fn allgather;
  void* allgather_user;
  /* Ranks with the same node name share a host (its disks, NICs). NULL: CKPT_NODE_NAME, else the host name. */
  const char* node_name;
  ckpt_log_fn log;
  void* log_user;
  /* I/O worker processes per rank (spawned now, never forked). -1: CKPT_IO_WORKERS, else 2. 0: threads of this
   * process instead (no helper executable needed). */
  int32_t io_workers;
  /* Bytes of the staging arena: shared memory, committed when the context is created and reused by every save
   * and load. 0: CKPT_ARENA_BYTES, else an eighth of the machine's memory (clamped to 256 MiB..8 GiB) divided among
   * the ranks on this host. States larger than the arena are staged in a pipeline. */
  uint64_t arena_bytes;
  /* CKPT_TRANSPORT_*. A transport asked for by name that cannot load fails ckpt_context_create with
   * CKPT_E_UNSUPPORTED. */
  int32_t transport;
  /* The job's collectives (see ckpt_collectives), read during ckpt_context_create; every function set. NULL: the
   * TCP store carries ckpt's collectives. Not together with `allgather`. Since CKPT_2. */
  const ckpt_collectives* collectives;
} ckpt_context_options;

#define CKPT_CONTEXT_OPTIONS_INIT                                                                         \
  {                                                                                                       \
    (uint32_t)sizeof(ckpt_context_options), -1, -1, -1, NULL, -1, 0, NULL, NULL, NULL, NULL, NULL, -1, 0, \
        CKPT_TRANSPORT_DEFAULT, NULL                                                                      \
  }
/* The *_init functions fill the first `struct_size` bytes of a struct exactly as its *_INIT macro does (with
 * struct_size = the size passed): pass sizeof of the caller's struct. Returns CKPT_OK, CKPT_E_INVALID_ARGUMENT
 * (the pointer is NULL, or struct_size is smaller than any version of the struct) or CKPT_E_UNSUPPORTED
 * (struct_size is larger than this library's struct: the program was built against a newer ckpt.h than the
 * library it runs with); on failure nothing is written. */
CKPT_API int32_t ckpt_context_options_init(ckpt_context_options* opts, uint32_t struct_size);

/* Collective. Creates this rank's context, connects to the other ranks (rank 0 hosts the store and waits up to
 * the timeout for all of them; a one-rank job needs no network), and starts its I/O workers. Returns CKPT_OK,
 * CKPT_E_INVALID_ARGUMENT (bad rank/world/address), CKPT_E_TIMEOUT (a rank never connected: the message names it),
 * CKPT_E_IO (cannot bind or connect), CKPT_E_NOT_FOUND (the ckpt-io-worker executable is missing on some rank:
 * the message names it), CKPT_E_UNSUPPORTED (a transport asked for by name cannot be used; or the hard limit on
 * open files, RLIMIT_NOFILE, cannot hold this rank's connections, before anything connects: 3 descriptors per rank
 * at rank 0, 1 per rank elsewhere; the message says how many. A soft limit below those plus 256 is raised to the
 * hard one, as the usual soft default of 1,024 would not hold a job of a few hundred ranks). */
CKPT_API int32_t ckpt_context_create(const ckpt_context_options* opts, ckpt_context_t** out, ckpt_error_t* err);
/* Not collective, but every rank should free its context at the end; a rank that exits early is seen as dead. */
CKPT_API void ckpt_context_free(ckpt_context_t* ctx);
CKPT_API int32_t ckpt_context_rank(const ckpt_context_t* ctx);
CKPT_API int32_t ckpt_context_world_size(const ckpt_context_t* ctx);
CKPT_API int32_t ckpt_context_local_rank(const ckpt_context_t* ctx);

/* Counters of this rank's work since the context was created; for monitoring and benchmarks. */
typedef struct ckpt_context_stats {
  uint32_t struct_size;
  uint32_t io_workers;      /* worker processes (0: in-process threads) */
  uint64_t arena_bytes;     /* the staging arena's size */
  uint64_t saves_committed; /* saves whose request succeeded */
  uint64_t plans_computed;  /* saves that exchanged and validated the full state */
  uint64_t plans_reused;    /* saves that reused the previous plan (unchanged structure on every rank) */
  uint64_t bytes_staged;    /* bytes copied into the arena by saves */
  uint64_t bytes_written;   /* bytes this rank's workers (or in-place saves) wrote to data files */
  uint64_t bytes_read;      /* bytes this rank read from data files during loads */
  uint64_t bytes_sent;      /* tensor bytes this rank sent to other ranks during loads */
  uint64_t bytes_received;  /* tensor bytes this rank received from other ranks during loads */
  int32_t transport;        /* NCCL once a load has used it, else the host memory transport: NONE or UCX */
  uint64_t exchange_ns;     /* time spent moving tensor data between ranks during loads (waits for peers included) */
  /* Since CKPT_2: the bytes of ckpt's collective metadata this rank sent and received (plans, agreements,
   * addresses), over the TCP store or the job's collectives, and the collectives that went through the store (0
   * when the job's collectives carry them). */
  uint64_t control_bytes_sent;
  uint64_t control_bytes_received;
  uint64_t store_collectives;
  /* How the last successful load on this context read its tensors (CKPT_LOAD_READS_ONCE or _OWN; 0 before any, see
   * ckpt_load), and its read amplification x 1000: the bytes of tensor data every rank read, summed after the load,
   * over the stored bytes of the tensors any rank asked for (1000 for a restore read once + exchange, which reads each
   * needed block once, or once per group of 32 ranks where more need it; less where the ranks asked for parts of the
   * tensors only). */
  uint64_t last_load_reads;
  uint64_t last_load_read_amplification_milli;
} ckpt_context_stats;
/* ckpt_context_stats.last_load_reads: read once + exchange, or every rank reading its own pieces. */
#define CKPT_LOAD_READS_ONCE 1
#define CKPT_LOAD_READS_OWN 2
#define CKPT_CONTEXT_STATS_INIT \
  { (uint32_t)sizeof(ckpt_context_stats), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, CKPT_TRANSPORT_NONE, 0, 0, 0, 0, 0, 0 }

CKPT_API int32_t ckpt_context_stats_get(const ckpt_context_t* ctx, ckpt_context_stats* stats, ckpt_error_t* err);

/* ------------------------------------------------------------------------------------------------------------ */
/* State: what this rank holds (for a save) or wants (for a load)                                                */
/* ------------------------------------------------------------------------------------------------------------ */

#define CKPT_MAX_NDIM 8

/* Data types: every fixed-width safetensors dtype, then the rest of ml_dtypes'. Pinned numbering. */
#define CKPT_DTYPE_BOOL 1
#define CKPT_DTYPE_U8 2
#define CKPT_DTYPE_I8 3
#define CKPT_DTYPE_I16 4
#define CKPT_DTYPE_U16 5
#define CKPT_DTYPE_I32 6
#define CKPT_DTYPE_U32 7
#define CKPT_DTYPE_I64 8
#define CKPT_DTYPE_U64 9
#define CKPT_DTYPE_F16 10
#define CKPT_DTYPE_BF16 11
#define CKPT_DTYPE_F32 12
#define CKPT_DTYPE_F64 13
#define CKPT_DTYPE_C64 14
#define CKPT_DTYPE_F8_E4M3 15 /* e4m3fn: finite, one NaN (safetensors F8_E4M3, ml_dtypes float8_e4m3fn) */
#define CKPT_DTYPE_F8_E5M2 16
/* The other element types of ml_dtypes and JAX. Sub-byte types are stored unpacked, one element per byte in its
 * low bits, as numpy holds them. */
#define CKPT_DTYPE_C128 17
#define CKPT_DTYPE_F8_E4M3FNUZ 18
#define CKPT_DTYPE_F8_E5M2FNUZ 19
#define CKPT_DTYPE_F8_E4M3B11FNUZ 20
#define CKPT_DTYPE_F8_E3M4 21
#define CKPT_DTYPE_F8_E4M3_IEEE 22 /* ml_dtypes float8_e4m3: IEEE-style, with infinities */
#define CKPT_DTYPE_F8_E8M0 23      /* e8m0fnu, the MX scale type (safetensors F8_E8M0) */
#define CKPT_DTYPE_F4_E2M1 24      /* float4_e2m1fn, one per byte */
#define CKPT_DTYPE_I4 25           /* one per byte */
#define CKPT_DTYPE_U4 26
#define CKPT_DTYPE_I2 27
#define CKPT_DTYPE_U2 28

/* Size in bytes of one element, 0 for an unknown dtype. */
CKPT_API uint32_t ckpt_dtype_size(int32_t dtype);
/* "F32", "BF16", ...; "?" for an unknown dtype. */
CKPT_API const char* ckpt_dtype_name(int32_t dtype);

#define CKPT_MEMORY_HOST 0
#define CKPT_MEMORY_CUDA 1

/* The shard holds the row-major range [flat_start, flat_end) of its box (global_offset, local_shape), as a
 * distributed optimizer does; `data` holds just those elements. */
#define CKPT_SHARD_FLATTENED 0x1u
/* Load only: the checkpoint's global shape may differ from this one; elements the checkpoint lacks are zeroed,
 * elements this shape lacks are dropped. */
#define CKPT_SHARD_ALLOW_SHAPE_MISMATCH 0x2u
/* Load only: the checkpoint may store this tensor in another floating dtype (F16, BF16, F32 or F64) than `dtype`;
 * the load converts each element: round to nearest, ties to even, overflow to infinity, NaNs kept (made quiet).
 * `data` and `data_size` are in this shard's dtype. Other dtype differences (integers, complex, float8) fail with
 * CKPT_E_MISMATCH, flag or not. The load holds the shard's stored bytes in host memory until it converts them. */
#define CKPT_SHARD_ALLOW_DTYPE_CAST 0x4u
/* Save only: this tensor's bytes are stored compressed, as CKPT_SAVE_COMPRESS stores every tensor's, in any save to
 * storage on a file system that is staged (a save in place, to a memory tier or to object storage stores them as
 * they are). The rank that writes a box decides by its own shard's flag. */
#define CKPT_SHARD_COMPRESS 0x8u

typedef struct ckpt_tensor_shard {
  uint32_t struct_size;
  const char* key;               /* the global tensor's name: valid UTF-8, as every key */
  int32_t dtype;                 /* CKPT_DTYPE_* */
  uint32_t ndim;                 /* 0 (a scalar) to CKPT_MAX_NDIM */
  const uint64_t* global_shape;  /* ndim extents of the whole tensor */
  const uint64_t* local_shape;   /* ndim extents of the box this rank holds */
  const uint64_t* global_offset; /* ndim coordinates of the box's first element */
  /* Replicas of one box (data parallelism) are written once; the all-zero id marks the main replica. Optional. */
  uint32_t replica_ndim;
  const uint32_t* replica_id;
  uint32_t flags;      /* CKPT_SHARD_* */
  uint64_t flat_start; /* with CKPT_SHARD_FLATTENED, in elements of the box */
  uint64_t flat_end;
  int32_t memory_kind; /* CKPT_MEMORY_HOST, or CKPT_MEMORY_CUDA (with device) */
  int32_t device;
  void* data;         /* row-major elements of the box (or of the flattened range) */
  uint64_t data_size; /* bytes at data; must equal elements * dtype size */
} ckpt_tensor_shard;

#define CKPT_TENSOR_SHARD_INIT \
  { (uint32_t)sizeof(ckpt_tensor_shard), NULL, 0, 0, NULL, NULL, NULL, 0, NULL, 0, 0, 0, CKPT_MEMORY_HOST, 0, NULL, 0 }
CKPT_API int32_t ckpt_tensor_shard_init(ckpt_tensor_shard* shard, uint32_t struct_size);

typedef struct ckpt_state ckpt_state_t;

/* Returns CKPT_OK or CKPT_E_NO_MEMORY. */
CKPT_API int32_t ckpt_state_create(ckpt_state_t** out, ckpt_error_t* err);
CKPT_API void ckpt_state_free(ckpt_state_t* state);

/* Registers one shard. The shape, offset and flag arrays are copied; `data` is not: it must stay valid until the save
 * returns (staged; with CKPT_SAVE_COPY_ON_WRITE until its request finishes) or the load completes. Checks everything it
 * can locally and returns CKPT_E_INVALID_ARGUMENT naming the key (a key that is empty or not valid UTF-8, bad dtype or
 * ndim, box out of bounds, wrong data_size, flattened range outside the box, a key registered twice with the same box,
 * CUDA memory_kind with host data or a device that does not exist) or CKPT_E_UNSUPPORTED (CUDA memory where the CUDA
 * runtime or a device is missing). Shards in CUDA memory are copied device-to-host into the staging arena on a side
 * stream when saved, and host-to-device when loaded; ckpt never changes the calling thread's current device. */
CKPT_API int32_t ckpt_state_add_tensor(ckpt_state_t* state, const ckpt_tensor_shard* shard, ckpt_error_t* err);

/* Registers opaque bytes sharded over an object grid (not reshardable: a load asks for the same grid). For a save,
 * `data` holds `size` bytes (not copied until the save; with CKPT_SAVE_COPY_ON_WRITE valid until its request finishes).
 * For a load, `data` may be NULL: the bytes are then kept in the state (ckpt_state_object); a non-NULL `data` must have
 * exactly the saved size. */
CKPT_API int32_t ckpt_state_add_object(ckpt_state_t* state, const char* key, uint32_t grid_ndim,
                                       const uint64_t* grid_shape, const uint64_t* grid_index, void* data,
                                       uint64_t size, ckpt_error_t* err);

/* Registers replicated bytes (config, step, RNG state); copied now. Saved once, from rank 0. Every load gives
 * every rank all the common entries of the checkpoint (ckpt_state_common). */
CKPT_API int32_t ckpt_state_add_common(ckpt_state_t* state, const char* key, const void* data, uint64_t size,
                                       ckpt_error_t* err);

/* After a load: the common bytes stored under `key` (or under the key the load's key_map maps `key` to), owned by the
 * state. CKPT_E_NOT_FOUND if absent. */
CKPT_API int32_t ckpt_state_common(const ckpt_state_t* state, const char* key, const void** data, uint64_t* size,
                                   ckpt_error_t* err);
/* After a load: the bytes of an object registered with data == NULL, owned by the state. */
CKPT_API int32_t ckpt_state_object(const ckpt_state_t* state, const char* key, const uint64_t* grid_index,
                                   const void** data, uint64_t* size, ckpt_error_t* err);

/* ------------------------------------------------------------------------------------------------------------ */
/* Save                                                                                                           */
/* ------------------------------------------------------------------------------------------------------------ */

typedef struct ckpt_request ckpt_request_t;

/* The phases a save or a load reports to its progress callback, in this order (a phase may be skipped). */
#define CKPT_PHASE_PLANNING 0   /* save, load: agreeing with the other ranks on who writes or reads what */
#define CKPT_PHASE_STAGING 1    /* save: copying this rank's bytes into the staging arena (ckpt_save blocks) */
#define CKPT_PHASE_WRITING 2    /* save: the I/O workers write them until they are durable */
#define CKPT_PHASE_COMMITTING 3 /* save: waiting for every rank's writes, then the manifest and the rename */
#define CKPT_PHASE_COMMITTED 4  /* save: committed; done == total */
#define CKPT_PHASE_READING 5    /* load: filling this rank's tensor buffers (read here or received from a rank) */
#define CKPT_PHASE_LOADED 6     /* load: every rank's buffers are filled; done == total */
#define CKPT_PHASE_FAILED 7     /* save, load: failed (the request or the call says why) */
/* A save's or a load's progress on this rank: `done` of `total` bytes of this rank in `phase` (0 of 0 in PLANNING;
 * in STAGING, WRITING and COMMITTING the bytes this rank writes, its share of the checkpoint; in READING the bytes
 * of its registered tensor buffers). Called once as each phase starts, then at most every 100 ms while `done`
 * grows, and last with COMMITTED, LOADED or FAILED (unless the call fails at once on its arguments). Calls for one
 * request never overlap; none holds a lock of ckpt's. The callback should return quickly (the save or load waits
 * for it) and may call ckpt_request_stats_get, but must not wait for the request. */
typedef void (*ckpt_progress_fn)(void* user, int32_t phase, uint64_t done, uint64_t total);

/* The tiers a save can go to. The memory tier is the node's ckpt-agent: a process of this user and job (started by
 * the first save to memory on the node when none runs, detached so that it outlives the trainers) that keeps the
 * newest complete in-memory checkpoint in shared memory, plus the one being written. A memory save blocks for the
 * same staging copy as any save (the I/O workers copy into the agent's memory after it, not while it runs, so as not
 * to slow it) and completes once the checkpoint is committed in memory; the agent writes it to
 * its storage path (and commits it there atomically) for CKPT_TIER_BOTH, and for the newest one that is not on
 * storage yet when a trainer dies. Across nodes each node's agent holds its ranks' files and copies them to
 * CKPT_MEMORY_REPLICAS other nodes (default 1) before the save completes, and the agents persist together, node
 * 0's committing. A load of that path, or ckpt_manager_load_latest, reads the memory copy when every node holds it
 * whole, after each node's agent fetched what it lacks from its peers (a replaced node), and storage otherwise. The
 * job needs an identity, the same on every rank and across restarts: CKPT_JOB_ID (or SLURM_JOB_ID,
 * TORCHELASTIC_RUN_ID); CKPT_AGENT_BUDGET_BYTES bounds the agent's memory (default: half of the node's),
 * CKPT_AGENT_IDLE_S how long it waits for a restarted job after the trainers died (default 600). */
#define CKPT_TIER_STORAGE 0 /* the checkpoint directory `path` */
#define CKPT_TIER_MEMORY 1  /* the agent's memory only; storage sees it only if the trainers die */
#define CKPT_TIER_BOTH 2    /* the agent's memory, then `path` on storage, written by the agent in the background */

/* Bits of ckpt_save_options.flags. CKPT_SAVE_IN_PLACE: write this rank's bytes straight from the registered buffers
 * instead of copying them into the staging arena for the I/O workers. ckpt_save then returns once this rank's bytes
 * are durable (the buffers must not change until it returns; the request still finishes with the commit, as any
 * save's), so it suits a save the caller waits for anyway: the last one of a job, or a blocking checkpoint. It saves
 * the staging copy, its memory traffic and its CPU time. Host buffers are written from where they lie when the file
 * system allows it: buffered file systems always; with direct I/O when the bytes start as the device's alignment asks
 * (statx's dio_mem_align: often 4 bytes on NVMe drives) and for whole pages. What cannot be (device memory, a box that
 * is not one run of its buffer, an unaligned start, a tensor's last bytes short of a page) is copied through the arena
 * and written by the rank too. */
#define CKPT_SAVE_IN_PLACE 1u
/* CKPT_SAVE_COPY_ON_WRITE: ckpt_save returns once this rank's host buffers that it writes are write-protected
 * (Linux userfaultfd), before any byte is copied; the copy into the staging arena then runs on a thread of its own,
 * beside the writes. A page the trainer writes before it was copied is copied first by ckpt's fault handler thread
 * (the writing thread waits for that, about 0.2 ms per 2 MiB), then released; pages are released as they are
 * copied. The checkpoint holds every byte as it was at the call, as for any save. Limits: host memory only (a state
 * with device shards stages all of it at the call); only the whole pages inside the bytes a tensor's save reads are
 * protected, the partial pages at both ends are copied at the call; the buffers must stay mapped until the request
 * finishes (a buffer unmapped, released with madvise or moved with mremap before ckpt copied it fails the save, the
 * message naming the tensor; freeing it may do so); a save issued meanwhile waits for this one's copy first. The call
 * costs the kernel's walk of the page tables (about 20 ms per GiB of 4 KiB pages, 0.1 ms of huge pages): after each
 * such save a low-priority thread collapses the protected buffers into transparent huge pages (MADV_COLLAPSE, unless
 * the system disables them), pausing while a save protects, so that the next saves block for well under 1 ms.
 * Fallbacks, logged at CKPT_LOG_INFO: where userfaultfd is refused (once per context; the sysctl
 * vm.unprivileged_userfaultfd=0 leaves it to user-mode faults, which suffice; seccomp; kernels before 6.4, which
 * lack UFFD_FEATURE_WP_UNPOPULATED) the save stages at the call as without the flag; a buffer the kernel cannot
 * protect (a file-backed mapping) is copied at the call, into memory of its own. CKPT_E_INVALID_ARGUMENT with
 * CKPT_SAVE_IN_PLACE or a tier other than CKPT_TIER_STORAGE, on every rank. */
#define CKPT_SAVE_COPY_ON_WRITE 2u
/* CKPT_SAVE_CHECK_REPLICAS: the ranks holding replicas of a box (data parallelism) check each other before the
 * save commits. The rank that writes a box checksums it while staging it, as every save does; each other holder
 * computes the block checksums of its own copy (XXH3, 64-bit, per block of 1 MiB), and rank 0 compares them with the
 * written ones before the commit. Any difference fails the save on every rank with CKPT_E_CORRUPT and commits
 * nothing: the message names the tensor (or object cell), the box, the blocks that differ and which ranks agree
 * with which, the written copy marked, so that a rank whose memory went bad is found before its bytes become the
 * checkpoint. The replicas are checksummed as they were at the call: after it, on the save's thread, their host
 * buffers write-protected meanwhile as CKPT_SAVE_COPY_ON_WRITE's are (a page written before it was read is copied
 * first), so that they must stay mapped until the request finishes; during the call, on a thread beside the
 * staging, where that cannot be (userfaultfd refused, device memory, CKPT_SAVE_IN_PLACE, a memory tier). The same
 * on every rank (CKPT_E_MISMATCH otherwise). */
#define CKPT_SAVE_CHECK_REPLICAS 4u
/* CKPT_SAVE_INCREMENTAL: write only what changed since a base checkpoint. Every tensor box the save writes is hashed
 * (SHA-256 per block of 1 MiB, at the call, on up to 8 threads; about 0.5 s per GiB and core) and the digests go
 * into the manifest, so that a later save can name this one as its base. With a base (the options' `base`, or for
 * ckpt_manager_save by default the latest committed step of the root), each box's rows (slabs along its first
 * dimension longer than 1) whose blocks all hash as the base's blocks of the same box are not written: the new
 * manifest refers to the base's bytes, in the checkpoint that physically holds them (never a chain through
 * checkpoints). Equality is decided by SHA-256, not by the 64-bit block checksums, which find damage but are not
 * collision-resistant. The result is one logical checkpoint for ckpt_load, the reader, verify and export; it needs
 * the checkpoints it refers to (ckpt_reader_info's format_major is 2 then): deleting one by hand makes loads and
 * verify fail with CKPT_E_CORRUPT naming it, and a manager's retention keeps every step a kept step refers to.
 * The base must be a committed checkpoint in the same directory as `path`, saved with this flag (a base without
 * digests, or a tensor whose box, dtype or shape changed, is written in full). With CKPT_SAVE_CHECK_REPLICAS the
 * replicas are compared with the writer's whole copy, written or not. CKPT_E_INVALID_ARGUMENT with a tier other
 * than CKPT_TIER_STORAGE, on object storage, or with a `base` but not the flag; CKPT_E_NOT_FOUND when the base
 * holds no checkpoint. */
#define CKPT_SAVE_INCREMENTAL 8u
/* CKPT_SAVE_COMPRESS: lossless compression of everything the save writes. Each block of 1 MiB is compressed on its
 * own, in the I/O workers as they write, so that ranged and resharded loads read and decode only the blocks they
 * need: floating-point tensors (F16, BF16, F32, F64 and the complex ones) with each element's bytes grouped by
 * significance (the exponent bytes apart from the mantissa bytes) and zstd's fastest level, whose Huffman coding
 * shrinks the exponent bytes (BF16 weights by about 1.5x, F32 by about 1.2x), other bytes with zstd's level 1. A
 * block that does not shrink is stored as it is; checksums are of the bytes uncompressed, and loads verify each
 * block once decoded. Worth it where storage is slower than about a GiB/s per I/O worker (the workers compress at
 * about 1.4 GiB/s each on BF16). A compressed checkpoint is format 3 (ckpt_reader_info's format_major): libraries
 * before it refuse it. Per tensor: CKPT_SHARD_COMPRESS. CKPT_E_INVALID_ARGUMENT with CKPT_SAVE_IN_PLACE, a tier
 * other than CKPT_TIER_STORAGE, or on object storage. Combined with CKPT_SAVE_INCREMENTAL, a compressed box of the
 * base is referred to only where the whole box is unchanged. */
#define CKPT_SAVE_COMPRESS 16u

typedef struct ckpt_save_options {
  uint32_t struct_size;
  /* User metadata stored in the manifest (readable with ckpt_reader_metadata); taken from rank 0. Keys and values
   * are valid UTF-8 (CKPT_E_INVALID_ARGUMENT otherwise). */
  uint32_t metadata_count;
  const char* const* metadata_keys;
  const char* const* metadata_values;
  /* Optional. PLANNING, STAGING and WRITING's first call come from the thread calling ckpt_save, before it
   * returns; the rest from the context's save thread, ending before the request finishes (so never after
   * ckpt_request_free). With CKPT_SAVE_COPY_ON_WRITE STAGING is reported once, as protection starts: the copy runs
   * after the call, during WRITING, whose `done` counts the bytes written. */
  ckpt_progress_fn progress;
  void* progress_user;
  /* Where the checkpoint goes: CKPT_TIER_STORAGE (the default), CKPT_TIER_MEMORY or CKPT_TIER_BOTH (above); 64
   * bits wide so that the struct holds no padding. */
  uint64_t tier;
  /* CKPT_SAVE_* bits (above); 0 by default: an asynchronous save through the staging arena. */
  uint64_t flags;
  /* ckpt_manager_save only (ckpt_save refuses them with CKPT_E_INVALID_ARGUMENT); every rank passes its own, rank
   * 0's are stored. `metrics`: the text of a JSON object of at most 1 MiB stored with the step, which it commits
   * with (ckpt_manager_metrics reads it back); NULL: none. `best_value`, when `has_best_value` is 1: the step's
   * score for keep_best (finite), which a caller computes from its metrics as it likes. Neither goes through the
   * memory tier, whose agents copy the checkpoint alone to storage: a step saved there with either is refused. */
  const char* metrics;
  double best_value;
  uint64_t has_best_value; /* 0 or 1; 64 bits wide so that the struct holds no padding */
  /* CKPT_SAVE_INCREMENTAL: the checkpoint directory this save writes only the changes against, beside `path`;
   * NULL: none for ckpt_save (a full save that records digests), the latest committed step for ckpt_manager_save.
   * Rank 0's is every rank's. */
  const char* base;
} ckpt_save_options;

#define CKPT_SAVE_OPTIONS_INIT \
  { (uint32_t)sizeof(ckpt_save_options), 0, NULL, NULL, NULL, NULL, CKPT_TIER_STORAGE, 0, NULL, 0.0, 0, NULL }
CKPT_API int32_t ckpt_save_options_init(ckpt_save_options* opts, uint32_t struct_size);

/* Collective. Saves `state` (the same structure of keys on every rank is not required; each rank registers what
 * it holds) as the checkpoint directory `path` on storage every rank can reach. Before any byte is written, all
 * ranks agree that every tensor's shards tile its global shape exactly (no gap, no overlap, the same dtype and
 * global shape everywhere); otherwise every rank gets CKPT_E_MISMATCH naming the key and the ranks. Replicated
 * boxes are written once. CKPT_E_ALREADY_EXISTS if `path` is already a checkpoint.
 *
 * Asynchronous: ckpt_save returns as soon as this rank's bytes are copied into the staging arena (with
 * CKPT_SAVE_IN_PLACE in the options' flags: written from the buffers and durable); from then on the registered
 * buffers may be modified. The I/O workers write in the background, and the commit (manifest, fsync,
 * atomic rename) happens once every rank's writes are durable, with no further call needed from the training
 * loop. `*request` reports the outcome (ckpt_request_test / ckpt_request_wait), the same on every rank: `path`
 * exists only if the request succeeds; a failure anywhere (a dead rank or worker, a full disk) leaves no
 * directory at `path` (on S3: no MANIFEST) and never touches other checkpoints. Saves may be issued back to back;
 * each commits in order. While the structure of the state (keys, boxes, dtypes) is unchanged on every rank, the
 * plan of the previous save is reused. Once it commits, each rank logs a CKPT_LOG_INFO line with its bytes, time
 * and GB/s; ckpt_request_stats_get gives the figures, and the options' progress callback follows the save as it
 * goes.
 * With the options' tier CKPT_TIER_MEMORY or CKPT_TIER_BOTH the checkpoint is committed in the node's agent's
 * memory instead (see CKPT_TIER_*), and the request succeeds once it is complete there; CKPT_E_NO_SPACE when it
 * exceeds the agent's budget, CKPT_E_UNSUPPORTED when the ranks span several nodes, CKPT_E_INVALID_ARGUMENT when
 * the job has no identity, CKPT_E_PEER_FAILED when the agent died. */
CKPT_API int32_t ckpt_save(ckpt_context_t* ctx, ckpt_state_t* state, const char* path, const ckpt_save_options* opts,
                           ckpt_request_t** request, ckpt_error_t* err);

/* CKPT_OK if the request finished successfully, CKPT_E_IN_PROGRESS if it is still running, or the status that
 * failed it (the same on every rank). Never blocks. */
CKPT_API int32_t ckpt_request_test(ckpt_request_t* request, ckpt_error_t* err);
/* Blocks until the request finishes or `timeout_ms` passes (0: no limit beyond the context's timeout); returns as
 * ckpt_request_test. */
CKPT_API int32_t ckpt_request_wait(ckpt_request_t* request, uint32_t timeout_ms, ckpt_error_t* err);
/* Frees the request; an unfinished one is waited for first. */
CKPT_API void ckpt_request_free(ckpt_request_t* request);

/* What a save has done on this rank: a snapshot while it runs, final once it finished. The phases follow one
 * another: planning, staging (the two make blocking_ns, what ckpt_save cost its caller), writing, committing;
 * total_ns spans them all. A phase still running counts until now, one not reached counts 0. This rank's save
 * throughput in GB/s is bytes_written / total_ns (bytes per nanosecond); bytes_written / (blocking_ns +
 * writing_ns) leaves out the wait for the other ranks and the commit. A save written in place (CKPT_SAVE_IN_PLACE)
 * writes during its staging phase: bytes_staged counts only what went through the arena, bytes_written all. A
 * copy-on-write save (CKPT_SAVE_COPY_ON_WRITE) stages after its call, during writing: blocking_ns is planning and
 * write protection, and staging_ns runs from the call's return. */
typedef struct ckpt_request_stats {
  uint32_t struct_size;
  uint32_t committed;       /* 1 once the save committed, else 0 (running or failed) */
  uint64_t state_bytes;     /* tensor and object bytes this rank registered, replicas included */
  uint64_t bytes_to_write;  /* what this rank writes: its share of the unique bytes (rank 0: with large common) */
  uint64_t bytes_staged;    /* copied into the staging arena so far */
  uint64_t bytes_written;   /* written by the I/O workers (or in place) so far (all durable once writing ends) */
  uint64_t bytes_committed; /* bytes_written once committed, else 0 */
  uint64_t files_written;   /* data files this rank finished: written, synced and closed */
  uint64_t planning_ns;     /* from the ckpt_save call until the ranks agreed on the plan */
  uint64_t staging_ns;      /* copying into the arena (waiting for room in it included), or writing in place */
  uint64_t blocking_ns;     /* the ckpt_save call */
  uint64_t writing_ns;      /* from ckpt_save's return until this rank's data is durable */
  uint64_t committing_ns;   /* from then until the request finished: every rank's reports, manifest, rename */
  uint64_t total_ns;        /* from the ckpt_save call until the request finished */
} ckpt_request_stats;
#define CKPT_REQUEST_STATS_INIT \
  { (uint32_t)sizeof(ckpt_request_stats), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/* Fills `stats` (at most its struct_size bytes) with the save's figures on this rank. Any thread may call it at any
 * time until ckpt_request_free, also while another thread waits for the request. CKPT_OK or
 * CKPT_E_INVALID_ARGUMENT (a NULL pointer, or a struct_size below 4). */
CKPT_API int32_t ckpt_request_stats_get(const ckpt_request_t* request, ckpt_request_stats* stats, ckpt_error_t* err);

/* ------------------------------------------------------------------------------------------------------------ */
/* Load                                                                                                           */
/* ------------------------------------------------------------------------------------------------------------ */

#define CKPT_STRICT_FAIL 0   /* fail the load with CKPT_E_MISMATCH */
#define CKPT_STRICT_LOG 1    /* log a warning naming the keys and go on */
#define CKPT_STRICT_IGNORE 2 /* go on silently */

typedef struct ckpt_load_options {
  uint32_t struct_size;
  /* A key this rank asks for that the checkpoint lacks. */
  int32_t missing_keys;
  /* A tensor or object key the checkpoint has that no rank asks for. */
  int32_t unexpected_keys;
  /* Optional (ckpt_progress_fn): PLANNING, READING, then LOADED or FAILED, all from the thread calling ckpt_load,
   * before it returns. */
  ckpt_progress_fn progress;
  void* progress_user;
  /* Optional: where this rank's keys lie in the checkpoint, for a state whose keys changed since the save (a renamed
   * layer, another framework's paths). key_map_count pairs: key_map[2*i] is a key this rank registers (a tensor's,
   * an object's, or a common entry's it reads back), key_map[2*i+1] the key the checkpoint has for it. A registered
   * key the map does not name is looked up as itself. After the load, ckpt_state_common also answers a mapped common
   * entry under the registered key. A key mapped twice, or two keys mapped to the same checkpoint key, is
   * CKPT_E_INVALID_ARGUMENT naming them. Messages about missing keys name both (`'a' (looked up as 'x')`). */
  const char* const* key_map;
  uint64_t key_map_count;
} ckpt_load_options;

#define CKPT_LOAD_OPTIONS_INIT \
  { (uint32_t)sizeof(ckpt_load_options), CKPT_STRICT_FAIL, CKPT_STRICT_LOG, NULL, NULL, NULL, 0 }
CKPT_API int32_t ckpt_load_options_init(ckpt_load_options* opts, uint32_t struct_size);

/* Collective. Fills every registered buffer of `state` from the checkpoint at `path`, whatever layout and number of
 * ranks saved it; flattened and regular shards mix freely. Every block read is checked against its checksum.
 * `path` may also be safetensors weights: a .safetensors file, a Hugging Face directory (model.safetensors, or
 * numbered files and model.safetensors.index.json) or that index file; their bytes carry no checksums and are read
 * unverified, and a malformed header or index is CKPT_E_CORRUPT. Where the job has an identity (CKPT_JOB_ID) and
 * every rank's node agent holds `path` in memory (CKPT_TIER_*), the load reads that copy, verified the same way,
 * and touches no storage. A failure on any rank fails the load on every rank. Returns CKPT_OK, CKPT_E_NOT_FOUND (no
 * checkpoint at path), CKPT_E_MISMATCH (missing or unexpected keys under CKPT_STRICT_FAIL, the message naming the
 * first few of this rank's keys the checkpoint lacks and of the checkpoint's keys nobody asked for; dtype or shape
 * differences that the shard's flags do not allow), CKPT_E_CORRUPT (a checksum, truncated file, or malformed
 * manifest: the message names the tensor and the file), CKPT_E_VERSION, CKPT_E_IO, CKPT_E_NO_MEMORY (exchange
 * buffers, or the stored bytes of a shard loaded with a dtype cast), CKPT_E_PEER_FAILED, CKPT_E_TIMEOUT. On failure,
 * buffers may be partly filled.
 * How the tensors are read is chosen per load, alike on every rank: read once + exchange (each needed stored block
 * read by one rank, pieces exchanged over the transport), or own reads (each rank reads the whole checksum blocks its
 * own pieces need; no exchange). Own reads when there is no transport, else only when every rank runs on one node,
 * the checkpoint is on storage local to it (not s3://, NFS, SMB, Lustre, GPFS, CephFS, FUSE, 9p, ...) and own reads
 * would read at most 1.1 x the stored bytes of the tensors asked for; read once otherwise. CKPT_LOAD_READS=once or
 * =own forces one (once without a transport reads own, with a warning), auto is the default, and any other value
 * fails the load with CKPT_E_INVALID_ARGUMENT naming it; ranks must agree on it (else CKPT_E_MISMATCH). The choice
 * and its read amplification are in ckpt_context_stats and the load's INFO line. */
CKPT_API int32_t ckpt_load(ckpt_context_t* ctx, ckpt_state_t* state, const char* path, const ckpt_load_options* opts,
                           ckpt_error_t* err);

/* ------------------------------------------------------------------------------------------------------------ */
/* Manager: a directory of steps, with a latest pointer and retention                                             */
/* ------------------------------------------------------------------------------------------------------------ */

typedef struct ckpt_manager ckpt_manager_t;

#define CKPT_BEST_MAX 0 /* keep_best keeps the steps of highest best_value */
#define CKPT_BEST_MIN 1 /* keep_best keeps the steps of lowest best_value */

/* Retention: a step is kept if any rule keeps it (keep_last, keep_every, keep_best, keep_for_seconds), as Orbax's
 * preservation policies combine; with keep_last, keep_best and keep_for_seconds all 0, every step is kept. The
 * newest step, and the one `latest` names, are always kept, whatever the rules: a resume needs them. Rank 0 removes
 * the other steps on a thread of its own after each commit, never delaying a save; only steps this job saved or
 * found when it claimed the root are counted or removed. */
typedef struct ckpt_manager_options {
  uint32_t struct_size;
  uint32_t keep_last;  /* keep the newest N committed steps (0: no such rule) */
  uint64_t keep_every; /* keep every step divisible by this (0: no such rule; Orbax's keep_period) */
  /* 1: every step goes to the memory tier (CKPT_TIER_MEMORY), and the steps divisible by storage_every to storage
   * as well (CKPT_TIER_BOTH); a save option asking for another tier than storage overrides it for that save. */
  uint32_t memory_tier;
  uint64_t storage_every; /* with memory_tier; 0: steps reach storage only when the trainers die */
  /* Keep the N steps of best best_value (ckpt_save_options), by best_mode (CKPT_BEST_MAX or CKPT_BEST_MIN); a step
   * saved without one is judged by the other rules alone. 0: no such rule. */
  uint32_t keep_best;
  int32_t best_mode;
  /* Keep the steps committed within the last N seconds, by rank 0's clock at their commit (stored with the step);
   * a step saved without a manager or through the memory tier is judged by the other rules alone. 0: no such rule. */
  uint64_t keep_for_seconds;
} ckpt_manager_options;
#define CKPT_MANAGER_OPTIONS_INIT \
  { (uint32_t)sizeof(ckpt_manager_options), 0, 0, 0, 0, 0, CKPT_BEST_MAX, 0 }
CKPT_API int32_t ckpt_manager_options_init(ckpt_manager_options* opts, uint32_t struct_size);

/* Collective. Opens (creating) the root directory `root`, whose steps live in `root`/step-<12-digit step>. Rank 0
 * claims the root for this job until ckpt_manager_free (or its process's death: a lock in `root`/manager.lock) and
 * removes what crashed runs left behind (uncommitted step directories). A root on S3 cannot be claimed (rank 0 logs
 * a warning); there `latest` and the index of steps are objects replaced by compare-and-swap, so that
 * ckpt_manager_latest reads one object instead of listing the root. CKPT_E_ALREADY_EXISTS on every rank if
 * another job holds the root (the message names its host, pid and job id): give each job its own root. Reading a
 * root needs no manager (ckpt_load or ckpt_reader_open on a step's directory). */
CKPT_API int32_t ckpt_manager_open(ckpt_context_t* ctx, const char* root, const ckpt_manager_options* opts,
                                   ckpt_manager_t** out, ckpt_error_t* err);
/* Waits for the manager's saves in flight, then frees it, releasing its claim on the root. */
CKPT_API void ckpt_manager_free(ckpt_manager_t* manager);
/* Not collective (every rank closes its own). Waits for the manager's saves in flight, then releases rank 0's claim
 * on the root, so that another job may claim it while this one goes on reading: the manager still answers the
 * queries that only read the root (ckpt_manager_latest, ckpt_manager_steps, ckpt_manager_step_path), and
 * ckpt_manager_save, ckpt_manager_load_latest and ckpt_manager_resume_step fail with CKPT_E_INVALID_ARGUMENT.
 * Closing again does nothing; ckpt_manager_free still frees it. A save's failure is its request's to report. */
CKPT_API int32_t ckpt_manager_close(ckpt_manager_t* manager, ckpt_error_t* err);
/* Not collective. Waits for the manager's saves in flight (their requests report how they ended) and, on rank 0,
 * for the removals of old steps their commits asked for, which otherwise go on in the background: from then on
 * rank 0 sees the root holding what the retention policy keeps (the other ranks, once they hear from rank 0, as
 * ckpt_manager_resume_step does first). Returns CKPT_OK, or CKPT_E_INVALID_ARGUMENT for a NULL manager. */
CKPT_API int32_t ckpt_manager_wait(ckpt_manager_t* manager, ckpt_error_t* err);
/* Collective. Saves `state` as step `step`, as ckpt_save does. Once that save commits, rank 0 replaces the
 * `latest` pointer atomically and asks for the removal of the steps the retention policy no longer keeps, which
 * runs on a thread of its own after the request has finished (ckpt_manager_wait waits for it); a failed save leaves
 * both untouched. */
CKPT_API int32_t ckpt_manager_save(ckpt_manager_t* manager, ckpt_state_t* state, uint64_t step,
                                   const ckpt_save_options* opts, ckpt_request_t** request, ckpt_error_t* err);
/* Not collective. The newest committed step `latest` points at (or, if the pointer is missing or stale, the newest
 * committed step). CKPT_E_NOT_FOUND if there is none. */
CKPT_API int32_t ckpt_manager_latest(const ckpt_manager_t* manager, uint64_t* step, ckpt_error_t* err);
/* Collective. Loads the latest step (as rank 0 sees it) into `state`; `*step` receives it. The newest step the
 * node's agent holds in memory counts too, and is read from memory when it is at least as new as the latest on
 * storage. CKPT_E_NOT_FOUND on every rank if there is no committed step: a fresh start. */
CKPT_API int32_t ckpt_manager_load_latest(ckpt_manager_t* manager, ckpt_state_t* state, const ckpt_load_options* opts,
                                          uint64_t* step, ckpt_error_t* err);
/* Collective. The step ckpt_manager_load_latest would load, the same on every rank, without loading it: the latest
 * on storage (as rank 0 sees it), or the newest step the job's node agents hold in memory when it is at least as
 * new, which ckpt_manager_latest does not see. CKPT_E_NOT_FOUND on every rank if there is none. For a trainer that
 * builds its state for the step it resumes from, then loads that step's path. Rank 0 first waits for the removals
 * of old steps in flight (ckpt_manager_wait), so that every rank then sees the root as retention left it. */
CKPT_API int32_t ckpt_manager_resume_step(ckpt_manager_t* manager, uint64_t* step, ckpt_error_t* err);
/* Not collective. The committed steps under the root, ascending: writes min(count, capacity) of them to `steps`
 * and their number to `*count`, so that a first call with capacity 0 sizes the array. */
CKPT_API int32_t ckpt_manager_steps(const ckpt_manager_t* manager, uint64_t* steps, uint64_t capacity, uint64_t* count,
                                    ckpt_error_t* err);
/* Writes the directory of `step` (NUL-terminated) into `buffer`; CKPT_E_INVALID_ARGUMENT if it does not fit. */
CKPT_API int32_t ckpt_manager_step_path(const ckpt_manager_t* manager, uint64_t step, char* buffer,
                                        uint64_t buffer_size, ckpt_error_t* err);
/* Not collective. The metrics saved with `step` (ckpt_save_options.metrics), as the text of a JSON object (the same
 * values, written compactly with the keys sorted): `*length` receives its length (without the NUL), and the text and
 * a NUL are written to `buffer` if `capacity` exceeds it, so that a first call with capacity 0 sizes the buffer.
 * CKPT_E_NOT_FOUND if the step is not committed or was saved without metrics; CKPT_E_CORRUPT naming the file if its
 * record is damaged; CKPT_E_IO. Also once the manager is closed. */
CKPT_API int32_t ckpt_manager_metrics(const ckpt_manager_t* manager, uint64_t step, char* buffer, uint64_t capacity,
                                      uint64_t* length, ckpt_error_t* err);

/* ------------------------------------------------------------------------------------------------------------ */
/* Reader: any process, no collective                                                                             */
/* ------------------------------------------------------------------------------------------------------------ */

typedef struct ckpt_reader ckpt_reader_t;

/* Opens a committed checkpoint and validates its manifest, or safetensors weights as ckpt_load takes them (one
 * chunk per tensor; verify then checks only that every file holds its bytes). CKPT_E_NOT_FOUND, CKPT_E_CORRUPT
 * (including a foreign or truncated MANIFEST, a malformed safetensors header), CKPT_E_VERSION. */
CKPT_API int32_t ckpt_reader_open(const char* path, ckpt_reader_t** out, ckpt_error_t* err);
CKPT_API void ckpt_reader_free(ckpt_reader_t* reader);

typedef struct ckpt_checkpoint_info {
  uint32_t struct_size;
  uint32_t format_major;
  uint32_t format_minor;
  uint32_t world_size; /* ranks that saved it */
  uint32_t node_count;
  uint64_t tensor_count;
  uint64_t object_count;
  uint64_t common_count;
  uint64_t metadata_count;
  uint64_t file_count;
  uint64_t total_bytes; /* bytes of tensor and object data */
} ckpt_checkpoint_info;
#define CKPT_CHECKPOINT_INFO_INIT \
  { (uint32_t)sizeof(ckpt_checkpoint_info), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

CKPT_API int32_t ckpt_reader_info(const ckpt_reader_t* reader, ckpt_checkpoint_info* info, ckpt_error_t* err);

typedef struct ckpt_tensor_info {
  uint32_t struct_size;
  const char* key; /* owned by the reader */
  int32_t dtype;
  uint32_t ndim;
  uint64_t shape[CKPT_MAX_NDIM];
  uint64_t chunk_count;
} ckpt_tensor_info;
#define CKPT_TENSOR_INFO_INIT \
  { (uint32_t)sizeof(ckpt_tensor_info), NULL, 0, 0, {0}, 0 }

/* Tensors are listed in key order, index 0 to tensor_count - 1. CKPT_E_NOT_FOUND past the end. */
CKPT_API int32_t ckpt_reader_tensor(const ckpt_reader_t* reader, uint64_t index, ckpt_tensor_info* info,
                                    ckpt_error_t* err);

typedef struct ckpt_chunk_info {
  uint32_t struct_size;
  uint32_t ndim;
  uint64_t offset[CKPT_MAX_NDIM]; /* the stored box */
  uint64_t shape[CKPT_MAX_NDIM];
  /* Relative to the checkpoint directory ("../<checkpoint>/data/..." for a file of the checkpoint an incremental one
   * refers to); owned by the reader. */
  const char* file;
  uint64_t file_offset;
  uint64_t byte_length;
} ckpt_chunk_info;
#define CKPT_CHUNK_INFO_INIT \
  { (uint32_t)sizeof(ckpt_chunk_info), 0, {0}, {0}, NULL, 0, 0 }

CKPT_API int32_t ckpt_reader_chunk(const ckpt_reader_t* reader, uint64_t tensor_index, uint64_t chunk_index,
                                   ckpt_chunk_info* info, ckpt_error_t* err);

/* Reads the box (offset, shape) of tensor `key` into `buffer` (row-major, buffer_size must equal the box's bytes),
 * verifying the checksum of every block it reads. CKPT_E_NOT_FOUND, CKPT_E_INVALID_ARGUMENT (box out of bounds,
 * wrong size), CKPT_E_CORRUPT. */
CKPT_API int32_t ckpt_reader_read(ckpt_reader_t* reader, const char* key, uint32_t ndim, const uint64_t* offset,
                                  const uint64_t* shape, void* buffer, uint64_t buffer_size, ckpt_error_t* err);

/* The i-th object, in key order (0 to object_count - 1): its key, its grid (`*grid_ndim` dimensions of
 * `*grid_shape`, NULL for a grid of no dimension) and the bytes of all its pieces together; key and grid shape owned
 * by the reader. CKPT_E_NOT_FOUND past the end. Since CKPT_2. */
CKPT_API int32_t ckpt_reader_object_at(const ckpt_reader_t* reader, uint64_t index, const char** key,
                                       uint32_t* grid_ndim, const uint64_t** grid_shape, uint64_t* bytes,
                                       ckpt_error_t* err);
/* The i-th common entry, in key order; key and bytes owned by the reader. */
CKPT_API int32_t ckpt_reader_common_at(const ckpt_reader_t* reader, uint64_t index, const char** key, const void** data,
                                       uint64_t* size, ckpt_error_t* err);
/* The common bytes stored under `key`; owned by the reader. CKPT_E_NOT_FOUND if absent. */
CKPT_API int32_t ckpt_reader_common(const ckpt_reader_t* reader, const char* key, const void** data, uint64_t* size,
                                    ckpt_error_t* err);
/* The user metadata value saved under `key`; owned by the reader. CKPT_E_NOT_FOUND if absent. */
CKPT_API int32_t ckpt_reader_metadata(const ckpt_reader_t* reader, const char* key, const char** value,
                                      ckpt_error_t* err);
/* The i-th user metadata entry, in the order saved (0 to metadata_count - 1); key and value owned by the reader.
 * CKPT_E_NOT_FOUND past the end. */
CKPT_API int32_t ckpt_reader_metadata_at(const ckpt_reader_t* reader, uint64_t index, const char** key,
                                         const char** value, ckpt_error_t* err);
/* Reads every chunk of every tensor and object and checks every checksum and file size. CKPT_E_CORRUPT names the
 * first tensor and file that fail. */
CKPT_API int32_t ckpt_reader_verify(ckpt_reader_t* reader, ckpt_error_t* err);

/* ------------------------------------------------------------------------------------------------------------ */
/* Export to safetensors: any process, no collective                                                            */
/* ------------------------------------------------------------------------------------------------------------ */

typedef struct ckpt_export_options {
  uint32_t struct_size;
  /* Files of the Hugging Face sharded layout hold at most this many bytes of data (a larger tensor gets a file of
   * its own); 0 puts everything in one file. Default 5,000,000,000 ("5GB"). */
  uint64_t max_shard_bytes;
  /* The tensors to export (key_count keys); NULL: every tensor. */
  const char* const* keys;
  uint64_t key_count;
  /* Several processes may share one export, each writing the files whose number is part_index modulo part_count
   * (part 0 also writes the index); all plan the same files, so every byte is written once. Default 0 of 1. */
  uint32_t part_index;
  uint32_t part_count;
  /* 0: every tensor in its stored dtype. CKPT_DTYPE_F16, _BF16, _F32 or _F64: floating tensors converted to it
   * (round to nearest even; NaN and infinities kept), other tensors as stored. */
  int32_t dtype;
} ckpt_export_options;

#define CKPT_EXPORT_OPTIONS_INIT \
  { (uint32_t)sizeof(ckpt_export_options), 5000000000u, NULL, 0, 0, 1, 0 }
CKPT_API int32_t ckpt_export_options_init(ckpt_export_options* opts, uint32_t struct_size);

/* Exports the tensors of the committed checkpoint at `checkpoint` to safetensors, whole (merged from however many
 * chunks saved them) and streamed through a bounded window. `out` ending in ".safetensors" is one file; otherwise
 * it is a directory (created if needed) that receives model.safetensors when the data fits in one file, else
 * model-00001-of-0000N.safetensors ... and model.safetensors.index.json (weight_map, metadata.total_size). Each
 * file's __metadata__ holds the checkpoint's user metadata, plus "format": "pt" unless it names a format. Each
 * file's data starts at a multiple of 4096 bytes. Files are written under temporary names and renamed into place;
 * an existing file is never replaced, nor a directory holding another export's files written into
 * (CKPT_E_ALREADY_EXISTS). Objects and common entries are left out. Every block
 * read is checked against its checksum (CKPT_E_CORRUPT). CKPT_E_NOT_FOUND (no checkpoint, or a key it lacks),
 * CKPT_E_UNSUPPORTED (a dtype safetensors cannot name), CKPT_E_INVALID_ARGUMENT (a dtype to convert to that is not
 * floating), CKPT_E_IO, CKPT_E_NO_SPACE. */
CKPT_API int32_t ckpt_export(const char* checkpoint, const char* out, const ckpt_export_options* opts,
                             ckpt_error_t* err);

#ifdef __cplusplus
}
#endif

#endif /* CKPT_H */

// Loads read through the same engine as saves: the blocks of each stored chunk that someone needs are read by the
// I/O workers into the staging arena (O_DIRECT where possible, checksums verified by the worker), window by window,
// and each consumer's region is copied out of the window while the next windows are being read. The whole checksum
// blocks that land in one run of a host destination, aligned as direct I/O on their file needs of memory (statx's
// dio_mem_align: 512 bytes on virtio disks, often 4 on NVMe), are instead read by this process straight into it and
// verified in place: no copy, as a trainer's large tensors allow. A program with neither arena nor workers (the
// export) reads everything in this process instead: straight in where it can, else through a buffer of its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "io/file_jobs.h"
#include "io/staging_arena.h"
#include "io/worker_pool.h"
#include "runtime/core/box.h"
#include "runtime/format/manifest.h"

namespace ckpt::runtime {

// `region` of a chunk (global coordinates, inside the chunk) goes into `dst`, a row-major buffer holding `dst_box`.
struct ChunkConsumer {
  Box region;
  char* dst = nullptr;
  Box dst_box;
  int device = -1;  // the CUDA device holding `dst`; -1: host memory
};

struct ChunkFetch {
  const TensorRecord* tensor = nullptr;
  size_t chunk = 0;
  std::vector<ChunkConsumer> consumers;
};

struct FetchEngine {
  io::StagingArena& arena;
  io::WorkerPool& workers;
  std::chrono::milliseconds timeout;
  // Told the bytes copied into the consumers after each window (a load's progress); empty: nobody is.
  std::function<void(uint64_t)> delivered = {};
  // How this process reads windows straight into their destinations; null: every window goes through the arena.
  const io::IoTuning* direct_tuning = nullptr;
};

// Chunk-relative bytes [begin, end) of the whole checksum blocks that hold every consumer's region of `f`: what a fetch
// reads of its chunk; {0, 0} when the consumers take nothing.
std::pair<uint64_t, uint64_t> NeededBlocks(const ChunkFetch& f);

// Reads and delivers every fetch from the checkpoint in `dir`; returns the bytes read from storage. A checksum
// failure is kCorrupt naming the tensor, the chunk and the file.
Result<uint64_t> FetchChunks(const FetchEngine& engine, const std::string& dir, const Manifest& manifest,
                             const std::vector<ChunkFetch>& fetches);

// The same without a staging arena and I/O workers, on threads of this process reading as `tuning` says: every
// part that can go straight into its destination does, and the rest (unaligned destinations, blocks cut by a
// region's edge) is read into a buffer of the reading thread's, verified there and copied out. Checksums, errors
// and the files a read may open are as FetchChunks'.
Result<uint64_t> FetchChunksInProcess(const io::IoTuning& tuning, const std::string& dir, const Manifest& manifest,
                                      const std::vector<ChunkFetch>& fetches);

}  // namespace ckpt::runtime

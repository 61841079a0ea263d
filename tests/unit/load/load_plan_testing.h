// Builders and a comparison shared by the load planner's tests (test_load_plan.cc, test_load_plan_reference.cc).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "io/checksum.h"
#include "runtime/core/dtype.h"
#include "runtime/load/load_plan.h"

namespace ckpt::runtime {

inline constexpr int32_t kF32 = static_cast<int32_t>(DType::kF32);
inline constexpr int32_t kF64 = static_cast<int32_t>(DType::kF64);
inline constexpr uint64_t kBlockSize = 64;  // small, so that rows straddle blocks

// A tensor stored as `chunks`, laid out one after the other in file 0 at 4 KiB-aligned offsets.
inline TensorRecord Stored(const std::string& key, const Shape& shape, const std::vector<Box>& chunks,
                           uint64_t block_size = kBlockSize, int32_t dtype = kF32) {
  TensorRecord tensor{key, dtype, shape, {}};
  uint64_t offset = 0;
  for (const Box& box : chunks) {
    const uint64_t bytes = box.volume() * DTypeSize(dtype);
    StoredBytes stored;
    stored.file_offset = offset;
    stored.byte_length = bytes;
    stored.block_size = block_size;
    stored.block_checksums.assign(io::BlockCount(bytes, block_size), 0);
    tensor.chunks.push_back(ChunkRecord{box, std::move(stored)});
    offset += (bytes + 4095) / 4096 * 4096;
  }
  return tensor;
}

inline Manifest WithTensors(std::vector<TensorRecord> tensors) {
  Manifest manifest;
  manifest.files.push_back(DataFileRecord{"data/0-0.bin", 1ull << 30});
  manifest.tensors = std::move(tensors);
  return manifest;
}

// `ranks` empty requests; rank r sits on node "node<r / ranks_per_node>".
inline std::vector<LoadRequest> World(int ranks, int ranks_per_node = 1) {
  std::vector<LoadRequest> requests(ranks);
  for (int r = 0; r < ranks; ++r) {
    requests[r].rank = r;
    requests[r].node = "node" + std::to_string(r / ranks_per_node);
  }
  return requests;
}

// Field by field: the reads, the transfers and local copies in order, the bytes each rank reads.
inline void ExpectSamePlan(const LoadPlan& a, const LoadPlan& b) {
  auto read_tuple = [](const ChunkRead& r) {
    return std::make_tuple(r.tensor, r.chunk, r.reader, r.first_block, r.block_count, r.bytes);
  };
  auto transfer_tuple = [](const Transfer& t) { return std::make_tuple(t.read, t.consumer, t.region, t.bytes); };
  ASSERT_EQ(a.reads.size(), b.reads.size());
  for (size_t i = 0; i < a.reads.size(); ++i) EXPECT_EQ(read_tuple(a.reads[i]), read_tuple(b.reads[i])) << "read " << i;
  ASSERT_EQ(a.transfers.size(), b.transfers.size());
  for (size_t i = 0; i < a.transfers.size(); ++i) {
    EXPECT_EQ(transfer_tuple(a.transfers[i]), transfer_tuple(b.transfers[i])) << "transfer " << i;
  }
  ASSERT_EQ(a.local_copies.size(), b.local_copies.size());
  for (size_t i = 0; i < a.local_copies.size(); ++i) {
    EXPECT_EQ(transfer_tuple(a.local_copies[i]), transfer_tuple(b.local_copies[i])) << "local copy " << i;
  }
  EXPECT_EQ(a.read_bytes_per_rank, b.read_bytes_per_rank);
  EXPECT_EQ(a.separate_bytes, b.separate_bytes);
}

}  // namespace ckpt::runtime

// What each rank tells the committer about its writes: its data files, where each item it wrote lies, and the
// checksums of the replicas it checked.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "runtime/core/box.h"
#include "runtime/format/manifest.h"

namespace ckpt::runtime {

// One item a writer stored.
struct WrittenItem {
  bool is_object = false;
  std::string key;
  Box box;            // tensors
  Shape index;        // objects
  StoredBytes bytes;  // file_index counts this rank's files until the committer renumbers it
};

// CKPT_SAVE_INCREMENTAL: the digests of one tensor box a writer stored.
struct TensorDigests {
  std::string key;
  BoxDigests digests;
};

struct WriterReport {
  std::vector<DataFileRecord> files;  // names relative to the checkpoint directory
  std::vector<WrittenItem> items;
  std::vector<CommonRecord> stored_common;  // rank 0 only
  // CKPT_SAVE_CHECK_REPLICAS: the block checksums of this rank's copies of items other ranks write (bytes:
  // byte_length, block_size and block_checksums only).
  std::vector<WrittenItem> replicas;
  // CKPT_SAVE_INCREMENTAL: the digests of the boxes this rank wrote, and the chunks it refers to in other
  // checkpoints' files instead (bytes.file_index into referenced_files, whose `checkpoint` is set).
  std::vector<TensorDigests> digests;
  std::vector<DataFileRecord> referenced_files;
  std::vector<WrittenItem> references;
  // CKPT_SAVE_INCREMENTAL with CKPT_SAVE_CHECK_REPLICAS: the block checksums of each box of the plan this rank wrote
  // as slabs or referred to (bytes: byte_length, block_size and block_checksums only), which its replicas' are
  // compared with.
  std::vector<WrittenItem> split_items;
};

std::string EncodeWriterReport(const WriterReport& report);
Result<WriterReport> DecodeWriterReport(std::string_view bytes, int from_rank);

}  // namespace ckpt::runtime

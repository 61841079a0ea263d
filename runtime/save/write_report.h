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

struct WriterReport {
  std::vector<DataFileRecord> files;  // names relative to the checkpoint directory
  std::vector<WrittenItem> items;
  std::vector<CommonRecord> stored_common;  // rank 0 only
  // CKPT_SAVE_CHECK_REPLICAS: the block checksums of this rank's copies of items other ranks write (bytes:
  // byte_length, block_size and block_checksums only).
  std::vector<WrittenItem> replicas;
};

std::string EncodeWriterReport(const WriterReport& report);
Result<WriterReport> DecodeWriterReport(std::string_view bytes, int from_rank);

}  // namespace ckpt::runtime

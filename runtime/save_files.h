// The pieces of a save that touch storage: a rank's data file, and what each writer reports to the committer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "io/file_io.h"
#include "runtime/box.h"
#include "runtime/manifest.h"

namespace ckpt::runtime {

// Appends chunks to one data file at 4 KiB-aligned offsets, with their block checksums. The file is created on
// the first append, so a rank with nothing to write leaves no file.
class DataFileWriter {
 public:
  DataFileWriter(std::string dir, std::string relative_name, uint64_t block_size);

  Result<StoredBytes> Append(const void* data, uint64_t size);
  // Appends `region` of the row-major buffer `src` of `src_box`, gathering it first unless it is one run.
  Result<StoredBytes> AppendRegion(const void* src, const Box& src_box, const Box& region, size_t element_size);
  // fdatasync and close; returns the file's size (0 if nothing was written).
  Result<uint64_t> Finish();

  const std::string& relative_name() const { return relative_name_; }
  bool created() const { return file_.fd() >= 0; }

 private:
  std::string dir_;
  std::string relative_name_;
  uint64_t block_size_;
  io::File file_;
  uint64_t end_ = 0;
  std::vector<char> gather_;
};

// One item a writer stored.
struct WrittenItem {
  bool is_object = false;
  std::string key;
  Box box;      // tensors
  Shape index;  // objects
  StoredBytes bytes;  // file_index is the writer's local 0 until the committer renumbers it
};

struct WriterReport {
  std::string file_name;  // empty if the rank wrote nothing
  uint64_t file_size = 0;
  std::vector<WrittenItem> items;
  std::vector<CommonRecord> stored_common;  // rank 0 only
};

std::string EncodeWriterReport(const WriterReport& report);
Result<WriterReport> DecodeWriterReport(std::string_view bytes, int from_rank);

}  // namespace ckpt::runtime

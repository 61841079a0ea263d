// Reading stored bytes back in this process: a checkpoint's data files, opened as its manifest records them, and the
// reads of the reader API, of verification and of a load's objects and common entries (a load's tensors go through
// runtime/load/chunk_fetcher.h). Every block that is read is checked against its checksum before any of its bytes
// reach the caller.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "io/file_io.h"
#include "runtime/core/box.h"
#include "runtime/format/manifest.h"

namespace ckpt::runtime {

// The data files of one checkpoint, opened on first use; each is checked against the size the manifest records.
class CheckpointFiles {
 public:
  CheckpointFiles(std::string dir, const Manifest& manifest);

  Result<const io::File*> Open(uint32_t file_index);
  const std::string& name(uint32_t file_index) const { return manifest_.files[file_index].name; }
  const Manifest& manifest() const { return manifest_; }
  uint64_t bytes_read() const { return bytes_read_; }
  void CountRead(uint64_t bytes) { bytes_read_ += bytes; }

 private:
  std::string dir_;
  const Manifest& manifest_;
  std::vector<std::unique_ptr<io::File>> files_;
  uint64_t bytes_read_ = 0;
};

// Copies `region` of `tensor` into `dst`, a row-major buffer of `dst_box`. `region` must lie inside dst_box and
// inside the tensor's shape. Reads only the blocks of the chunks that intersect the region.
Status ReadTensorRegion(CheckpointFiles& files, const TensorRecord& tensor, const Box& region, void* dst,
                        const Box& dst_box);

// Reads all of `stored` into a string. `what` names the owner in errors ("object 'rng' cell [1]").
Result<std::string> ReadStoredBytes(CheckpointFiles& files, const StoredBytes& stored, const std::string& what);

// Reads `stored` block by block and checks every checksum, keeping at most a few blocks in memory.
Status VerifyStoredBytes(CheckpointFiles& files, const StoredBytes& stored, const std::string& what);

}  // namespace ckpt::runtime

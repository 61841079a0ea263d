// Read access to one committed checkpoint (or safetensors weights) from any process, without a context or
// collective.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/status.h"
#include "runtime/core/box.h"
#include "runtime/format/manifest.h"
#include "runtime/load/chunk_reader.h"

namespace ckpt::runtime {

class CheckpointReader {
 public:
  // `path` is a checkpoint directory or safetensors weights (runtime/format/checkpoint_source.h).
  static Result<std::unique_ptr<CheckpointReader>> Open(const std::string& path);

  const Manifest& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }

  // Reads `box` of tensor `key` into a row-major buffer of exactly box.volume() * dtype size bytes.
  Status ReadBox(const std::string& key, const Box& box, void* buffer, uint64_t buffer_size);
  // The bytes of common entry `key` (read and verified on first use for entries kept in a data file).
  Result<const std::string*> Common(const std::string& key);
  // Every data file present and as long as recorded, every block of every tensor, object and common entry intact.
  Status Verify();

 private:
  CheckpointReader(std::string dir, Manifest manifest);
  std::string dir_;
  Manifest manifest_;
  CheckpointFiles files_;
  std::map<std::string, std::string> stored_common_;
};

}  // namespace ckpt::runtime

// The checkpoint an incremental save (CKPT_SAVE_INCREMENTAL) compares itself with: its manifest, read once per save
// by each writing rank, whose tensors' chunks and digests are decoded only for the keys the rank writes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/format/manifest.h"

namespace ckpt::runtime {

class IncrementalBase {
 public:
  // The committed checkpoint `base_path` for a save to `path`. kInvalidArgument unless the two are different
  // directories in the same parent directory (references name a sibling, so that the checkpoints can be moved
  // together and nothing outside their parent is ever read); kNotFound when `base_path` holds no checkpoint;
  // kCorrupt or kVersion as reading its manifest says.
  static Result<std::unique_ptr<IncrementalBase>> Open(const std::string& path, const std::string& base_path);

  // The base's directory name, which the new checkpoint's references name.
  const std::string& name() const { return name_; }
  // Tensor `key` of the base, its chunks and digests decoded; null when the base has no such tensor.
  Result<const TensorRecord*> Tensor(const std::string& key);
  // The file `index` of the base as the new checkpoint refers to it: the base's own files as files of the base,
  // the files it refers to as they are (references name where the bytes are, never a chain).
  DataFileRecord ReferTo(uint32_t index) const;
  // Whether the new checkpoint may refer to the base's file `index`: it is in place at its recorded size (a file
  // the base refers to may have been deleted by hand) and is no file of a checkpoint by the new one's name (a base
  // that refers to a deleted checkpoint whose name the save reuses). Bytes it may not refer to are written again.
  // Checked once per file.
  bool CanReferTo(uint32_t index);

 private:
  IncrementalBase(std::string dir, std::string name, std::string target_name, ManifestWithoutChunks read);

  std::string dir_;
  std::string name_;
  std::string target_name_;
  Manifest manifest_;
  std::unique_ptr<EncodedChunks> chunks_;
  std::vector<int8_t> referable_;  // per file: -1 not checked yet, then 0 or 1
};

}  // namespace ckpt::runtime

#include "runtime/save/incremental_base.h"

#include <sys/stat.h>

#include <algorithm>
#include <utility>

#include "io/file_io.h"

namespace ckpt::runtime {
namespace {

std::string WithoutTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string LastComponent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

IncrementalBase::IncrementalBase(std::string dir, std::string name, std::string target_name,
                                 ManifestWithoutChunks read)
    : dir_(std::move(dir)),
      name_(std::move(name)),
      target_name_(std::move(target_name)),
      manifest_(std::move(read.manifest)),
      chunks_(std::move(read.chunks)),
      referable_(manifest_.files.size(), -1) {}

Result<std::unique_ptr<IncrementalBase>> IncrementalBase::Open(const std::string& path, const std::string& base_path) {
  const std::string dir = WithoutTrailingSlashes(base_path);
  const std::string target = WithoutTrailingSlashes(path);
  const std::string name = LastComponent(dir);
  if (name.empty() || name == "." || name == ".." || LastComponent(target) == "." || LastComponent(target) == "..") {
    return InvalidArgument("the base checkpoint " + Quoted(base_path) + " of the save to " + Quoted(path) +
                           " must be named by a path ending in its directory's name");
  }
  if (io::ParentDirectory(dir) != io::ParentDirectory(target)) {
    return InvalidArgument("the base checkpoint " + Quoted(base_path) + " is not in the directory of " +
                           Quoted(path) + " (" + io::ParentDirectory(target) +
                           "): an incremental checkpoint refers only to checkpoints beside it");
  }
  if (name == LastComponent(target)) {
    return InvalidArgument("the save to " + Quoted(path) + " names itself as its base");
  }
  Result<ManifestWithoutChunks> read = ReadManifestWithoutChunks(dir);
  if (!read.ok()) return read.status().WithContext("the base of the incremental save to " + path);
  return std::unique_ptr<IncrementalBase>(new IncrementalBase(dir, name, LastComponent(target), std::move(read).value()));
}

Result<const TensorRecord*> IncrementalBase::Tensor(const std::string& key) {
  const auto it = std::lower_bound(manifest_.tensors.begin(), manifest_.tensors.end(), key,
                                   [](const TensorRecord& t, const std::string& k) { return t.key < k; });
  if (it == manifest_.tensors.end() || it->key != key) return nullptr;
  const auto index = static_cast<uint32_t>(it - manifest_.tensors.begin());
  RETURN_IF_ERROR(chunks_->DecodeInto(manifest_, {index}));
  return &*it;
}

DataFileRecord IncrementalBase::ReferTo(uint32_t index) const {
  DataFileRecord file = manifest_.files[index];
  if (file.checkpoint.empty()) file.checkpoint = name_;
  return file;
}

bool IncrementalBase::CanReferTo(uint32_t index) {
  if (referable_[index] < 0) {
    const DataFileRecord& file = manifest_.files[index];
    struct stat st;
    referable_[index] = file.checkpoint != target_name_ && lstat(DataFilePath(dir_, file).c_str(), &st) == 0 &&
                        S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) >= file.size;
  }
  return referable_[index] == 1;
}

}  // namespace ckpt::runtime

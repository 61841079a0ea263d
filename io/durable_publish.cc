#include "io/durable_publish.h"

#include "io/file_io.h"

namespace ckpt::io {
namespace {

// The last step of a publish, after which a failure no longer means that nothing was published.
Status SyncParentOfPublished(const std::string& target) {
  const Status synced = SyncDirectory(ParentDirectory(target));
  if (synced.ok()) return synced;
  return Status(synced.code(),
                synced.message() + "; " + Quoted(target) + " is in place but may not survive a power loss");
}

}  // namespace

Status PublishDirectory(const std::string& staged, const std::vector<std::string>& subdirectories,
                        const std::string& target) {
  for (const std::string& subdirectory : subdirectories) RETURN_IF_ERROR(SyncDirectory(JoinPath(staged, subdirectory)));
  RETURN_IF_ERROR(SyncDirectory(staged));
  RETURN_IF_ERROR(RenameNoReplace(staged, target));
  return SyncParentOfPublished(target);
}

Status PublishFile(const std::string& staged, const std::string& target) {
  if (Status renamed = RenameNoReplace(staged, target); !renamed.ok()) {
    (void)RemoveTree(staged);
    return renamed;
  }
  return SyncParentOfPublished(target);
}

Status MakeDirectoriesDurably(const std::string& path) {
  // Which directories are new must be known before they are made; afterwards every one of them exists.
  std::vector<std::string> created;
  for (std::string dir = path; !IsDirectory(dir); dir = ParentDirectory(dir)) {
    created.push_back(dir);
    if (ParentDirectory(dir) == dir) break;
  }
  RETURN_IF_ERROR(MakeDirectories(path));
  for (const std::string& dir : created) RETURN_IF_ERROR(SyncDirectory(ParentDirectory(dir)));
  return Status::Ok();
}

}  // namespace ckpt::io

#include "runtime/format/save_directory.h"

#include <chrono>
#include <cstdio>
#include <random>

#include "common/settings.h"
#include "io/claimed_directory.h"
#include "io/file_io.h"
#include "io/object_storage.h"
#include "runtime/format/manifest.h"

namespace ckpt::runtime {
namespace {

// The temporaries of saves to `path` that died: "<name>.tmp-*" beside it that no live process claims.
Status RemoveAbandonedTemporaries(const std::string& path) {
  const std::string parent = io::ParentDirectory(path);
  const std::string prefix = path.substr(path.find_last_of('/') + 1) + std::string(kTemporaryInfix);
  Result<std::vector<std::string>> names = io::ListDirectory(parent);
  if (names.status().code() == Code::kNotFound) return Status::Ok();  // the first save under a new parent
  RETURN_IF_ERROR(names.status());
  for (const std::string& name : *names) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string temporary = io::JoinPath(parent, name);
    if (io::IsClaimed(temporary)) continue;
    RETURN_IF_ERROR(io::RemoveTree(temporary).WithContext("removing the temporary of a save that died"));
  }
  return Status::Ok();
}

}  // namespace

std::string NewSaveId() {
  std::random_device entropy;
  const uint64_t id = (static_cast<uint64_t>(entropy()) << 32) ^ entropy() ^
                      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(id));
  return text;
}

std::chrono::seconds StaleObjectAge() { return std::chrono::seconds(settings::CountFromEnv(kStaleAgeVar, 3600)); }

std::string TemporaryDirectory(const std::string& path, const std::string& save_id) {
  if (io::IsObjectStorePath(path)) return path;
  return path + std::string(kTemporaryInfix) + save_id;
}

std::string DataDirectoryOf(const std::string& path, const std::string& save_id) {
  if (io::IsObjectStorePath(path)) return std::string(kDataDirName) + "/" + save_id;
  return kDataDirName;
}

std::string UncommittedSaveFiles(const std::string& path, const std::string& save_id) {
  if (io::IsObjectStorePath(path)) return io::JoinPath(path, DataDirectoryOf(path, save_id));
  return TemporaryDirectory(path, save_id);
}

Result<io::Claim> ClaimSaveDirectory(const std::string& path, const std::string& save_id) {
  if (io::IsObjectStorePath(path)) {
    const Result<uint64_t> manifest = io::ObjectSize(io::JoinPath(path, kManifestName));
    if (manifest.ok()) {
      return AlreadyExists(Quoted(path) + " already exists; a committed checkpoint is never overwritten");
    }
    if (manifest.status().code() != Code::kNotFound) return manifest.status();
    const auto stale = std::chrono::system_clock::now() - StaleObjectAge();
    const Status removed =
        io::RemoveObjectsUnder(io::JoinPath(path, kDataDirName), std::chrono::system_clock::to_time_t(stale));
    // A missing bucket is first found here (a HEAD's 404 cannot tell it from a missing key): said as it is.
    if (!removed.ok() && removed.code() != Code::kNotFound) {
      return removed.WithContext("removing the objects of saves that died");
    }
    RETURN_IF_ERROR(removed);
    return io::Claim();
  }
  if (io::PathExists(path)) {
    return AlreadyExists(Quoted(path) + " already exists; a committed checkpoint is never overwritten");
  }
  RETURN_IF_ERROR(RemoveAbandonedTemporaries(path));
  return io::ClaimDirectory(TemporaryDirectory(path, save_id));
}

}  // namespace ckpt::runtime

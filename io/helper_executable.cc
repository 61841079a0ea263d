#include "io/helper_executable.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <vector>

#include "common/os_error.h"

namespace ckpt::io {
namespace {

// The directory of the file this code was loaded from: libckpt.so, or the executable it is linked into.
Result<std::string> DirectoryOfThisLibrary() {
  Dl_info info;
  link_map* map = nullptr;
  void* self = reinterpret_cast<void*>(&FindHelperExecutable);
  if (dladdr1(self, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0 || map == nullptr) {
    return NotFound("cannot locate the loaded libckpt (dladdr failed)");
  }
  // The main program's link map has an empty name; /proc/self/exe names it reliably, unlike argv[0].
  const std::string image = map->l_name != nullptr && map->l_name[0] != '\0' ? map->l_name : "/proc/self/exe";
  char resolved[PATH_MAX];
  if (realpath(image.c_str(), resolved) == nullptr) {
    const std::string reason = OsErrorText(errno);
    return NotFound("cannot resolve the path of libckpt '" + image + "': " + reason);
  }
  std::string path = resolved;
  return path.substr(0, path.rfind('/'));
}

}  // namespace

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

Result<std::string> FindHelperExecutable(const char* name, const char* env_var, const std::string& hint) {
  const char* configured = std::getenv(env_var);
  if (configured != nullptr && *configured != '\0') {
    if (!IsExecutableFile(configured)) {
      return NotFound(std::string(env_var) + " names '" + configured + "', which is not an executable file");
    }
    return std::string(configured);
  }
  std::vector<std::string> candidates;
  Result<std::string> dir = DirectoryOfThisLibrary();
  if (dir.ok()) {
    candidates.push_back(dir.value() + "/" + name);
    candidates.push_back(dir.value() + "/ckpt/" + name);
  }
#ifdef CKPT_INSTALLED_WORKER_DIR
  // Where `cmake --install` puts it: a program that links libckpt.a has no helper beside itself.
  candidates.push_back(std::string(CKPT_INSTALLED_WORKER_DIR) + "/" + name);
#endif
  std::string tried;
  for (const std::string& candidate : candidates) {
    if (IsExecutableFile(candidate)) return candidate;
    tried += (tried.empty() ? "'" : ", '") + candidate + "'";
  }
  const std::string unlocated = dir.ok() ? "" : " (" + dir.status().message() + ")";
  return NotFound(std::string("the executable ") + name + " is none of " + tried + unlocated + "; set " + env_var +
                  " to its path" + hint);
}

}  // namespace ckpt::io

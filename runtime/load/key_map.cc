#include "runtime/load/key_map.h"

namespace ckpt::runtime {

Result<KeyMap> KeyMap::Make(const std::vector<std::pair<std::string, std::string>>& pairs) {
  KeyMap map;
  std::map<std::string, std::string> registered_of;  // checkpoint key -> the registered key mapped to it
  for (const auto& [key, saved] : pairs) {
    auto [at, added] = map.saved_.emplace(key, saved);
    if (!added) {
      return InvalidArgument("key_map maps '" + key + "' twice: to '" + at->second + "' and to '" + saved + "'");
    }
    auto [other, first] = registered_of.emplace(saved, key);
    if (!first) {
      return InvalidArgument("key_map maps both '" + other->second + "' and '" + key + "' to '" + saved +
                             "': one of them would be left unfilled");
    }
  }
  return map;
}

const std::string& KeyMap::Saved(const std::string& key) const {
  auto it = saved_.find(key);
  return it == saved_.end() ? key : it->second;
}

std::string KeyMap::Describe(const std::string& key) const {
  auto it = saved_.find(key);
  if (it == saved_.end()) return "'" + key + "'";
  return "'" + key + "' (looked up as '" + it->second + "')";
}

}  // namespace ckpt::runtime

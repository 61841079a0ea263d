// Where a rank's registered keys lie in the checkpoint (ckpt_load_options' key_map): a state whose keys changed since
// the save (a renamed layer, another framework's paths) is matched against the manifest through it, and the load's
// messages name a mapped key with the key it was looked up as.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace ckpt::runtime {

class KeyMap {
 public:
  // Every key looked up as itself.
  KeyMap() = default;
  // From (registered key, checkpoint key) pairs; InvalidArgument naming them when a registered key is mapped twice or
  // two registered keys are mapped to the same checkpoint key (one of the two would go unfilled).
  static Result<KeyMap> Make(const std::vector<std::pair<std::string, std::string>>& pairs);

  // The checkpoint's key for a registered key.
  const std::string& Saved(const std::string& key) const;
  // The registered key quoted, with the key it is looked up as where the map names it: 'a' (looked up as 'x').
  std::string Describe(const std::string& key) const;
  // The registered keys the map names, with their checkpoint keys, in the registered keys' order.
  const std::map<std::string, std::string>& pairs() const { return saved_; }

 private:
  std::map<std::string, std::string> saved_;
};

}  // namespace ckpt::runtime

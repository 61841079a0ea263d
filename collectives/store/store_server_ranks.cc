#include "collectives/store/store_server_ranks.h"

#include <cstddef>

namespace ckpt::coll::store_server {

namespace {

// Rank lists in error messages stop after this many.
constexpr size_t kMaxRanksNamed = 16;

}  // namespace

std::string FormatRanks(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size() && i < kMaxRanksNamed; ++i) {
    text += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
  }
  if (ranks.size() > kMaxRanksNamed) text += ", ... (" + std::to_string(ranks.size()) + " in all)";
  return text;
}

Status RankRoster::DeadRanksError() const {
  std::vector<int> dead;
  for (int r = 0; r < world_size(); ++r) {
    if (states_[r] == RankState::kDead) dead.push_back(r);
  }
  if (dead.empty()) return Status::Ok();
  return PeerFailed(FormatRanks(dead) + " disconnected");
}

std::vector<int> RankRoster::LeftWithout(const std::vector<bool>& arrived) const {
  std::vector<int> gone;
  for (int r = 0; r < world_size(); ++r) {
    if (states_[r] == RankState::kLeft && !arrived[r]) gone.push_back(r);
  }
  return gone;
}

}  // namespace ckpt::coll::store_server

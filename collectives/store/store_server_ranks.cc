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

void RankRoster::MarkDead(int rank, const Status& why) {
  states_[rank] = RankState::kDead;
  if (first_death_.ok()) first_death_ = why;
}

Status RankRoster::DeadRanksError() const {
  std::vector<int> dead;
  for (int r = 0; r < world_size(); ++r) {
    if (states_[r] == RankState::kDead) dead.push_back(r);
  }
  if (dead.size() <= 1) return first_death_;
  return PeerFailed(first_death_.message() + "; lost in all: " + FormatRanks(dead));
}

std::vector<int> RankRoster::LeftWithout(const std::vector<bool>& arrived) const {
  std::vector<int> gone;
  for (int r = 0; r < world_size(); ++r) {
    if (states_[r] == RankState::kLeft && !arrived[r]) gone.push_back(r);
  }
  return gone;
}

}  // namespace ckpt::coll::store_server

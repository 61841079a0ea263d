// The ranks of a job as the TCP store's server (tcp_store_server.h) sees them: not yet connected, connected, gone
// with a goodbye or lost without one; and how its error messages name groups of ranks.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace ckpt::coll::store_server {

enum class RankState { kAbsent, kConnected, kLeft, kDead };

// "rank 2", "ranks 1, 2", "ranks 0, 1, ... (40 in all)".
std::string FormatRanks(const std::vector<int>& ranks);

class RankRoster {
 public:
  explicit RankRoster(int world_size) : states_(world_size, RankState::kAbsent) {}

  int world_size() const { return static_cast<int>(states_.size()); }
  RankState state(int rank) const { return states_[rank]; }
  void Set(int rank, RankState state) { states_[rank] = state; }
  // Marks `rank` lost without a goodbye; the first such loss, `why` (kPeerFailed), is kept as the likely cause.
  void MarkDead(int rank, const Status& why);

  // kPeerFailed with the first loss's message, and every rank lost since where there are more; Ok while there are
  // none. A request made after the losses gets it: "rank 2 disconnected; lost in all: ranks 2, 3".
  Status DeadRanksError() const;
  // The ranks that left with a goodbye and are not marked in `arrived`: a collective they never joined can no
  // longer complete.
  std::vector<int> LeftWithout(const std::vector<bool>& arrived) const;

 private:
  std::vector<RankState> states_;  // by rank
  Status first_death_ = Status::Ok();
};

}  // namespace ckpt::coll::store_server

// Which ranks the peer plane links (collectives/peer/peer_control_plane.h). A job of up to `direct_ranks` ranks links
// any two ranks that have something to say to each other. A larger one lays its ranks out row by row in a grid of
// ceil(sqrt(N)) columns and links each rank only to its neighbours, the ranks of its row and of its column: 2 sqrt(N)
// at most (510 at 65,536 ranks), where direct links reach every rank that sends to rank 0 (all of them, in a save).
//
// An all-to-all then takes two hops. A message from s to d goes first to the rank in s's row and d's column, which
// hands it on down that column to d. Where the last row is short and that rank does not exist (s in the last row, d in
// a column past its end), it goes up s's column to d's row instead and along that row to d. Either hop may be empty
// (s and d share a row or a column). A broadcast descends a binomial tree along row 0, then one down each column.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ckpt::coll {

// Jobs of up to this many ranks link any two ranks directly (CKPT_PEER_DIRECT_RANKS overrides it).
inline constexpr int kDefaultDirectRanks = 256;

class PeerGrid {
 public:
  // The routes of a world of `world_size` ranks: direct where world_size <= direct_ranks.
  PeerGrid(int world_size, int direct_ranks);

  bool direct() const { return direct_; }
  int world_size() const { return world_size_; }
  int columns() const { return columns_; }

  // The rank through which a message from `from` to `to` (two different ranks) passes: `from` itself where its
  // first hop is empty, `to` where its second is; `to` in a direct world.
  int Via(int from, int to) const;
  // The ranks `rank` exchanges with in each hop of a grid all-to-all, ascending: every rank of its row and of its
  // column but itself. Empty in a direct world.
  std::vector<int> Neighbours(int rank) const;
  // How many other ranks `rank` may link with: every one in a direct world, its neighbours in a grid.
  uint64_t PeersOf(int rank) const;
  // Whether two different ranks share a row or a column of the grid (any two do in a direct world).
  bool Neighbouring(int a, int b) const;

  // The broadcast tree rooted at rank 0: `rank`'s parent (-1 for rank 0) and its children, the largest subtree first.
  int BroadcastParent(int rank) const;
  std::vector<int> BroadcastChildren(int rank) const;

 private:
  int Row(int rank) const { return rank / columns_; }
  int Column(int rank) const { return rank % columns_; }
  // How many ranks column `column` holds: every row's, less the last row's where that row ends before the column.
  int RowsIn(int column) const;

  int world_size_;
  bool direct_;
  int columns_;
};

// The messages one rank hands another in one hop of a grid all-to-all, each with the rank it names (its receiver in
// the first hop, its sender in the second), ranks ascending: u32 count, then i32 rank and bytes for each. Empty
// messages are left out.
std::string EncodeHop(const std::map<int, std::string_view>& messages);
// The messages of a hop that rank `from` handed this one, each naming a rank of the world that `routed` accepts (a
// rank whose route runs through this one), ranks strictly ascending; kCorrupt naming `from` otherwise.
Result<std::map<int, std::string>> DecodeHop(std::string_view bundle, int from, int world_size,
                                             const std::function<bool(int)>& routed);

}  // namespace ckpt::coll

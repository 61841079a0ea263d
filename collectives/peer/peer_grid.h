// Which ranks the peer plane links (collectives/peer/peer_control_plane.h). A job of up to `direct_ranks` ranks links
// any two ranks that have something to say to each other. A larger one lays its ranks out in a grid of a few
// dimensions, a rank's coordinates being its digits in the grid's mixed radix (the first dimension the most
// significant), and links each rank only to its neighbours, the ranks that differ from it in one coordinate. The grid
// takes the fewest dimensions (at least two) that keep a rank's neighbours within a budget: 60 at 65,536 ranks, in
// 16 x 16 x 16 x 16, where a square grid would link 510 and direct links every rank that sends to rank 0 (all of them,
// in a save).
//
// An all-to-all then takes one hop per dimension; in each a message moves along at most one dimension, to the
// coordinate of its receiver. It first lowers the coordinates where its receiver's are lower, then raises those where
// they are higher, each set in dimension order: every rank it passes through then exists even where the grid's last
// rows are short (its coordinates are never above both its sender's and its receiver's). A message whose sender and
// receiver differ in fewer coordinates rests at its receiver for the remaining hops. A broadcast descends a binomial
// tree along the first dimension from rank 0, then along each next one in turn.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace ckpt::coll {

// Jobs of up to this many ranks link any two ranks directly (CKPT_PEER_DIRECT_RANKS overrides it).
inline constexpr int kDefaultDirectRanks = 256;
// The most neighbours a grid gives a rank, but where even a grid of two ranks along every dimension has more. With
// two descriptors per link (one opened, one accepted) and the store's relays beside them, the busiest rank of a job
// of 65,536 ranks stays under 512 descriptors (collectives/store/store_relay.h).
inline constexpr int kGridPeerBudget = 64;

class PeerGrid {
 public:
  // The routes of a world of `world_size` ranks: direct where world_size <= direct_ranks, else a grid of the fewest
  // dimensions that gives no rank more than `peer_budget` neighbours.
  PeerGrid(int world_size, int direct_ranks, int peer_budget = kGridPeerBudget);

  bool direct() const { return extents_.size() == 1; }
  int world_size() const { return world_size_; }
  // The grid's extent along each dimension, the first the most significant; {world_size} in a direct world.
  const std::vector<int>& extents() const { return extents_; }
  // How many hops an all-to-all takes: one per dimension.
  int hops() const { return static_cast<int>(extents_.size()); }
  // The extents as text, "16 x 16 x 16 x 16".
  std::string Shape() const;

  // Where a message from `from` to `to` is after `hop` hops of an all-to-all (0 <= hop <= hops()): `from` after none,
  // `to` after all of them, each step along one dimension.
  int Position(int from, int to, int hop) const;
  // The ranks `rank` may exchange with in a hop of a grid all-to-all, ascending: every rank that differs from it in
  // one coordinate. Empty in a direct world.
  std::vector<int> Neighbours(int rank) const;
  // How many other ranks `rank` may link with: every one in a direct world, its neighbours in a grid.
  uint64_t PeersOf(int rank) const;
  // Whether two different ranks of the world differ in one coordinate (any two do in a direct world).
  bool Neighbouring(int a, int b) const;

  // The broadcast tree rooted at rank 0: `rank`'s parent (-1 for rank 0) and its children, the largest subtree first.
  int BroadcastParent(int rank) const;
  std::vector<int> BroadcastChildren(int rank) const;

 private:
  int Digit(int rank, size_t dimension) const;
  // How many ranks of the world share all of `rank`'s coordinates but the one of `dimension`: that coordinate's
  // values run from 0 to one less, the world ending within the grid's last rows.
  int ExtentAt(int rank, size_t dimension) const;

  int world_size_;
  std::vector<int> extents_;
  std::vector<int64_t> strides_;  // per dimension: how far apart two ranks one step apart along it are
};

// The messages one rank hands another in one hop of a grid all-to-all, each under its (sender, receiver), in
// ascending order: u32 count, then i32 sender, i32 receiver and bytes for each. Empty messages are left out.
std::string EncodeHop(const std::map<std::pair<int, int>, std::string_view>& messages);
// The messages of a hop that rank `from` handed this one, each under a (sender, receiver) of two different ranks of
// the world that `routed` accepts (a pair whose route runs from `from` to this rank in this hop), pairs strictly
// ascending; kCorrupt naming `from` otherwise.
Result<std::map<std::pair<int, int>, std::string>> DecodeHop(std::string_view bundle, int from, int world_size,
                                                             const std::function<bool(int, int)>& routed);

}  // namespace ckpt::coll

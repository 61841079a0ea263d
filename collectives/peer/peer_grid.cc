#include "collectives/peer/peer_grid.h"

#include <algorithm>
#include <utility>

#include "common/bytes.h"

namespace ckpt::coll {
namespace {

// Index i's parent in a binomial tree over [0, n) rooted at 0: i without its highest bit.
int TreeParent(int index) {
  int highest = 1;
  while (highest * 2 <= index) highest *= 2;
  return index - highest;
}

// Index i's children in a binomial tree over [0, n), the largest subtree first so that the deepest branch starts
// soonest: i + 2^k for every 2^k above i that stays inside [0, n).
std::vector<int> TreeChildren(int index, int n) {
  int step = 1;
  while (step <= index) step *= 2;
  std::vector<int> children;
  for (; index + step < n; step *= 2) children.push_back(index + step);
  std::reverse(children.begin(), children.end());
  return children;
}

// side^dimensions, or `cap` + 1 if that is more than `cap`.
int64_t PowerUpTo(int64_t side, int dimensions, int64_t cap) {
  int64_t power = 1;
  for (int i = 0; i < dimensions; ++i) {
    power *= side;
    if (power > cap) return cap + 1;
  }
  return power;
}

// The fewest dimensions (at least two) whose grid gives no rank more than `peer_budget` neighbours, or the grid of
// extent two along every dimension where none does. Every dimension but the first spans the least `side` with
// side^dimensions >= world; the first as many as the world needs, so that the grid's last rows are the short ones.
std::vector<int> GridExtents(int world_size, int peer_budget) {
  for (int dimensions = 2;; ++dimensions) {
    int64_t side = 1;
    while (PowerUpTo(side, dimensions, world_size) < world_size) ++side;
    const int64_t inner = PowerUpTo(side, dimensions - 1, world_size);
    const auto outer = static_cast<int>((world_size + inner - 1) / inner);
    const bool smallest = side <= 2;
    if (outer == 1 && !smallest) continue;  // the grid of one dimension less, already too wide
    const int64_t peers = (outer - 1) + (dimensions - 1) * (side - 1);
    if (peers <= peer_budget || smallest) {
      std::vector<int> extents(dimensions, static_cast<int>(side));
      extents[0] = outer;
      return extents;
    }
  }
}

}  // namespace

PeerGrid::PeerGrid(int world_size, int direct_ranks, int peer_budget) : world_size_(std::max(world_size, 1)) {
  extents_ = world_size_ <= direct_ranks ? std::vector<int>{world_size_} : GridExtents(world_size_, peer_budget);
  strides_.assign(extents_.size(), 1);
  for (size_t d = extents_.size() - 1; d > 0; --d) strides_[d - 1] = strides_[d] * extents_[d];
}

std::string PeerGrid::Shape() const {
  std::string shape;
  for (int extent : extents_) shape += (shape.empty() ? "" : " x ") + std::to_string(extent);
  return shape;
}

int PeerGrid::Digit(int rank, size_t dimension) const {
  const int64_t above = rank / strides_[dimension];
  return static_cast<int>(dimension == 0 ? above : above % extents_[dimension]);
}

int PeerGrid::ExtentAt(int rank, size_t dimension) const {
  const int64_t base = rank - Digit(rank, dimension) * strides_[dimension];
  return static_cast<int>(std::min<int64_t>(extents_[dimension], (world_size_ - 1 - base) / strides_[dimension] + 1));
}

int PeerGrid::Position(int from, int to, int hop) const {
  int64_t at = from;
  int taken = 0;
  for (const bool raising : {false, true}) {
    for (size_t d = 0; d < extents_.size(); ++d) {
      const int f = Digit(from, d);
      const int t = Digit(to, d);
      if (raising ? t <= f : t >= f) continue;
      if (taken == hop) return static_cast<int>(at);
      at += (t - f) * strides_[d];
      ++taken;
    }
  }
  return static_cast<int>(at);
}

std::vector<int> PeerGrid::Neighbours(int rank) const {
  std::vector<int> neighbours;
  if (direct()) return neighbours;
  for (size_t d = 0; d < extents_.size(); ++d) {
    const int64_t base = rank - Digit(rank, d) * strides_[d];
    for (int v = 0; v < ExtentAt(rank, d); ++v) {
      const auto r = static_cast<int>(base + v * strides_[d]);
      if (r != rank) neighbours.push_back(r);
    }
  }
  std::sort(neighbours.begin(), neighbours.end());
  return neighbours;
}

uint64_t PeerGrid::PeersOf(int rank) const {
  return direct() ? static_cast<uint64_t>(world_size_ - 1) : Neighbours(rank).size();
}

bool PeerGrid::Neighbouring(int a, int b) const {
  if (a == b || a < 0 || b < 0 || a >= world_size_ || b >= world_size_) return false;
  int differing = 0;
  for (size_t d = 0; d < extents_.size(); ++d) differing += Digit(a, d) != Digit(b, d) ? 1 : 0;
  return differing == 1;
}

// A rank's parent lowers its first coordinate that is not 0 as a binomial tree along that dimension would.
int PeerGrid::BroadcastParent(int rank) const {
  if (rank == 0) return -1;
  size_t d = 0;
  while (Digit(rank, d) == 0) ++d;
  return static_cast<int>(rank + (TreeParent(Digit(rank, d)) - Digit(rank, d)) * strides_[d]);
}

// The children along the last dimension of those the rank's zeros allow come first: each of their subtrees spans
// every later dimension.
std::vector<int> PeerGrid::BroadcastChildren(int rank) const {
  size_t last = 0;
  while (last + 1 < extents_.size() && Digit(rank, last) == 0) ++last;
  std::vector<int> children;
  for (size_t d = last + 1; d-- > 0;) {
    const int digit = Digit(rank, d);
    for (int child : TreeChildren(digit, ExtentAt(rank, d))) {
      children.push_back(static_cast<int>(rank + (child - digit) * strides_[d]));
    }
  }
  return children;
}

std::string EncodeHop(const std::map<std::pair<int, int>, std::string_view>& messages) {
  ByteWriter out;
  uint32_t count = 0;
  for (const auto& [route, message] : messages) count += message.empty() ? 0 : 1;
  out.U32(count);
  for (const auto& [route, message] : messages) {
    if (message.empty()) continue;
    out.I32(route.first);
    out.I32(route.second);
    out.Bytes(message);
  }
  return out.data();
}

Result<std::map<std::pair<int, int>, std::string>> DecodeHop(std::string_view bundle, int from, int world_size,
                                                             const std::function<bool(int, int)>& routed) {
  const std::string what = "the all-to-all messages rank " + std::to_string(from) + " handed on";
  ByteReader reader(bundle, what);
  uint32_t count = 0;
  const auto most = static_cast<uint32_t>(std::min<uint64_t>(uint64_t{1} << 31, uint64_t(world_size) * world_size));
  RETURN_IF_ERROR(reader.Count(&count, most, 2 * sizeof(int32_t) + sizeof(uint64_t)));
  std::map<std::pair<int, int>, std::string> messages;
  std::pair<int, int> previous{-1, -1};
  for (uint32_t i = 0; i < count; ++i) {
    int32_t sender = 0;
    int32_t receiver = 0;
    RETURN_IF_ERROR(reader.I32(&sender));
    RETURN_IF_ERROR(reader.I32(&receiver));
    const std::pair<int, int> route{sender, receiver};
    const std::string named =
        what + " name a message from rank " + std::to_string(sender) + " to rank " + std::to_string(receiver);
    if (route <= previous || sender < 0 || receiver < 0 || sender >= world_size || receiver >= world_size ||
        sender == receiver) {
      return Corrupt(named + ", out of order or outside the world of " + std::to_string(world_size));
    }
    if (!routed(sender, receiver)) return Corrupt(named + ", which does not pass that way");
    RETURN_IF_ERROR(reader.Bytes(&messages[route]));
    previous = route;
  }
  RETURN_IF_ERROR(reader.ExpectDone());
  return messages;
}

}  // namespace ckpt::coll

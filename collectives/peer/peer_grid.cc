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

// The least c with c * c >= n.
int CeilSqrt(int n) {
  int c = 1;
  while (static_cast<int64_t>(c) * c < n) ++c;
  return c;
}

}  // namespace

PeerGrid::PeerGrid(int world_size, int direct_ranks)
    : world_size_(std::max(world_size, 1)),
      direct_(world_size_ <= direct_ranks),
      columns_(direct_ ? world_size_ : CeilSqrt(world_size_)) {}

int PeerGrid::RowsIn(int column) const {
  const int rows = (world_size_ + columns_ - 1) / columns_;
  const int last_row_length = world_size_ - (rows - 1) * columns_;
  return column < last_row_length ? rows : rows - 1;
}

int PeerGrid::Via(int from, int to) const {
  if (direct_) return to;
  const int along_row_first = Row(from) * columns_ + Column(to);
  if (along_row_first < world_size_) return along_row_first;
  // `from` is in the short last row and `to` in a column past its end, so in an earlier, full row.
  return Row(to) * columns_ + Column(from);
}

std::vector<int> PeerGrid::Neighbours(int rank) const {
  std::vector<int> neighbours;
  if (direct_) return neighbours;
  for (int c = 0; c < columns_; ++c) {
    const int r = Row(rank) * columns_ + c;
    if (r < world_size_ && r != rank) neighbours.push_back(r);
  }
  for (int row = 0; row < RowsIn(Column(rank)); ++row) {
    const int r = row * columns_ + Column(rank);
    if (r != rank) neighbours.push_back(r);
  }
  std::sort(neighbours.begin(), neighbours.end());
  return neighbours;
}

uint64_t PeerGrid::PeersOf(int rank) const {
  return direct_ ? static_cast<uint64_t>(world_size_ - 1) : Neighbours(rank).size();
}

bool PeerGrid::Neighbouring(int a, int b) const {
  return a != b && (direct_ || Row(a) == Row(b) || Column(a) == Column(b));
}

int PeerGrid::BroadcastParent(int rank) const {
  if (rank == 0) return -1;
  if (direct_) return TreeParent(rank);
  if (Row(rank) > 0) return TreeParent(Row(rank)) * columns_ + Column(rank);
  return TreeParent(Column(rank));
}

std::vector<int> PeerGrid::BroadcastChildren(int rank) const {
  if (direct_) return TreeChildren(rank, world_size_);
  std::vector<int> children;
  // Row 0 spreads the message across the columns, then each column carries it down; the row's subtrees hold whole
  // columns, so they go first.
  if (Row(rank) == 0) children = TreeChildren(Column(rank), columns_);
  for (int row : TreeChildren(Row(rank), RowsIn(Column(rank)))) children.push_back(row * columns_ + Column(rank));
  return children;
}

std::string EncodeHop(const std::map<int, std::string_view>& messages) {
  ByteWriter out;
  uint32_t count = 0;
  for (const auto& [rank, message] : messages) count += message.empty() ? 0 : 1;
  out.U32(count);
  for (const auto& [rank, message] : messages) {
    if (message.empty()) continue;
    out.I32(rank);
    out.Bytes(message);
  }
  return out.data();
}

Result<std::map<int, std::string>> DecodeHop(std::string_view bundle, int from, int world_size,
                                             const std::function<bool(int)>& routed) {
  const std::string what = "the all-to-all messages rank " + std::to_string(from) + " handed on";
  ByteReader reader(bundle, what);
  uint32_t count = 0;
  RETURN_IF_ERROR(reader.Count(&count, static_cast<uint32_t>(world_size), sizeof(int32_t) + sizeof(uint64_t)));
  std::map<int, std::string> messages;
  int previous = -1;
  for (uint32_t i = 0; i < count; ++i) {
    int32_t rank = 0;
    RETURN_IF_ERROR(reader.I32(&rank));
    if (rank <= previous || rank >= world_size) {
      return Corrupt(what + " name rank " + std::to_string(rank) + " out of order or outside the world of " +
                     std::to_string(world_size));
    }
    if (!routed(rank)) {
      return Corrupt(what + " name rank " + std::to_string(rank) + ", whose messages do not pass that way");
    }
    RETURN_IF_ERROR(reader.Bytes(&messages[rank]));
    previous = rank;
  }
  RETURN_IF_ERROR(reader.ExpectDone());
  return messages;
}

}  // namespace ckpt::coll

// The peer plane's grid (collectives/peer/peer_grid.h): which ranks a large job links, the routes of its all-to-alls,
// its broadcast tree and the bundles a hop hands on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "collectives/peer/peer_grid.h"
#include "common/bytes.h"

namespace ckpt::coll {
namespace {

// Full grids, grids whose last rows are short by one, and grids whose last row holds a single rank.
const std::vector<int> kWorlds = {2, 3, 5, 7, 8, 9, 10, 12, 13, 17, 27, 30, 31, 64, 65, 100, 101, 257, 1000};
// The default budget (two dimensions for all of kWorlds), budgets that take three or four, and the grid of two ranks
// along every dimension.
const std::vector<int> kBudgets = {kGridPeerBudget, 8, 4, 0};

TEST(PeerGridTest, EveryRouteStepsAlongOneDimensionPerHopThroughRanksOfTheWorldToItsReceiver) {
  for (const int world : kWorlds) {
    for (const int budget : kBudgets) {
      const PeerGrid grid(world, 1, budget);
      ASSERT_FALSE(grid.direct());
      // Every pair of the smaller worlds; of the larger, a sample that still takes every row.
      const int step = 1 + world / 128;
      for (int from = 0; from < world; from += step) {
        for (int to = world - 1; to >= 0; to -= step) {
          if (from == to) continue;
          const std::string route = "world " + std::to_string(world) + " in " + grid.Shape() + ": " +
                                    std::to_string(from) + " -> " + std::to_string(to);
          EXPECT_EQ(grid.Position(from, to, 0), from) << route;
          EXPECT_EQ(grid.Position(from, to, grid.hops()), to) << route;
          for (int hop = 1; hop <= grid.hops(); ++hop) {
            const int before = grid.Position(from, to, hop - 1);
            const int after = grid.Position(from, to, hop);
            ASSERT_GE(after, 0) << route;
            ASSERT_LT(after, world) << route << " passes through a rank outside the world";
            EXPECT_TRUE(after == before || grid.Neighbouring(before, after)) << route << ", hop " << hop;
            // Once at its receiver, a message rests there.
            if (before == to) EXPECT_EQ(after, to) << route << ", hop " << hop;
          }
        }
      }
    }
  }
}

TEST(PeerGridTest, AGridTakesTheFewestDimensionsThatKeepEveryRanksNeighboursWithinItsBudget) {
  EXPECT_EQ(PeerGrid(13, 1).extents(), (std::vector<int>{4, 4}));
  EXPECT_EQ(PeerGrid(1000, 256).extents(), (std::vector<int>{32, 32}));
  EXPECT_EQ(PeerGrid(4096, 256).extents(), (std::vector<int>{16, 16, 16}));
  EXPECT_EQ(PeerGrid(16384, 256).extents(), (std::vector<int>{10, 12, 12, 12}));
  EXPECT_EQ(PeerGrid(65536, 256).extents(), (std::vector<int>{16, 16, 16, 16}));
  EXPECT_EQ(PeerGrid(65536, 256).Shape(), "16 x 16 x 16 x 16");
  EXPECT_EQ(PeerGrid(65536, 256).PeersOf(0), 60u);
  // Without a budget that binds, the square grid: 510 neighbours at 65,536 ranks.
  EXPECT_EQ(PeerGrid(65536, 256, 1 << 20).Neighbours(0).size(), 510u);
  // Where no grid fits the budget, two ranks along every dimension.
  EXPECT_EQ(PeerGrid(13, 1, 0).extents(), (std::vector<int>{2, 2, 2, 2}));
  for (const int world : {13, 1000, 4096, 16384, 65536}) {
    for (const int budget : kBudgets) {
      const PeerGrid grid(world, 1, budget);
      const bool smallest = std::all_of(grid.extents().begin() + 1, grid.extents().end(), [](int e) { return e == 2; });
      for (int rank = 0; rank < world; rank += 1 + world / 300) {
        const std::vector<int> neighbours = grid.Neighbours(rank);
        if (!smallest) EXPECT_LE(static_cast<int>(neighbours.size()), budget) << world << ": rank " << rank;
        EXPECT_EQ(neighbours.size(), grid.PeersOf(rank));
        for (int other = 0; other < world; other += 1 + world / 300) {
          const bool listed = std::find(neighbours.begin(), neighbours.end(), other) != neighbours.end();
          EXPECT_EQ(listed, grid.Neighbouring(rank, other)) << world << ": " << rank << " and " << other;
        }
      }
    }
  }
}

TEST(PeerGridTest, TheBroadcastTreeReachesEveryRankOnceOverLinksBetweenNeighbours) {
  for (const int world : kWorlds) {
    for (const int direct_ranks : {1, 1 << 20}) {
      for (const int budget : kBudgets) {
        const PeerGrid grid(world, direct_ranks, budget);
        std::vector<int> reached(world, 0);
        std::vector<int> depth(world, 0);
        std::deque<int> pending = {0};
        reached[0] = 1;
        while (!pending.empty()) {
          const int rank = pending.front();
          pending.pop_front();
          for (int child : grid.BroadcastChildren(rank)) {
            ASSERT_GT(child, 0);
            ASSERT_LT(child, world);
            EXPECT_EQ(grid.BroadcastParent(child), rank) << world << ": " << child;
            EXPECT_TRUE(grid.Neighbouring(rank, child)) << world << ": " << rank << " -> " << child;
            ++reached[child];
            depth[child] = depth[rank] + 1;
            pending.push_back(child);
          }
        }
        for (int rank = 0; rank < world; ++rank) EXPECT_EQ(reached[rank], 1) << world << ": rank " << rank;
        // Rank 0 sends no more copies, and the message travels no deeper, than a binomial tree's ceil(log2 N) and
        // one more for each further dimension's tree.
        const int log2 = static_cast<int>(std::ceil(std::log2(world)));
        EXPECT_LE(static_cast<int>(grid.BroadcastChildren(0).size()), log2 + grid.hops() - 1) << grid.Shape();
        EXPECT_LE(*std::max_element(depth.begin(), depth.end()), log2 + grid.hops() - 1) << grid.Shape();
        EXPECT_EQ(grid.BroadcastParent(0), -1);
      }
    }
  }
}

TEST(PeerGridTest, AWorldUpToTheDirectRanksRoutesStraightAndLinksAnyTwoRanks) {
  const PeerGrid grid(256, 256);
  EXPECT_TRUE(grid.direct());
  EXPECT_EQ(grid.hops(), 1);
  EXPECT_EQ(grid.Position(3, 200, 1), 200);
  EXPECT_TRUE(grid.Neighbouring(3, 200));
  EXPECT_TRUE(grid.Neighbours(3).empty());
  EXPECT_FALSE(PeerGrid(257, 256).direct());
}

bool Any(int, int) { return true; }

TEST(PeerGridTest, AHopsMessagesComeBackAsEncodedLeavingOutTheEmptyOnes) {
  const std::string big(70000, 'x');
  const std::map<std::pair<int, int>, std::string_view> sent = {{{1, 3}, "one"}, {{1, 4}, ""}, {{6, 0}, big}};
  const std::string bundle = EncodeHop(sent);
  auto received = DecodeHop(bundle, 2, 8, Any);
  ASSERT_TRUE(received.ok()) << received.status().message();
  EXPECT_EQ(*received, (std::map<std::pair<int, int>, std::string>{{{1, 3}, "one"}, {{6, 0}, big}}));
  auto nothing = DecodeHop(EncodeHop({}), 2, 8, Any);
  ASSERT_TRUE(nothing.ok());
  EXPECT_TRUE(nothing->empty());
}

std::string Bundle(const std::vector<std::pair<int, int>>& routes) {
  ByteWriter out;
  out.U32(static_cast<uint32_t>(routes.size()));
  for (const auto& [sender, receiver] : routes) {
    out.I32(sender);
    out.I32(receiver);
    out.Bytes("m");
  }
  return out.data();
}

TEST(PeerGridTest, AHopNamingARouteItDoesNotTakeOrOutOfOrderOrOutsideTheWorldIsCorruptNamingItsSender) {
  const auto even_senders = [](int sender, int) { return sender % 2 == 0; };
  for (const std::string& bundle :
       {Bundle({{2, 1}, {3, 1}}), Bundle({{4, 1}, {2, 1}}), Bundle({{2, 1}, {2, 1}}), Bundle({{-2, 1}}),
        Bundle({{8, 1}}), Bundle({{2, 8}}), Bundle({{2, -1}}), Bundle({{2, 2}})}) {
    const auto received = DecodeHop(bundle, 5, 8, even_senders);
    EXPECT_EQ(received.status().code(), Code::kCorrupt);
    EXPECT_NE(received.status().message().find("rank 5"), std::string::npos) << received.status().message();
  }
  const std::string whole = Bundle({{2, 1}, {2, 3}, {4, 0}});
  ASSERT_TRUE(DecodeHop(whole, 5, 8, even_senders).ok());
  for (size_t cut = 0; cut < whole.size(); ++cut) {
    EXPECT_EQ(DecodeHop(whole.substr(0, cut), 5, 8, even_senders).status().code(), Code::kCorrupt) << cut;
  }
  EXPECT_EQ(DecodeHop(whole + "!", 5, 8, even_senders).status().code(), Code::kCorrupt);
  ByteWriter too_many;
  too_many.U32(65);
  EXPECT_EQ(DecodeHop(too_many.data() + std::string(200, '\0'), 5, 8, even_senders).status().code(), Code::kCorrupt);
}

}  // namespace
}  // namespace ckpt::coll

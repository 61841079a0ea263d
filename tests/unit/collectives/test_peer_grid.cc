// The peer plane's grid (collectives/peer/peer_grid.h): which ranks a large job links, the routes of its all-to-alls,
// its broadcast tree and the bundles a hop hands on.
#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "collectives/peer/peer_grid.h"
#include "common/bytes.h"

namespace ckpt::coll {
namespace {

// Full grids, grids whose last row is short by one, and grids whose last row holds a single rank.
const std::vector<int> kWorlds = {2, 3, 5, 7, 9, 10, 12, 13, 17, 30, 31, 64, 65, 100, 101, 257, 1000};

TEST(PeerGridTest, EveryRouteTakesAtMostOneHopAlongARowOrColumnAndOneAlongTheOther) {
  for (const int world : kWorlds) {
    const PeerGrid grid(world, 1);
    ASSERT_FALSE(grid.direct());
    for (int from = 0; from < world; ++from) {
      for (int to = 0; to < world; ++to) {
        if (from == to) continue;
        const int via = grid.Via(from, to);
        ASSERT_GE(via, 0);
        ASSERT_LT(via, world) << "world " << world << ": " << from << " -> " << to << " via a rank outside it";
        EXPECT_TRUE(via == from || grid.Neighbouring(from, via)) << world << ": " << from << " -> " << to;
        EXPECT_TRUE(via == to || grid.Neighbouring(via, to)) << world << ": " << from << " -> " << to;
      }
    }
  }
}

TEST(PeerGridTest, ARanksNeighboursAreItsRowAndColumnAtMostTwiceTheRootOfTheWorld) {
  for (const int world : {13, 1000, 65536}) {
    const PeerGrid grid(world, 1);
    const int bound = 2 * (grid.columns() - 1);
    EXPECT_LE(grid.columns(), static_cast<int>(std::ceil(std::sqrt(world))));
    for (int rank = 0; rank < world; rank += 1 + world / 500) {
      const std::vector<int> neighbours = grid.Neighbours(rank);
      EXPECT_LE(static_cast<int>(neighbours.size()), bound);
      for (int other = 0; other < world; other += 1 + world / 500) {
        const bool listed = std::find(neighbours.begin(), neighbours.end(), other) != neighbours.end();
        EXPECT_EQ(listed, grid.Neighbouring(rank, other)) << world << ": " << rank << " and " << other;
      }
    }
  }
  EXPECT_EQ(PeerGrid(65536, 256).Neighbours(0).size(), 510u);
}

TEST(PeerGridTest, TheBroadcastTreeReachesEveryRankOnceOverLinksBetweenNeighbours) {
  for (const int world : kWorlds) {
    for (const int direct_ranks : {1, 1 << 20}) {
      const PeerGrid grid(world, direct_ranks);
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
      // one more for the grid's two trees.
      const int log2 = static_cast<int>(std::ceil(std::log2(world)));
      EXPECT_LE(static_cast<int>(grid.BroadcastChildren(0).size()), log2 + (grid.direct() ? 0 : 1));
      EXPECT_LE(*std::max_element(depth.begin(), depth.end()), log2 + (grid.direct() ? 0 : 1));
      EXPECT_EQ(grid.BroadcastParent(0), -1);
    }
  }
}

TEST(PeerGridTest, AWorldUpToTheDirectRanksRoutesStraightAndLinksAnyTwoRanks) {
  const PeerGrid grid(256, 256);
  EXPECT_TRUE(grid.direct());
  EXPECT_EQ(grid.Via(3, 200), 200);
  EXPECT_TRUE(grid.Neighbouring(3, 200));
  EXPECT_TRUE(grid.Neighbours(3).empty());
  EXPECT_FALSE(PeerGrid(257, 256).direct());
}

bool Any(int) { return true; }

TEST(PeerGridTest, AHopsMessagesComeBackAsEncodedLeavingOutTheEmptyOnes) {
  const std::string big(70000, 'x');
  const std::map<int, std::string_view> sent = {{1, "one"}, {4, ""}, {6, big}};
  const std::string bundle = EncodeHop(sent);
  Result<std::map<int, std::string>> received = DecodeHop(bundle, 2, 8, Any);
  ASSERT_TRUE(received.ok()) << received.status().message();
  EXPECT_EQ(*received, (std::map<int, std::string>{{1, "one"}, {6, big}}));
  Result<std::map<int, std::string>> nothing = DecodeHop(EncodeHop({}), 2, 8, Any);
  ASSERT_TRUE(nothing.ok());
  EXPECT_TRUE(nothing->empty());
}

std::string Bundle(const std::vector<int>& ranks) {
  ByteWriter out;
  out.U32(static_cast<uint32_t>(ranks.size()));
  for (int rank : ranks) {
    out.I32(rank);
    out.Bytes("m");
  }
  return out.data();
}

TEST(PeerGridTest, AHopNamingARankItDoesNotRouteOrOutOfOrderOrOutsideTheWorldIsCorruptNamingItsSender) {
  const auto even = [](int rank) { return rank % 2 == 0; };
  for (const std::string& bundle : {Bundle({2, 3}), Bundle({4, 2}), Bundle({2, 2}), Bundle({-2}), Bundle({8})}) {
    const Result<std::map<int, std::string>> received = DecodeHop(bundle, 5, 8, even);
    EXPECT_EQ(received.status().code(), Code::kCorrupt);
    EXPECT_NE(received.status().message().find("rank 5"), std::string::npos) << received.status().message();
  }
  const std::string whole = Bundle({2, 4});
  for (size_t cut = 0; cut < whole.size(); ++cut) {
    EXPECT_EQ(DecodeHop(whole.substr(0, cut), 5, 8, even).status().code(), Code::kCorrupt) << cut;
  }
  EXPECT_EQ(DecodeHop(whole + "!", 5, 8, even).status().code(), Code::kCorrupt);
  ByteWriter too_many;
  too_many.U32(9);
  EXPECT_EQ(DecodeHop(too_many.data() + std::string(200, '\0'), 5, 8, even).status().code(), Code::kCorrupt);
}

}  // namespace
}  // namespace ckpt::coll

// The gate that decides which strangers a listening server holds (collectives/store/store_strangers.h), on made-up
// times.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "collectives/store/store_strangers.h"

namespace ckpt::coll {
namespace {

using Clock = StrangerGate::Clock;
using std::chrono::milliseconds;

const Clock::time_point kStart = Clock::now();

std::vector<StrangerGate::Id> AdmitMany(StrangerGate& gate, const std::string& source, size_t count,
                                        Clock::time_point at) {
  std::vector<StrangerGate::Id> ids;
  for (size_t i = 0; i < count; ++i) ids.push_back(gate.Admit(source, at));
  return ids;
}

TEST(StrangerGateTest, AStrangerWithinItsFairChanceIsNeverChosenToGo) {
  StrangerGate gate;
  const auto ids = AdmitMany(gate, "10.0.0.1", kMaxStrangersPerSource, kStart);
  EXPECT_FALSE(gate.HasRoomFor("10.0.0.1"));
  EXPECT_EQ(gate.VictimFor("10.0.0.1", kStart + kFairChance - milliseconds(1)), std::nullopt);
  EXPECT_EQ(gate.VictimFor("10.0.0.1", kStart + kFairChance), ids.front());
}

TEST(StrangerGateTest, MakingRoomClosesOnlyTheOldestPastTheirFairChanceAndForgetsThem) {
  StrangerGate gate;
  const auto ids = AdmitMany(gate, "10.0.0.1", kMaxStrangersPerSource, kStart);
  std::vector<StrangerGate::Id> closed;
  const auto close = [&](StrangerGate::Id id) { closed.push_back(id); };
  EXPECT_FALSE(gate.MakeRoomFor("10.0.0.1", kStart + kFairChance - milliseconds(1), close));
  EXPECT_TRUE(closed.empty());
  EXPECT_TRUE(gate.MakeRoomFor("10.0.0.1", kStart + kFairChance, close));
  EXPECT_EQ(closed, std::vector<StrangerGate::Id>{ids.front()});
  EXPECT_TRUE(gate.HasRoomFor("10.0.0.1"));
}

TEST(StrangerGateTest, OneSourceFillsOnlyItsShareAndOthersStillFit) {
  StrangerGate gate;
  AdmitMany(gate, "10.0.0.1", kMaxStrangersPerSource, kStart);
  EXPECT_FALSE(gate.HasRoomFor("10.0.0.1"));
  EXPECT_TRUE(gate.HasRoomFor("10.0.0.2"));
  EXPECT_TRUE(gate.Open(kStart));
}

TEST(StrangerGateTest, ASourceAtItsShareLosesItsOwnOldestStrangerNotAnothers) {
  StrangerGate gate;
  const StrangerGate::Id elder = gate.Admit("10.0.0.2", kStart);
  const auto own = AdmitMany(gate, "10.0.0.1", kMaxStrangersPerSource, kStart + milliseconds(1));
  EXPECT_EQ(gate.VictimFor("10.0.0.1", kStart + kFairChance + milliseconds(1)), own.front());
  EXPECT_NE(own.front(), elder);
}

TEST(StrangerGateTest, AFullGateClosesUntilItsOldestStrangerHasHadItsChance) {
  StrangerGate gate;
  const auto first = AdmitMany(gate, "10.0.0.1", kMaxStrangersPerSource, kStart);
  AdmitMany(gate, "10.0.0.2", kMaxStrangers - kMaxStrangersPerSource, kStart + milliseconds(10));
  EXPECT_FALSE(gate.Open(kStart + milliseconds(10)));
  EXPECT_EQ(gate.ReopensAt(kStart + milliseconds(10)), kStart + kFairChance);
  EXPECT_TRUE(gate.Open(kStart + kFairChance));
  EXPECT_EQ(gate.VictimFor("10.0.0.3", kStart + kFairChance), first.front());
}

TEST(StrangerGateTest, AStrangerThatProvesItselfFreesItsSlot) {
  StrangerGate gate;
  const auto ids = AdmitMany(gate, "10.0.0.1", kMaxStrangersPerSource, kStart);
  gate.Forget(ids[5]);
  EXPECT_TRUE(gate.HasRoomFor("10.0.0.1"));
  gate.Admit("10.0.0.1", kStart);
  gate.Forget(ids[5]);  // forgetting twice frees nothing more
  EXPECT_FALSE(gate.HasRoomFor("10.0.0.1"));
}

}  // namespace
}  // namespace ckpt::coll

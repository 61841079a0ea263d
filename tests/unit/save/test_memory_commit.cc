// The commit of a memory-tier save across nodes (runtime/save/memory_commit.h), with rank 0 on node 0 and rank 1 the
// leader of node 1, each with a memory directory of its own: node 1 holds the manifest rank 0 committed before
// either node announces, and a node that cannot publish fails the save on both, leaving no copy behind.
// ctest-labels: threaded
#include <gtest/gtest.h>

#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "io/file_io.h"
#include "runtime/save/memory_commit.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::runtime {
namespace {

// Two ranks' commit channel in memory: reports and outcomes by key, waited for under one lock.
class TwoRankChannel : public CommitChannel {
 public:
  Status PostReport(const std::string& id, int rank, const Status& status, const std::string& report) override {
    Put(id + "/report/" + std::to_string(rank), status, report);
    return Status::Ok();
  }
  Result<std::vector<std::string>> CollectReports(const std::string& id) override {
    std::vector<std::string> reports;
    for (int rank = 0; rank < 2; ++rank) {
      const Posted posted = Take(id + "/report/" + std::to_string(rank));
      if (!posted.status.ok())
        return Status(posted.status.code(), "rank " + std::to_string(rank) + ": " + posted.status.message());
      reports.push_back(posted.payload);
    }
    return reports;
  }
  Status PostOutcome(const std::string& id, const Status& outcome, const std::string& payload) override {
    Put(id + "/outcome", outcome, payload);
    return Status::Ok();
  }
  Status AwaitOutcome(const std::string& id, std::string* payload) override {
    const Posted posted = Take(id + "/outcome");
    if (payload != nullptr) *payload = posted.payload;
    return posted.status;
  }

 private:
  struct Posted {
    Status status;
    std::string payload;
  };
  void Put(const std::string& key, const Status& status, const std::string& payload) {
    std::lock_guard<std::mutex> lock(mu_);
    posted_[key] = Posted{status, payload};
    changed_.notify_all();
  }
  Posted Take(const std::string& key) {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return posted_.count(key) != 0; });
    return posted_[key];
  }
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, Posted> posted_;
};

class MemoryCommitTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    // Rank 0's copy is committed already (CommitSave); node 1's ranks wrote their file into its temporary.
    node0_ = MakeInputs(Path("node0"), 0, true);
    node1_ = MakeInputs(Path("node1"), 1, false);
    ASSERT_TRUE(io::MakeDirectories(node0_.path + "/data").ok());
    std::ofstream(node0_.path + "/MANIFEST") << "the manifest rank 0 built";
    std::ofstream(node0_.path + "/data/0-0.bin") << "node 0's data";
    ASSERT_TRUE(io::MakeDirectories(node1_.tmp_dir + "/data").ok());
    std::ofstream(node1_.tmp_dir + "/data/2-0.bin") << "node 1's data";
  }

  CommitInputs MakeInputs(const std::string& memory_dir, uint32_t node, bool leader_of_rank0) {
    CommitInputs inputs;
    inputs.path = memory_dir + "/ck";
    inputs.save_id = "00000000000000cd";
    inputs.tmp_dir = inputs.path + ".tmp-" + inputs.save_id;
    inputs.memory_nodes = MemoryNodes{node, 2, true, 1};
    std::vector<std::string>* announced = leader_of_rank0 ? &announced0_ : &announced1_;
    inputs.announce = [announced](const std::vector<std::string>& own) {
      *announced = own;
      announced->push_back("(announced)");
      return Status::Ok();
    };
    return inputs;
  }

  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // Runs both ranks' sides of the commit at once; returns their outcomes.
  std::pair<Status, Status> Commit() {
    TwoRankChannel channel;
    Status follower;
    std::thread node1([&] { follower = FollowCommitAcrossNodes(channel, node1_, 1); });
    bool second_awaited = false;
    const Status rank0 = CommitAcrossNodes(channel, node0_, Status::Ok(), {"0-0.bin"}, &second_awaited);
    EXPECT_TRUE(second_awaited);
    (void)channel.PostOutcome(NodesRoundId(node0_.save_id), rank0, {});  // as the save executor does
    node1.join();
    return {rank0, follower};
  }

  CommitInputs node0_, node1_;
  std::vector<std::string> announced0_, announced1_;
};

TEST_F(MemoryCommitTest, EveryNodeHoldsRankZerosManifestBeforeAnyAnnounces) {
  const auto [rank0, rank1] = Commit();
  ASSERT_TRUE(rank0.ok()) << rank0.message();
  ASSERT_TRUE(rank1.ok()) << rank1.message();
  EXPECT_EQ(Read(node1_.path + "/MANIFEST"), "the manifest rank 0 built");
  EXPECT_EQ(Read(node1_.path + "/data/2-0.bin"), "node 1's data");
  EXPECT_FALSE(io::PathExists(node1_.tmp_dir));
  // Each node announces the files its own ranks wrote.
  EXPECT_EQ(announced0_, (std::vector<std::string>{"0-0.bin", "(announced)"}));
  EXPECT_EQ(announced1_, (std::vector<std::string>{"2-0.bin", "(announced)"}));
}

TEST_F(MemoryCommitTest, ANodeThatCannotPublishFailsTheSaveOnEveryNodeAndLeavesNoCopy) {
  // A directory of that name on node 1 already: its rename fails.
  ASSERT_TRUE(io::MakeDirectories(node1_.path).ok());
  const auto [rank0, rank1] = Commit();
  EXPECT_FALSE(rank0.ok());
  EXPECT_NE(rank0.message().find("node 1"), std::string::npos) << rank0.message();
  EXPECT_FALSE(rank1.ok());
  EXPECT_TRUE(announced0_.empty());
  EXPECT_TRUE(announced1_.empty());
  EXPECT_FALSE(io::PathExists(node0_.path)) << "rank 0's committed copy stayed";
  EXPECT_FALSE(io::PathExists(node1_.tmp_dir)) << "node 1's temporary stayed";
  EXPECT_TRUE(io::IsDirectory(node1_.path)) << "what was there before is left alone";
}

TEST_F(MemoryCommitTest, AnAgentRefusingRankZerosAnnouncementFailsTheSaveAndRemovesEveryNodesCopy) {
  node0_.announce = [](const std::vector<std::string>&) { return PeerFailed("node 0's ckpt-agent died"); };
  const auto [rank0, rank1] = Commit();
  EXPECT_EQ(rank0.code(), Code::kPeerFailed) << rank0.message();
  EXPECT_EQ(rank1.code(), Code::kPeerFailed) << rank1.message();
  EXPECT_TRUE(announced1_.empty()) << "node 1 announced a checkpoint that failed";
  EXPECT_FALSE(io::PathExists(node0_.path));
  EXPECT_FALSE(io::PathExists(node1_.path)) << "node 1's renamed copy stayed";
}

}  // namespace
}  // namespace ckpt::runtime

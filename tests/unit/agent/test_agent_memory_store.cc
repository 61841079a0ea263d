// The agent's inventory of its memory directory (agent/memory_store.h): the budget, reservations,
// retention, idempotent completion and the adoption of what an earlier agent left; no socket involved.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "agent/memory_store.h"
#include "io/claimed_directory.h"
#include "io/file_io.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::agent {
namespace {

class AgentMemoryStoreTest : public testing::TempDirTest {
 protected:
  void SetUp() override { memory_ = Path("memory"); }

  std::unique_ptr<MemoryStore> Open(uint64_t budget) {
    Result<std::unique_ptr<MemoryStore>> store =
        MemoryStore::Open(memory_, "node-7", budget, [this](const std::string& line) { log_.push_back(line); });
    EXPECT_TRUE(store.ok()) << store.status().message();
    return store.ok() ? std::move(*store) : nullptr;
  }

  // A committed-looking checkpoint M/<name>: an 8-byte MANIFEST and one data file of `data_bytes`.
  void MakeCheckpoint(const std::string& name, size_t data_bytes) {
    ASSERT_TRUE(io::MakeDirectories(memory_ + "/" + name + "/data").ok());
    std::ofstream(memory_ + "/" + name + "/MANIFEST") << "manifest";
    std::ofstream(memory_ + "/" + name + "/data/0-0.bin") << std::string(data_bytes, 'x');
  }

  // Checkpoint "a" with one data file of `data_bytes`, then "b" after it: completing b removes a, whose data file
  // becomes the store's one recycled file.
  void RecycleOneFile(MemoryStore& store, size_t data_bytes) {
    MakeCheckpoint("a", data_bytes);
    MakeCheckpoint("b", 10);
    ASSERT_TRUE(store.Complete(1, "", Checkpoint("a"), false).ok());
    ASSERT_TRUE(store.Complete(1, "", Checkpoint("b"), false).ok());
    ASSERT_EQ(store.RecycledBytes(), data_bytes);
  }

  static MemoryCheckpoint Checkpoint(const std::string& name) {
    MemoryCheckpoint c;
    c.name = name;
    c.storage_path = "/storage/" + name;
    return c;
  }

  std::vector<std::string> Names(const MemoryStore& store) const {
    std::vector<std::string> names;
    for (const MemoryCheckpoint& c : store.List()) names.push_back(c.name);
    return names;
  }

  std::string memory_;
  std::vector<std::string> log_;
};

TEST_F(AgentMemoryStoreTest, ReserveBeyondTheBudgetIsNoSpaceNamingWhatHoldsIt) {
  auto store = Open(1000);
  MakeCheckpoint("a", 300);
  ASSERT_TRUE(store->Complete(1, "", Checkpoint("a"), false).ok());
  ASSERT_TRUE(store->Reserve(1, "b.tmp-1", 200).ok());
  Status refused = store->Reserve(2, "c.tmp-2", 600);
  ASSERT_EQ(refused.code(), Code::kNoSpace);
  for (const char* part : {"node-7", "1000 bytes", "'a' (308 bytes)", "200 bytes reserved",
                           "'c.tmp-2', which needs 600", "CKPT_AGENT_BUDGET_BYTES", "save to storage"}) {
    EXPECT_NE(refused.message().find(part), std::string::npos) << part << " missing in: " << refused.message();
  }
  EXPECT_TRUE(store->Reserve(2, "c.tmp-2", 492).ok()) << "exactly the rest of the budget fits";
}

TEST_F(AgentMemoryStoreTest, ReservationsCountUntilReleasedCompletedOrTheirSessionCloses) {
  auto store = Open(1000);
  ASSERT_TRUE(store->Reserve(1, "x.tmp-1", 600).ok());
  EXPECT_EQ(store->Reserve(2, "y.tmp-2", 500).code(), Code::kNoSpace);
  store->Release(1, "x.tmp-1");
  ASSERT_TRUE(store->Reserve(2, "y.tmp-2", 500).ok());
  EXPECT_EQ(store->Reserve(3, "z.tmp-3", 501).code(), Code::kNoSpace);
  store->ReleaseSession(2);
  ASSERT_TRUE(store->Reserve(3, "z.tmp-3", 1000).ok());
  MakeCheckpoint("z", 10);
  ASSERT_TRUE(store->Complete(3, "z.tmp-3", Checkpoint("z"), false).ok());
  EXPECT_TRUE(store->Reserve(4, "w.tmp-4", 1000 - 18).ok()) << "the reservation gave way to the checkpoint's size";
}

TEST_F(AgentMemoryStoreTest, ReserveRefusesNamesOutsideTheMemoryDirectory) {
  auto store = Open(1000);
  for (const char* name : {"", ".", "..", "../x", "a/b", ".hidden"}) {
    EXPECT_EQ(store->Reserve(1, name, 1).code(), Code::kInvalidArgument) << name;
  }
}

TEST_F(AgentMemoryStoreTest, ReleaseRemovesAnUnclaimedTemporaryButNotAClaimedOne) {
  auto store = Open(1000);
  ASSERT_TRUE(io::MakeDirectories(memory_ + "/dead.tmp-1/data").ok());
  Result<io::Claim> claim = io::ClaimDirectory(memory_ + "/live.tmp-2");
  ASSERT_TRUE(claim.ok());
  ASSERT_TRUE(store->Reserve(1, "dead.tmp-1", 10).ok());
  ASSERT_TRUE(store->Reserve(1, "live.tmp-2", 10).ok());
  store->Release(1, "dead.tmp-1");
  store->ReleaseSession(1);
  EXPECT_FALSE(io::PathExists(memory_ + "/dead.tmp-1"));
  EXPECT_TRUE(io::PathExists(memory_ + "/live.tmp-2"));
}

TEST_F(AgentMemoryStoreTest, OnlyTheNewestCheckpointIsKept) {
  auto store = Open(1 << 20);
  MakeCheckpoint("a", 10);
  MakeCheckpoint("b", 10);
  ASSERT_TRUE(store->Complete(1, "", Checkpoint("a"), false).ok());
  EXPECT_TRUE(io::PathExists(memory_ + "/.a.meta"));
  ASSERT_TRUE(store->Complete(1, "", Checkpoint("b"), false).ok());
  EXPECT_EQ(Names(*store), std::vector<std::string>{"b"});
  EXPECT_FALSE(io::PathExists(memory_ + "/a"));
  EXPECT_FALSE(io::PathExists(memory_ + "/.a.meta"));
}

TEST_F(AgentMemoryStoreTest, TheRemovedCheckpointsDataFilesAreRecycledSmallestThatHoldsFirst) {
  auto store = Open(1 << 20);
  MakeCheckpoint("a", 1000);
  std::ofstream(memory_ + "/a/data/1-0.bin") << std::string(300, 'y');
  struct stat larger;
  ASSERT_EQ(lstat((memory_ + "/a/data/0-0.bin").c_str(), &larger), 0);
  MakeCheckpoint("b", 10);
  ASSERT_TRUE(store->Complete(1, "", Checkpoint("a"), false).ok());
  ASSERT_TRUE(store->Complete(1, "", Checkpoint("b"), false).ok());
  EXPECT_FALSE(io::PathExists(memory_ + "/a"));
  EXPECT_EQ(store->RecycledBytes(), 1300u);

  // 500 bytes: the 1000-byte file, moved (the same inode) to where the replica is written.
  const std::string first = memory_ + "/b/data/.2-0.bin.part";
  ASSERT_TRUE(store->TakeRecycled(first, 500));
  struct stat taken;
  ASSERT_EQ(lstat(first.c_str(), &taken), 0);
  EXPECT_EQ(taken.st_ino, larger.st_ino);
  EXPECT_EQ(store->RecycledBytes(), 300u);
  // More than any holds: the largest left.
  ASSERT_TRUE(store->TakeRecycled(memory_ + "/b/data/.3-0.bin.part", 5000));
  EXPECT_EQ(store->RecycledBytes(), 0u);
  EXPECT_FALSE(store->TakeRecycled(memory_ + "/b/data/.4-0.bin.part", 1));

  // The next removal brings its files (not the hidden ones, replicas being received); an agent adopting the
  // directory removes them.
  MakeCheckpoint("c", 10);
  ASSERT_TRUE(store->Complete(1, "", Checkpoint("c"), false).ok());
  EXPECT_EQ(store->RecycledBytes(), 10u);
  EXPECT_TRUE(io::PathExists(memory_ + "/.recycled"));
  store.reset();
  auto adopting = Open(1 << 20);
  EXPECT_FALSE(io::PathExists(memory_ + "/.recycled"));
  EXPECT_EQ(adopting->RecycledBytes(), 0u);
}

TEST_F(AgentMemoryStoreTest, ADataFileWithAnotherNameElsewhereIsRemovedNotRecycled) {
  auto store = Open(1 << 20);
  MakeCheckpoint("a", 100);
  std::ofstream(memory_ + "/a/data/1-0.bin") << std::string(50, 'z');
  ASSERT_EQ(link((memory_ + "/a/data/0-0.bin").c_str(), Path("elsewhere").c_str()), 0);
  MakeCheckpoint("b", 10);
  ASSERT_TRUE(store->Complete(1, "", Checkpoint("a"), false).ok());
  ASSERT_TRUE(store->Complete(1, "", Checkpoint("b"), false).ok());
  EXPECT_EQ(store->RecycledBytes(), 50u) << "only the file no other name shares";
  ASSERT_TRUE(store->TakeRecycled(memory_ + "/b/data/.2-0.bin.part", 100));
  EXPECT_FALSE(store->TakeRecycled(memory_ + "/b/data/.3-0.bin.part", 100));
}

TEST_F(AgentMemoryStoreTest, ARecycledFileThatCannotBeMovedIsDeletedAndNotTaken) {
  auto store = Open(1 << 20);
  ASSERT_NO_FATAL_FAILURE(RecycleOneFile(*store, 100));
  EXPECT_FALSE(store->TakeRecycled(memory_ + "/no-such-directory/.0-0.bin.part", 100));
  EXPECT_EQ(store->RecycledBytes(), 0u);
  Result<std::vector<std::string>> left = io::ListDirectory(memory_ + "/.recycled");
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty()) << "the file that could not be moved is deleted, not kept uncounted";
}

TEST_F(AgentMemoryStoreTest, RecycledFilesCountAgainstTheBudgetAndGiveWayToAReservation) {
  auto store = Open(4096);
  ASSERT_NO_FATAL_FAILURE(RecycleOneFile(*store, 3000));
  // b holds 18 bytes and the recycled file 3000: 1078 bytes fit beside them, and the file stays.
  ASSERT_TRUE(store->Reserve(1, "c.tmp-1", 1000).ok());
  EXPECT_EQ(store->RecycledBytes(), 3000u);
  // 2000 more fit only once the recycled file is gone.
  ASSERT_TRUE(store->ReserveIncoming(9, "b", 2000).ok());
  EXPECT_EQ(store->RecycledBytes(), 0u);
  Result<std::vector<std::string>> left = io::ListDirectory(memory_ + "/.recycled");
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
  // What even that cannot make room for is refused.
  EXPECT_EQ(store->Reserve(1, "d.tmp-1", 1100).code(), Code::kNoSpace);
}

TEST_F(AgentMemoryStoreTest, AReservationGetsRecycledFilesForTheDataFilesItNamesButNotOverItsOwn) {
  auto store = Open(1 << 20);
  MakeCheckpoint("a", 1000);
  std::ofstream(memory_ + "/a/data/1-0.bin") << std::string(300, 'y');
  struct stat recycled;
  ASSERT_EQ(lstat((memory_ + "/a/data/0-0.bin").c_str(), &recycled), 0);
  MakeCheckpoint("b", 10);
  ASSERT_TRUE(store->Complete(1, "", Checkpoint("a"), false).ok());
  ASSERT_TRUE(store->Complete(1, "", Checkpoint("b"), false).ok());
  ASSERT_EQ(store->RecycledBytes(), 1300u);

  // The save writes 0-0.bin (900 bytes) and 0-1.bin (200), and already has a file of its own at 0-1.bin.
  const std::string data = memory_ + "/c.tmp-1/data";
  ASSERT_TRUE(io::MakeDirectories(data).ok());
  std::ofstream(data + "/0-1.bin") << "its own";
  ASSERT_TRUE(store->Reserve(1, "c.tmp-1", 1100, {{"0-0.bin", 900}, {"0-1.bin", 200}}).ok());
  struct stat placed;
  ASSERT_EQ(lstat((data + "/0-0.bin").c_str(), &placed), 0);
  EXPECT_EQ(placed.st_ino, recycled.st_ino) << "the smallest recycled file that holds 900 bytes";
  std::ifstream own(data + "/0-1.bin");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(own), {}), "its own") << "a file there is never replaced";
  EXPECT_EQ(store->RecycledBytes(), 300u) << "the file left stays recycled";

  // Only a save's temporary gets files, and only plain names inside its data/ directory.
  EXPECT_EQ(store->Reserve(1, "b", 10, {{"0-0.bin", 10}}).code(), Code::kInvalidArgument);
  EXPECT_EQ(store->Reserve(1, "d.tmp-1", 10, {{"../0-0.bin", 10}}).code(), Code::kInvalidArgument);
  EXPECT_EQ(store->RecycledBytes(), 300u);
}

TEST_F(AgentMemoryStoreTest, ARefusedReservationLeavesNoRecycledFileInItsTemporary) {
  auto store = Open(4096);
  ASSERT_NO_FATAL_FAILURE(RecycleOneFile(*store, 3000));
  const std::string data = memory_ + "/c.tmp-1/data";
  ASSERT_TRUE(io::MakeDirectories(data).ok());
  EXPECT_EQ(store->Reserve(1, "c.tmp-1", 5000, {{"0-0.bin", 3000}}).code(), Code::kNoSpace);
  EXPECT_FALSE(io::PathExists(data + "/0-0.bin")) << "memory counted neither as recycled nor as reserved";
  EXPECT_EQ(store->RecycledBytes(), 0u);
}

TEST_F(AgentMemoryStoreTest, AFetchedOlderStepNeverDisplacesANewerOne) {
  auto store = Open(1 << 20);
  MakeCheckpoint("step-5", 10);
  MakeCheckpoint("step-3", 10);
  MemoryCheckpoint newer = Checkpoint("step-5"), older = Checkpoint("step-3");
  newer.manager_root = older.manager_root = "/storage";
  newer.step = 5;
  older.step = 3;
  ASSERT_TRUE(store->Complete(1, "", newer, false).ok());
  ASSERT_TRUE(store->RegisterFetched(older).ok());
  // Step 5 stays, and stays the newest: it is what a crash persists.
  EXPECT_EQ(Names(*store), (std::vector<std::string>{"step-3", "step-5"}));
  EXPECT_EQ(store->RequestPersistOfNewest()->name, "step-5");
}

TEST_F(AgentMemoryStoreTest, AnOlderCheckpointAwaitingPersistIsKeptUntilPersisted) {
  auto store = Open(1 << 20);
  MakeCheckpoint("a", 10);
  MakeCheckpoint("b", 10);
  Result<std::optional<MemoryCheckpoint>> queued = store->Complete(1, "", Checkpoint("a"), true);
  ASSERT_TRUE(queued.ok() && queued->has_value());
  EXPECT_EQ((*queued)->name, "a");
  ASSERT_TRUE(store->Complete(1, "", Checkpoint("b"), false).ok());
  EXPECT_EQ(Names(*store), (std::vector<std::string>{"a", "b"}));

  store->FinishPersist("a", "disk full", "");
  ASSERT_EQ(Names(*store), (std::vector<std::string>{"a", "b"})) << "a failed persist keeps the memory copy";
  EXPECT_EQ(store->List()[0].persist_error, "disk full");
  EXPECT_FALSE(store->List()[0].persisted);

  Result<std::optional<MemoryCheckpoint>> retried = store->RequestPersist("a");
  ASSERT_TRUE(retried.ok() && retried->has_value());
  store->FinishPersist("a", "", "");
  EXPECT_EQ(Names(*store), std::vector<std::string>{"b"});
  EXPECT_FALSE(io::PathExists(memory_ + "/a"));
}

TEST_F(AgentMemoryStoreTest, CompletingTheSameCheckpointAgainChangesNothing) {
  auto store = Open(1000);
  MakeCheckpoint("a", 10);
  ASSERT_TRUE(store->Reserve(1, "a.tmp-9", 400).ok());
  ASSERT_TRUE(store->Reserve(2, "a.tmp-9", 400).ok());
  Result<std::optional<MemoryCheckpoint>> first = store->Complete(1, "a.tmp-9", Checkpoint("a"), true);
  ASSERT_TRUE(first.ok() && first->has_value());
  Result<std::optional<MemoryCheckpoint>> second = store->Complete(2, "a.tmp-9", Checkpoint("a"), true);
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_FALSE(second->has_value()) << "queued once only";
  EXPECT_EQ(store->List().size(), 1u);
  EXPECT_TRUE(store->Reserve(3, "n.tmp-1", 1000 - 18).ok()) << "both ranks' reservations were dropped";
}

// The persister names a directory on storage after the save id: anything but hex digits is refused.
TEST_F(AgentMemoryStoreTest, CompleteRefusesASaveIdThatCouldNameAnotherPlace) {
  auto store = Open(1 << 20);
  MakeCheckpoint("a", 10);
  MemoryCheckpoint escaping = Checkpoint("a");
  escaping.node_count = 2;
  escaping.save_id = "1/../../elsewhere";
  Result<std::optional<MemoryCheckpoint>> refused = store->Complete(1, "", escaping, true);
  ASSERT_EQ(refused.status().code(), Code::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("no save id"), std::string::npos) << refused.status().message();
  EXPECT_TRUE(store->List().empty());
}

TEST_F(AgentMemoryStoreTest, CompleteWithoutAManifestIsNotFound) {
  auto store = Open(1000);
  ASSERT_TRUE(io::MakeDirectories(memory_ + "/a/data").ok());
  EXPECT_EQ(store->Complete(1, "", Checkpoint("a"), false).status().code(), Code::kNotFound);
  MemoryCheckpoint relative = Checkpoint("a");
  relative.storage_path = "relative/path";
  MakeCheckpoint("a", 1);
  EXPECT_EQ(store->Complete(1, "", relative, false).status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(store->List().empty());
}

TEST_F(AgentMemoryStoreTest, DeathQueuesTheNewestCheckpointOnce) {
  auto store = Open(1 << 20);
  EXPECT_FALSE(store->RequestPersistOfNewest().has_value());
  MakeCheckpoint("a", 10);
  ASSERT_TRUE(store->Complete(1, "", Checkpoint("a"), false).ok());
  std::optional<MemoryCheckpoint> newest = store->RequestPersistOfNewest();
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(newest->name, "a");
  EXPECT_FALSE(store->RequestPersistOfNewest().has_value());
  EXPECT_EQ(store->RequestPersist("missing").status().code(), Code::kNotFound);
}

TEST_F(AgentMemoryStoreTest, AdoptionKeepsCheckpointsWithSidecarsAndClaimedSavesOnly) {
  {
    auto first = Open(1000);
    MakeCheckpoint("a", 100);
    ASSERT_TRUE(first->Complete(1, "", Checkpoint("a"), false).ok());
  }  // the first agent dies: nothing is removed
  MakeCheckpoint("no-sidecar", 10);
  ASSERT_TRUE(io::MakeDirectories(memory_ + "/dead.tmp-1").ok());
  Result<io::Claim> claim = io::ClaimDirectory(memory_ + "/live.tmp-2");
  ASSERT_TRUE(claim.ok());
  std::ofstream(memory_ + "/stray-file") << "x";
  std::ofstream(memory_ + "/.gone.meta") << "not a sidecar of anything";

  auto second = Open(1000);
  ASSERT_EQ(Names(*second), std::vector<std::string>{"a"});
  EXPECT_EQ(second->List()[0].bytes, 108u);
  EXPECT_EQ(second->List()[0].storage_path, "/storage/a");
  EXPECT_EQ(io::ListDirectory(memory_).value(), (std::vector<std::string>{".a.meta", "a", "live.tmp-2"}));
  EXPECT_EQ(second->Reserve(1, "b.tmp-3", 1000 - 108 + 1).code(), Code::kNoSpace) << "the adopted bytes count";
}

// The layout of a restoring job (node 1 of 3, one own file, a save id), for Reassign.
MemoryCheckpoint Layout(const std::string& name, std::vector<std::string> own_files) {
  MemoryCheckpoint layout;
  layout.name = name;
  layout.node_index = 1;
  layout.node_count = 3;
  layout.own_files = std::move(own_files);
  layout.save_id = "0123456789abcdef";
  return layout;
}

TEST_F(AgentMemoryStoreTest, ReassignGivesTheCheckpointTheRestoringJobsLayoutAndAnAgentAfterItKeepsIt) {
  {
    auto store = Open(1 << 20);
    MakeCheckpoint("a", 10);
    MemoryCheckpoint saved = Checkpoint("a");
    saved.node_count = 2;
    saved.save_id = "00000000000000aa";
    ASSERT_TRUE(store->Complete(1, "", saved, false).ok());
    ASSERT_TRUE(store->Reassign(Layout("a", {"0-0.bin"})).ok());
    const MemoryCheckpoint reassigned = store->Find("a").value();
    EXPECT_EQ(reassigned.node_index, 1u);
    EXPECT_EQ(reassigned.node_count, 3u);
    EXPECT_EQ(reassigned.own_files, std::vector<std::string>{"0-0.bin"});
    EXPECT_EQ(reassigned.save_id, "0123456789abcdef");
    EXPECT_EQ(reassigned.storage_path, "/storage/a") << "only the layout changes";
    // A death now persists it with that layout.
    EXPECT_EQ(store->RequestPersistOfNewest().value().save_id, "0123456789abcdef");
  }  // the agent dies
  auto after = Open(1 << 20);
  const MemoryCheckpoint adopted = after->Find("a").value();
  EXPECT_EQ(adopted.node_index, 1u);
  EXPECT_EQ(adopted.node_count, 3u);
  EXPECT_EQ(adopted.save_id, "0123456789abcdef");
}

TEST_F(AgentMemoryStoreTest, ReassignRefusesWhatItCannotPersistAndChangesNothing) {
  auto store = Open(1 << 20);
  MakeCheckpoint("a", 10);
  ASSERT_TRUE(store->Complete(1, "", Checkpoint("a"), false).ok());
  EXPECT_EQ(store->Reassign(Layout("b", {})).code(), Code::kNotFound) << "a checkpoint not kept";
  Status not_held = store->Reassign(Layout("a", {"0-0.bin", "1-0.bin"}));
  EXPECT_EQ(not_held.code(), Code::kNotFound);
  EXPECT_NE(not_held.message().find("holds no data file '1-0.bin'"), std::string::npos) << not_held.message();
  EXPECT_EQ(store->Reassign(Layout("a", {"../a/MANIFEST"})).code(), Code::kInvalidArgument);
  MemoryCheckpoint past_the_count = Layout("a", {});
  past_the_count.node_index = 3;
  EXPECT_EQ(store->Reassign(past_the_count).code(), Code::kInvalidArgument);
  MemoryCheckpoint escaping_id = Layout("a", {});
  escaping_id.save_id = "../../elsewhere";
  EXPECT_EQ(store->Reassign(escaping_id).code(), Code::kInvalidArgument) << "the save id names a directory";
  const MemoryCheckpoint unchanged = store->Find("a").value();
  EXPECT_EQ(unchanged.node_index, 0u);
  EXPECT_EQ(unchanged.node_count, 1u);
  EXPECT_EQ(unchanged.own_files, std::vector<std::string>{"0-0.bin"});
}

TEST_F(AgentMemoryStoreTest, ReassignLeavesAPersistedCheckpointAsItIs) {
  auto store = Open(1 << 20);
  MakeCheckpoint("a", 10);
  ASSERT_TRUE(store->Complete(1, "", Checkpoint("a"), true).ok());
  store->FinishPersist("a", "", "");
  ASSERT_TRUE(store->Reassign(Layout("a", {"0-0.bin"})).ok());
  EXPECT_EQ(store->Find("a")->node_count, 1u);
  EXPECT_TRUE(store->Find("a")->save_id.empty());
}

TEST_F(AgentMemoryStoreTest, OpenRefusesALinkAsTheMemoryDirectory) {
  ASSERT_TRUE(io::MakeDirectories(Path("elsewhere")).ok());
  ASSERT_EQ(symlink(Path("elsewhere").c_str(), memory_.c_str()), 0);
  Result<std::unique_ptr<MemoryStore>> store = MemoryStore::Open(memory_, "n", 1000, [](const std::string&) {});
  EXPECT_EQ(store.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace ckpt::agent

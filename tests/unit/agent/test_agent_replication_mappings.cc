// The receiving agent keeps the mappings of the recycled files that replicas were received into, so that a later
// replica into the same file finds its pages mapped (replication_engine.h, Engine::KeptMapping); a kept file that is
// deleted must be let go of, or its memory would outlive the store's count of it. What this process maps is read
// from /proc/self/maps.
// ctest-labels: threaded
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "agent/replication_files.h"
#include "tests/unit/agent/agent_replication_testing.h"

namespace ckpt::agent {
namespace {

using namespace std::chrono_literals;
using namespace replication_testing;

// The files under `dir` this process maps, once per mapping, as /proc/self/maps names them: a deleted file's name
// ends with " (deleted)".
std::vector<std::string> MappedFilesUnder(const std::string& dir) {
  std::ifstream maps("/proc/self/maps");
  std::vector<std::string> files;
  std::string line;
  while (std::getline(maps, line)) {
    const size_t path = line.find(dir + "/");
    if (path != std::string::npos) files.push_back(line.substr(path));
  }
  return files;
}

// The address ranges at which this process maps files whose names (as /proc/self/maps gives them now) contain
// `text`.
std::vector<std::string> MappingsOf(const std::string& text) {
  std::ifstream maps("/proc/self/maps");
  std::vector<std::string> ranges;
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(text) != std::string::npos) ranges.push_back(line.substr(0, line.find(' ')));
  }
  return ranges;
}

size_t TimesMapped(const std::string& dir, const std::string& file) {
  const std::vector<std::string> files = MappedFilesUnder(dir);
  return static_cast<size_t>(std::count(files.begin(), files.end(), file));
}

class AgentReplicationMappingTest : public AgentReplicationTest {
 protected:
  // Node a saves step `name` with `files`, node b's directory of it is empty, and a's files are pushed to b, whose
  // retention removes its step before (its files become b's recycled files).
  static void ReplicateStep(Node& a, Node& b, const std::string& name,
                            const std::map<std::string, std::string>& files) {
    const std::string manifest = "manifest of " + name;
    WriteCheckpoint(b, {}, manifest, name);
    Complete(b, Checkpoint(1, {}, name));
    WriteCheckpoint(a, files, manifest, name);
    std::vector<std::string> own;
    for (const auto& [file, content] : files) own.push_back(file);
    Complete(a, Checkpoint(0, own, name));
    a.replicator->Replicate(name);
    ASSERT_EQ(ReplicationOutcome(a, 20s, name), "") << name;
    for (const auto& [file, content] : files) {
      EXPECT_EQ(ReadAll(b.dir + "/" + name + "/data/" + file), content) << name << ": " << file;
    }
  }

  // As ReplicateStep, but node a saves as a memory-tier save does: it reserves the bytes for a temporary directory,
  // where its store places its recycled file, writes "0-0.bin" over it, and renames the directory into place.
  static void ReplicateSavedStep(Node& a, Node& b, const std::string& name, const std::string& content) {
    const std::string temporary = name + ".tmp-test";
    const std::string temporary_dir = a.dir + "/" + temporary;
    ASSERT_TRUE(io::MakeDirectories(temporary_dir + "/data").ok());
    ASSERT_TRUE(a.store->Reserve(1, temporary, content.size(), {{"0-0.bin", content.size()}}).ok());
    const std::string path = temporary_dir + "/data/0-0.bin";
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, content.data(), content.size(), 0), static_cast<ssize_t>(content.size()));
    ASSERT_EQ(ftruncate(fd, static_cast<off_t>(content.size())), 0);
    close(fd);
    std::ofstream(temporary_dir + "/MANIFEST", std::ios::binary) << "manifest of " << name;
    ASSERT_EQ(rename(temporary_dir.c_str(), (a.dir + "/" + name).c_str()), 0);
    ASSERT_TRUE(a.store->Complete(1, temporary, Checkpoint(0, {"0-0.bin"}, name), false).ok());
    WriteCheckpoint(b, {}, "manifest of " + name, name);
    Complete(b, Checkpoint(1, {}, name));
    a.replicator->Replicate(name);
    ASSERT_EQ(ReplicationOutcome(a, 20s, name), "") << name;
    EXPECT_EQ(ReadAll(b.dir + "/" + name + "/data/0-0.bin"), content) << name;
  }
};

// Step 7's replica goes into fresh files (written, not mapped); step 8's into step 7's recycled file, mapped and kept;
// step 9's, smaller, into step 8's through the mapping kept (the file is mapped once, not twice); step 10's, larger
// than that file, through writes again, and the mapping too small for it is let go of.
TEST_F(AgentReplicationMappingTest, LaterStepsReplicasAreWrittenThroughTheMappingsKeptFromEarlierOnesByteIdentical) {
  Node& a = AddNode("node-a");
  Node& b = AddNode("node-b");
  ASSERT_TRUE(a.replicator && b.replicator);
  Connect();
  ReplicateStep(a, b, "step-7", {{"0-0.bin", Pattern((3 << 20) + 5, 1)}});
  EXPECT_TRUE(MappedFilesUnder(b.dir).empty()) << "a replica written into fresh files is not mapped";

  ReplicateStep(a, b, "step-8", {{"0-0.bin", Pattern((3 << 20) + 5, 2)}});
  const std::string step8 = b.dir + "/step-8/data/0-0.bin";
  EXPECT_TRUE(Eventually([&] { return TimesMapped(b.dir, step8) == 1; }, 5s)) << "the mapping is not kept";

  ReplicateStep(a, b, "step-9", {{"0-0.bin", Pattern(2 << 20, 3)}});
  const std::string step9 = b.dir + "/step-9/data/0-0.bin";
  EXPECT_TRUE(Eventually([&] { return TimesMapped(b.dir, step9) == 1; }, 5s));
  EXPECT_EQ(MappedFilesUnder(b.dir), std::vector<std::string>{step9}) << "the kept mapping was not the one used";

  ReplicateStep(a, b, "step-10", {{"0-0.bin", Pattern((4 << 20) + 3, 4)}});
  EXPECT_TRUE(Eventually([&] { return MappedFilesUnder(b.dir).empty(); }, 5s))
      << "a kept mapping smaller than the file now is still mapped";
}

// The store deletes b's recycled files (a transfer needs their room) while b keeps a mapping of one: the mapping goes
// before the store's call returns, so that no deleted file holds memory.
TEST_F(AgentReplicationMappingTest, AKeptMappingIsLetGoOfWhenTheStoreDeletesItsFile) {
  Node& a = AddNode("node-a");
  Node& b = AddNode("node-b");
  ASSERT_TRUE(a.replicator && b.replicator);
  Connect();
  ReplicateStep(a, b, "step-7", {{"0-0.bin", Pattern(2 << 20, 5)}});
  ReplicateStep(a, b, "step-8", {{"0-0.bin", Pattern(2 << 20, 6)}});
  ASSERT_TRUE(Eventually([&] { return MappedFilesUnder(b.dir).size() == 1; }, 5s));
  // Step 9 on b removes step 8, whose replica becomes a recycled file, still mapped.
  WriteCheckpoint(b, {}, "manifest of step 9", "step-9");
  Complete(b, Checkpoint(1, {}, "step-9"));
  ASSERT_EQ(b.store->RecycledBytes(), 2u << 20);
  ASSERT_EQ(MappedFilesUnder(b.dir).size(), 1u);

  (void)b.store->ReserveIncoming(99, "step-9", b.store->budget_bytes());  // deletes the recycled files for room
  EXPECT_EQ(b.store->RecycledBytes(), 0u);
  EXPECT_EQ(MappedFilesUnder(b.dir), std::vector<std::string>{});
  b.store->ReleaseIncoming(99);
}

// A kept file deleted other than by the store (by hand) is let go of soon too.
TEST_F(AgentReplicationMappingTest, AKeptMappingOfAFileDeletedByHandIsLetGoOfWithinASecond) {
  Node& a = AddNode("node-a");
  Node& b = AddNode("node-b");
  ASSERT_TRUE(a.replicator && b.replicator);
  Connect();
  ReplicateStep(a, b, "step-7", {{"0-0.bin", Pattern(2 << 20, 7)}});
  ReplicateStep(a, b, "step-8", {{"0-0.bin", Pattern(2 << 20, 8)}});
  const std::string step8 = b.dir + "/step-8/data/0-0.bin";
  ASSERT_TRUE(Eventually([&] { return TimesMapped(b.dir, step8) == 1; }, 5s));

  ASSERT_EQ(unlink(step8.c_str()), 0);
  EXPECT_TRUE(Eventually([&] { return MappedFilesUnder(b.dir).empty(); }, 1s))
      << "still mapped: " << (MappedFilesUnder(b.dir).empty() ? "" : MappedFilesUnder(b.dir).front());
}

// The sender keeps the mapping of a data file it pushed: its next save writes over that file once retention recycles
// it, and the push of that save sends the new bytes from the same mapping, not from a second one.
TEST_F(AgentReplicationMappingTest, APushOfAFileASaveWroteOverSendsItsNewBytesThroughTheMappingKept) {
  Node& a = AddNode("node-a");
  Node& b = AddNode("node-b");
  ASSERT_TRUE(a.replicator && b.replicator);
  Connect();
  ReplicateSavedStep(a, b, "step-7", Pattern((2 << 20) + 9, 11));
  ReplicateSavedStep(a, b, "step-8", Pattern((2 << 20) + 9, 12));
  // Step 8's retention recycled step 7's file: the mapping its push used is still there.
  const std::vector<std::string> kept = MappingsOf(a.dir + "/.recycled/");
  ASSERT_EQ(kept.size(), 1u) << "the sent file's mapping is not kept";
  // Step 9's save writes over that file.
  ReplicateSavedStep(a, b, "step-9", Pattern(2 << 20, 13));
  EXPECT_EQ(MappingsOf(a.dir + "/step-9/data/0-0.bin"), kept) << "step 9 was not sent through step 7's mapping";
}

// A sender that dies while a replica fills a kept mapping: the receive fails, its hidden file goes, and nothing of
// the file stays mapped (a mapping of the unlinked file would hold its memory).
TEST_F(AgentReplicationMappingTest, ASenderThatDiesWhileAKeptMappingIsFilledLeavesNoMappingOfTheFile) {
  constexpr size_t kBytes = 128u << 20;  // the rest of the transfer takes tens of milliseconds at least
  Node& a = AddNode("node-a");
  Node& b = AddNode("node-b", 1ull << 30, kJob, "", 1500ms);
  ASSERT_TRUE(a.replicator && b.replicator);
  Connect();
  ReplicateStep(a, b, "step-7", {{"0-0.bin", Pattern(kBytes, 21)}});
  ReplicateStep(a, b, "step-8", {{"0-0.bin", Pattern(kBytes, 22)}});
  ASSERT_TRUE(Eventually([&] { return MappedFilesUnder(b.dir).size() == 1; }, 5s));
  // Step 9's replica goes into step 8's file, through the mapping kept.
  WriteCheckpoint(b, {}, "manifest of step-9", "step-9");
  Complete(b, Checkpoint(1, {}, "step-9"));
  WriteCheckpoint(a, {{"0-0.bin", Pattern(kBytes, 23)}}, "manifest of step-9", "step-9");
  Complete(a, Checkpoint(0, {"0-0.bin"}, "step-9"));
  a.replicator->Replicate("step-9");
  const std::string part = PartialFilePath(b.dir + "/step-9", "0-0.bin");
  ASSERT_TRUE(Eventually([&] { return io::PathExists(part); }, 10s, 200us)) << "node-b never accepted the push";
  a.replicator.reset();

  EXPECT_TRUE(Eventually([&] { return !io::PathExists(part) && MappedFilesUnder(b.dir).empty(); }, 10s))
      << (MappedFilesUnder(b.dir).empty() ? "the hidden file is left" : MappedFilesUnder(b.dir).front());
  EXPECT_FALSE(io::PathExists(b.dir + "/step-9/data/0-0.bin"));
}

}  // namespace
}  // namespace ckpt::agent
